#include "onepass/exec/captured_graph.h"

#include <cstdio>

#include "onepass/core/error.h"
#include "onepass/exec/counters.h"
#include "onepass/exec/trace_range.h"

namespace onepass {

const char* graph_encoding_name(GraphEncoding encoding) {
  switch (encoding) {
    case GraphEncoding::sequential: return "sequential";
    case GraphEncoding::barriers: return "barriers";
    case GraphEncoding::dataflow: return "dataflow";
  }
  return "?";
}

CapturedGraph::CapturedGraph(Backend& backend, ComputeGraph graph, const CaptureOptions& options)
    : backend_(&backend), graph_(std::move(graph)) {
  const Options& o = backend.options();
  stats_.nodes_recorded = graph_.size();
  if (o.dump_graph) std::fputs(graph_.dump("captured: recorded").c_str(), stderr);
  const TraceRange range("onepass.capture");
  if (options.fuse && o.fuse) {
    stats_.fusions = graph_.fuse(backend.fusion_rules(), backend);
    if (o.dump_graph) std::fputs(graph_.dump("captured: after fuse").c_str(), stderr);
  }
  if (options.encoding == GraphEncoding::barriers && options.reorder && o.reorder &&
      graph_.unannotated_dispatch_count() == 0) {
    stats_.nodes_reordered = graph_.reorder();
    if (o.dump_graph) std::fputs(graph_.dump("captured: after reorder").c_str(), stderr);
  }
  stats_.dispatches = graph_.dispatch_count();
  CommandEncoder encoder(backend, EncoderMode::direct, SubmitMode::graph);
  switch (options.encoding) {
    case GraphEncoding::sequential:
      stats_.barriers = graph_.encode_sequential(encoder);
      break;
    case GraphEncoding::barriers:
      stats_.barriers = graph_.encode_with_barriers(encoder);
      break;
    case GraphEncoding::dataflow: {
      const DataflowStats s = graph_.encode_dataflow(encoder);
      stats_.dataflow_edges = s.edges;
      stats_.dataflow_depth = s.depth;
      break;
    }
  }
  executable_ = encoder.instantiate();
}

void CapturedGraph::launch() {
  auto& c = detail::global_counters();
  detail::bump(c.submissions);
  detail::bump(c.dispatches, executable_->dispatch_count());
  const TraceRange range("onepass.replay");
  executable_->launch();
}

void CapturedGraph::wait() {
  detail::bump(detail::global_counters().syncs);
  executable_->wait();
}

}  // namespace onepass
