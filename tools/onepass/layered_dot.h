// A decode step as Graphviz DOT, its dispatches grouped into one cluster per layer and the
// layers laid out in rows, so that a step of hundreds of dispatches renders as a readable
// picture (SVG or PNG) instead of one long chain.
#pragma once

#include <cstdint>
#include <string>

#include "onepass/exec/compute_graph.h"

namespace onepass::cli {

/// Dispatch ranges of a step: [0, first) before the layers, then `layers` layers of
/// `per_layer` dispatches each, then the rest.
struct LayerSpans {
  size_t first = 0;
  size_t per_layer = 0;
  int64_t layers = 0;
  bool found() const { return per_layer > 0; }
};

/// The layer structure of `graph`: the shortest prologue and epilogue around `layers`
/// repetitions of the same sequence of kernels (nothing found when there is none).
LayerSpans find_layers(const ComputeGraph& graph, int64_t layers);

/// DOT of `graph`: clusters "input", "layer 0".. "layer L-1", "output" (one cluster per
/// dispatch range of `spans`, or no clusters when nothing was found), `per_row` layers a
/// row, edges from the dataflow plan.
std::string layered_dot(const ComputeGraph& graph, const LayerSpans& spans, const std::string& name,
                        int64_t per_row = 6);

}  // namespace onepass::cli
