// CapturedGraph: the optimised graph of one pass, built once and launched again and
// again. Values that change per step live in device buffers the kernels read, so a
// replay is one small upload (done by the caller) and one launch.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "onepass/exec/backend.h"
#include "onepass/exec/compute_graph.h"

namespace onepass {

/// How the recorded graph is turned into a submission.
enum class GraphEncoding : uint8_t {
  sequential,  // barriers as recorded
  barriers,    // barriers recomputed from ranges (after reordering)
  dataflow,    // exact dependency DAG
};

const char* graph_encoding_name(GraphEncoding encoding);

struct CaptureOptions {
  GraphEncoding encoding = GraphEncoding::dataflow;
  bool fuse = true;
  bool reorder = true;  // only used with GraphEncoding::barriers
};

struct CaptureStats {
  size_t nodes_recorded = 0;
  size_t dispatches = 0;
  uint32_t fusions = 0;
  uint32_t nodes_reordered = 0;
  uint32_t barriers = 0;
  size_t dataflow_edges = 0;
  size_t dataflow_depth = 0;
};

class CapturedGraph {
 public:
  /// Runs the passes over `graph` and instantiates it on `backend`.
  CapturedGraph(Backend& backend, ComputeGraph graph, const CaptureOptions& options = {});

  /// Starts one replay.
  void launch();
  /// Blocks until the last replay finished; throws Error on a device fault.
  void wait();
  /// launch() + wait().
  void run() {
    launch();
    wait();
  }
  /// Device time of the last replay; needs set_timing(true) (or submission profiling).
  std::optional<uint64_t> gpu_time_ns() const { return executable_->gpu_time_ns(); }
  void set_timing(bool on) { executable_->set_timing(on); }
  const ComputeGraph& graph() const { return graph_; }
  const CaptureStats& stats() const { return stats_; }

 private:
  Backend* backend_;
  ComputeGraph graph_;
  CaptureStats stats_;
  std::unique_ptr<Executable> executable_;
};

}  // namespace onepass
