// ComputeGraph: the recorded dispatches and barriers of one pass, the passes over it and
// the ways of encoding it into a submission.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "onepass/exec/command_encoder.h"
#include "onepass/exec/dispatch.h"
#include "onepass/exec/fusion.h"
#include "onepass/exec/passes.h"

namespace onepass {

/// Barriers emitted into each half of a dual-buffer encode.
struct DualBufferBarriers {
  uint32_t first = 0;
  uint32_t second = 0;
  size_t split_dispatches = 0;  // dispatches in the first submission
};

struct DataflowStats {
  size_t edges = 0;
  size_t depth = 0;
};

class ComputeGraph {
 public:
  ComputeGraph() = default;
  explicit ComputeGraph(std::vector<Node> nodes) : nodes_(std::move(nodes)) {}

  void record(Node node) { nodes_.push_back(std::move(node)); }
  /// Marks a range as a graph output: fusion keeps it materialised.
  void keep(const MemRange& range) { keep_.push_back(range); }

  size_t size() const { return nodes_.size(); }
  bool empty() const { return nodes_.empty(); }
  size_t dispatch_count() const;
  size_t barrier_count() const;
  /// Dispatches that declare no writes (they block reordering and concurrency).
  size_t unannotated_dispatch_count() const;
  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<Node>& mutable_nodes() { return nodes_; }
  const std::vector<MemRange>& kept() const { return keep_; }

  // --- passes ----------------------------------------------------------------------
  uint32_t fuse(const FusionRules& rules, const Backend& backend) {
    return fuse_pass(nodes_, rules, backend, keep_);
  }
  uint32_t reorder() { return reorder_pass(nodes_); }

  // --- encodings (the encoder must be in direct mode) --------------------------------
  /// Replays nodes as recorded: each barrier node becomes a barrier. Returns barriers.
  uint32_t encode_sequential(CommandEncoder& encoder) const;
  /// Recomputes barriers from ranges (for reordered graphs). Returns barriers.
  uint32_t encode_with_barriers(CommandEncoder& encoder) const;
  /// Encodes the first max(64, n/10) dispatches into `first` and commits it, then the
  /// rest into `second` (not committed), each with barriers recomputed.
  DualBufferBarriers encode_dual_buffer(CommandEncoder& first, CommandEncoder& second) const;
  /// Exact dataflow DAG: each dispatch waits only for the dispatches it has a hazard with.
  DataflowStats encode_dataflow(CommandEncoder& encoder) const;

  std::string dump(const std::string& title) const { return dump_nodes(nodes_, title); }
  /// Graphviz DOT: nodes coloured by op kind, edges from the dataflow plan.
  std::string to_dot(const std::string& name = "onepass") const;

 private:
  std::vector<Node> nodes_;
  std::vector<MemRange> keep_;
};

}  // namespace onepass
