#include "onepass/exec/graph_session.h"

#include <cstdio>

#include "onepass/core/error.h"
#include "onepass/exec/trace_range.h"

namespace onepass {
namespace {

uint64_t ns_since(std::chrono::steady_clock::time_point t) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t)
          .count());
}


}  // namespace

uint32_t GroupStats::group_count() const {
  uint32_t n = 0;
  for (uint32_t g : groups) n += g;
  return n;
}

std::string GroupStats::describe() const {
  const uint32_t total = group_count();
  std::string out = cat("dispatches=", dispatches, " barriers=", barriers, " groups=", total,
                        " dispatches/group=",
                        total ? static_cast<double>(dispatches) / total : 0.0);
  for (size_t i = 0; i < groups.size(); ++i) {
    if (groups[i]) out += cat("\n  size ", i + 1, i + 1 == groups.size() ? "+" : "", ": ", groups[i], " groups");
  }
  return out;
}

GraphExecutor::GraphExecutor(std::shared_ptr<Backend> backend) : backend_(std::move(backend)) {
  check(backend_ != nullptr, "GraphExecutor", "null backend");
}

GraphSession GraphExecutor::begin() { return GraphSession(backend_, false); }
GraphSession GraphExecutor::begin_recorded() { return GraphSession(backend_, true); }

GraphSession::GraphSession(std::shared_ptr<Backend> backend, bool recording)
    : backend_(std::move(backend)),
      encoder_(*backend_, recording ? EncoderMode::capture : EncoderMode::direct),
      recording_(recording),
      begun_(std::chrono::steady_clock::now()) {}

GraphSession::GraphSession(GraphSession&& other) noexcept
    : backend_(std::move(other.backend_)),
      encoder_(std::move(other.encoder_)),
      recording_(other.recording_),
      finished_(other.finished_),
      tracker_(std::move(other.tracker_)),
      keep_(std::move(other.keep_)),
      barriers_(other.barriers_),
      dispatches_(other.dispatches_),
      in_group_(other.in_group_),
      group_sizes_(other.group_sizes_),
      begun_(other.begun_) {
  other.finished_ = true;
}

GraphSession::~GraphSession() = default;

void GraphSession::ensure_open(const char* what) const {
  check(!finished_, "GraphSession", what, " on a finished session");
}

void GraphSession::close_group() {
  if (in_group_ == 0) return;
  const size_t bucket = std::min<size_t>(in_group_, group_sizes_.size()) - 1;
  ++group_sizes_[bucket];
  in_group_ = 0;
}

void GraphSession::emit_barrier() {
  close_group();
  encoder_.memory_barrier();
  tracker_.reset();
  ++barriers_;
}

void GraphSession::barrier() {
  ensure_open("barrier");
  emit_barrier();
}

void GraphSession::barrier_between(std::span<const MemRange> reads,
                                   std::span<const MemRange> writes) {
  ensure_open("barrier_between");
  if (recording_) {
    encoder_.set_pending_ranges(std::vector<MemRange>(reads.begin(), reads.end()),
                                std::vector<MemRange>(writes.begin(), writes.end()));
  }
  if (tracker_.conflicts(reads, writes)) emit_barrier();
  tracker_.add(reads, writes);
}

void GraphSession::track_dispatch(std::span<const MemRange> reads,
                                  std::span<const MemRange> writes) {
  ensure_open("track_dispatch");
  if (recording_) {
    encoder_.annotate_last_dispatch_if_missing(std::vector<MemRange>(reads.begin(), reads.end()),
                                               std::vector<MemRange>(writes.begin(), writes.end()));
  }
  tracker_.add(reads, writes);
}

void GraphSession::dispatch(Dispatch d) {
  ensure_open("dispatch");
  if (backend_->options().auto_barrier) {
    if (!d.annotated()) {
      if (dispatches_ > 0) emit_barrier();
      tracker_.add_everything();
    } else {
      if (tracker_.conflicts(d.reads, d.writes)) emit_barrier();
      tracker_.add(d.reads, d.writes);
    }
  }
  ++in_group_;
  ++dispatches_;
  encoder_.dispatch(std::move(d));
}

GroupStats GraphSession::group_stats() const {
  GroupStats s;
  s.dispatches = dispatches_;
  s.barriers = barriers_;
  s.groups = group_sizes_;
  if (in_group_ > 0) ++s.groups[std::min<size_t>(in_group_, s.groups.size()) - 1];
  return s;
}

void GraphSession::dump_group_stats() const {
  std::fprintf(stderr, "[group_stats] %s\n", group_stats().describe().c_str());
}

void GraphSession::keep(const TensorView& t) { keep_.push_back(t.range()); }

FinishStats GraphSession::finish(const FinishOptions& options) {
  if (recording_) return finish_graph(options);
  ensure_open("finish");
  finished_ = true;
  FinishStats s;
  const auto commit_start = std::chrono::steady_clock::now();
  s.encoding_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(commit_start - begun_).count());
  if (options.measure) {
    s.gpu_ns = encoder_.commit_wait_with_gpu_time();
  } else {
    encoder_.commit_and_wait();
  }
  s.wait_ns = ns_since(commit_start);
  s.dispatches = dispatches_;
  s.barriers = barriers_;
  return s;
}

FinishStats GraphSession::finish_optimized() {
  return finish({.fuse = true, .reorder = true, .encoding = Encoding::dual_buffer});
}

CommandEncoder GraphSession::commit() {
  ensure_open("commit");
  finished_ = true;
  if (!recording_) {
    encoder_.commit();
    return std::move(encoder_);
  }
  ComputeGraph graph(encoder_.take_capture());
  CommandEncoder encoder(*backend_, EncoderMode::direct, SubmitMode::graph);
  graph.encode_sequential(encoder);
  encoder.commit();
  return encoder;
}

ComputeGraph GraphSession::take_graph() {
  ensure_open("take_graph");
  check(recording_, "GraphSession", "take_graph() needs a recorded session (begin_recorded)");
  finished_ = true;
  ComputeGraph graph(encoder_.take_capture());
  for (const MemRange& r : keep_) graph.keep(r);
  return graph;
}

FinishStats GraphSession::finish_graph(const FinishOptions& options) {
  ensure_open("finish");
  FinishStats s;
  const Options& o = backend_->options();
  const TraceRange range("onepass.finish");
  const auto t0 = std::chrono::steady_clock::now();
  ComputeGraph graph = take_graph();
  if (o.dump_graph) std::fputs(graph.dump("session: recorded").c_str(), stderr);
  if (options.fuse && o.fuse) {
    s.fusions = graph.fuse(backend_->fusion_rules(), *backend_);
    if (o.dump_graph) std::fputs(graph.dump("session: after fuse").c_str(), stderr);
  }
  const auto t1 = std::chrono::steady_clock::now();
  if (options.reorder && o.reorder) {
    const size_t unannotated = graph.unannotated_dispatch_count();
    if (unannotated == 0) {
      s.nodes_reordered = graph.reorder();
      if (o.dump_graph) std::fputs(graph.dump("session: after reorder").c_str(), stderr);
    } else if (o.graph_diag) {
      std::fprintf(stderr, "[graph_diag] reorder skipped: %zu of %zu dispatches unannotated\n",
                   unannotated, graph.dispatch_count());
    }
  }
  const auto t2 = std::chrono::steady_clock::now();
  s.dispatches = graph.dispatch_count();
  CommandEncoder encoder(*backend_, EncoderMode::direct, SubmitMode::graph);
  std::optional<CommandEncoder> second;
  switch (options.encoding) {
    case Encoding::sequential:
      s.barriers = graph.encode_sequential(encoder);
      break;
    case Encoding::with_barriers:
      s.barriers = graph.encode_with_barriers(encoder);
      break;
    case Encoding::dual_buffer: {
      second.emplace(*backend_, EncoderMode::direct, SubmitMode::graph);
      const DualBufferBarriers b = graph.encode_dual_buffer(encoder, *second);
      s.barriers_first = b.first;
      s.barriers_second = b.second;
      s.barriers = b.first + b.second;
      break;
    }
    case Encoding::dataflow:
      s.dataflow_edges = graph.encode_dataflow(encoder).edges;
      break;
  }
  const auto commit_start = std::chrono::steady_clock::now();
  s.encoding_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(commit_start - begun_).count());
  if (second) {
    second->commit_and_wait();
    encoder.wait_until_completed();  // finished before the second (commit order)
  } else {
    encoder.commit_and_wait();
  }
  s.wait_ns = ns_since(commit_start);
  if (options.measure) {
    s.gpu_ns = encoder.gpu_time_ns().value_or(0);
    if (second) s.gpu_ns += second->gpu_time_ns().value_or(0);
  }
  if (o.graph_diag) {
    auto ms = [](auto a, auto b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    std::fprintf(stderr,
                 "[graph_diag] fuse=%.3fms reorder=%.3fms encode=%.3fms wait=%.3fms "
                 "fusions=%u reordered=%u barriers=%u+%u\n",
                 ms(t0, t1), ms(t1, t2), ms(t2, commit_start), static_cast<double>(s.wait_ns) / 1e6,
                 s.fusions, s.nodes_reordered, s.barriers_first ? s.barriers_first : s.barriers,
                 s.barriers_second);
  }
  return s;
}

}  // namespace onepass
