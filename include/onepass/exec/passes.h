// The graph passes, as plain functions over node lists, so each can be run, skipped,
// tested and dumped on its own. ComputeGraph's methods are thin wrappers over these.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "onepass/exec/dispatch.h"
#include "onepass/exec/fusion.h"

namespace onepass {

/// Lookahead window of the reorder pass (llama.cpp / the seeds use 64).
inline constexpr size_t kReorderLookahead = 64;

/// Fuses producer -> consumer pairs named by `rules`. A pair is fused when: the producer
/// declares exactly one write W; the first later node touching W is the consumer, whose
/// reads of W lie within W (it may read parts of it) and which does not write it; W is dead after the consumer (the next node
/// touching W overwrites all of it without reading it, or none follows) and lies in none
/// of `keep` (graph outputs); no node in between writes what the producer reads; and the
/// consumer's writes overlap none of the producer's reads. So scratch buffers reused by
/// every layer still fuse. Rules that keep the intermediate (the fused kernel writes it
/// too) skip the deadness condition. The fused dispatch takes the consumer's place;
/// barriers stay where they were. Returns the number of fusions.
uint32_t fuse_pass(std::vector<Node>& nodes, const FusionRules& rules, const Backend& backend,
                   std::span<const MemRange> keep = {});

/// The seeds' greedy reorder (llama.cpp's graph_optimize_reorder): strips barriers, then
/// pulls reorderable dispatches up to kReorderLookahead nodes forward into the open
/// concurrent group when they conflict with neither the group nor the nodes skipped.
/// Non-reorderable kinds stop the lookahead; unannotated dispatches never move and
/// nothing moves past them. Returns the number of nodes not at their old position.
uint32_t reorder_pass(std::vector<Node>& nodes);

/// Positions (dispatch indices) before which encode_with_barriers emits a barrier:
/// wherever a dispatch conflicts with the open group, or an explicit barrier stands.
std::vector<uint32_t> plan_barriers(std::span<const Node> nodes);

/// Exact dependencies for encode_dataflow: deps[i] lists the dispatches (by dispatch
/// index) that dispatch i must wait for — for every hazard pair (earlier, i) there is a
/// path — transitively reduced. Explicit barriers are ignored: ranges are the truth.
struct DataflowPlan {
  std::vector<std::vector<uint32_t>> deps;
  size_t edges = 0;
  size_t depth = 0;  // longest dependency chain, in dispatches
};
DataflowPlan plan_dataflow(std::span<const Node> nodes);

/// Node index at which encode_dual_buffer splits: after the n0-th dispatch, with
/// n0 = max(64, dispatches / 10) (all nodes when there are fewer dispatches).
size_t dual_buffer_split(std::span<const Node> nodes);

/// One line per node: index, kind, kernel, label, launch dims, ranges.
std::string dump_nodes(std::span<const Node> nodes, const std::string& title);

}  // namespace onepass
