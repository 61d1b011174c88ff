#include "layered_dot.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "onepass/exec/dispatch.h"
#include "onepass/exec/passes.h"

namespace onepass::cli {
namespace {

std::vector<const Dispatch*> dispatches_of(const ComputeGraph& graph) {
  std::vector<const Dispatch*> out;
  for (const Node& n : graph.nodes()) {
    if (const Dispatch* d = as_dispatch(n)) out.push_back(d);
  }
  return out;
}

// Graphviz X11 colour names per op kind.
const char* kind_colour(OpKind kind) {
  switch (kind) {
    case OpKind::norm:
    case OpKind::norm_mul:
      return "lightblue";
    case OpKind::add:
    case OpKind::mul:
    case OpKind::scale:
    case OpKind::activation:
      return "palegreen";
    case OpKind::softmax:
    case OpKind::attention:
      return "orange";
    case OpKind::rope:
      return "plum";
    case OpKind::matmul:
    case OpKind::matmul_id:
      return "lightsalmon";
    case OpKind::copy:
    case OpKind::gather:
    case OpKind::kv_write:
      return "khaki";
    default:
      return "lightgrey";
  }
}

std::string escaped(std::string text) {
  for (char& c : text) {
    if (c == '"' || c == '\\') c = '\'';
  }
  return text;
}

}  // namespace

LayerSpans find_layers(const ComputeGraph& graph, int64_t layers) {
  const std::vector<const Dispatch*> d = dispatches_of(graph);
  const size_t n = d.size();
  if (layers < 1) return {};
  const auto l = static_cast<size_t>(layers);
  auto same = [&](size_t a, size_t b) {
    return d[a]->name() == d[b]->name() && d[a]->label == d[b]->label &&
           d[a]->op_kind == d[b]->op_kind;
  };
  // Up to kEdge dispatches before the first layer and after the last (input copies, the
  // embedding; the final norm, the head, the argmax).
  constexpr size_t kEdge = 16;
  for (size_t first = 0; first <= kEdge && first < n; ++first) {
    for (size_t last = 0; last <= kEdge && first + last < n; ++last) {
      const size_t body = n - first - last;
      if (body % l != 0 || body / l == 0) continue;
      const size_t per = body / l;
      bool periodic = true;
      for (size_t i = first; i + per < first + body && periodic; ++i) periodic = same(i, i + per);
      if (periodic) return {first, per, layers};
    }
  }
  return {};
}

std::string layered_dot(const ComputeGraph& graph, const LayerSpans& spans, const std::string& name,
                        int64_t per_row) {
  const std::vector<const Dispatch*> d = dispatches_of(graph);
  const DataflowPlan plan = plan_dataflow(graph.nodes());
  const size_t n = d.size();
  // Cluster of each dispatch: 0 input, 1 + layer, layers + 1 output.
  const auto layers = static_cast<size_t>(spans.found() ? spans.layers : 0);
  auto cluster_of = [&](size_t i) -> size_t {
    if (!spans.found()) return 0;
    if (i < spans.first) return 0;
    const size_t layer = (i - spans.first) / spans.per_layer;
    return layer < layers ? 1 + layer : layers + 1;
  };
  std::ostringstream out;
  out << "digraph \"" << escaped(name) << "\" {\n"
      << "  rankdir=TB; newrank=true; nodesep=0.15; ranksep=0.25;\n"
      << "  node [shape=box style=filled fontsize=10 height=0.3];\n";
  auto node_line = [&](size_t i) {
    std::string label = escaped(d[i]->name());
    if (!d[i]->label.empty()) label += "\\n" + escaped(d[i]->label);
    out << "    n" << i << " [label=\"" << i << ": " << label << "\" fillcolor=\""
        << kind_colour(d[i]->op_kind) << "\"];\n";
  };
  if (!spans.found()) {
    for (size_t i = 0; i < n; ++i) node_line(i);
  } else {
    for (size_t c = 0; c < layers + 2; ++c) {
      std::vector<size_t> members;
      for (size_t i = 0; i < n; ++i) {
        if (cluster_of(i) == c) members.push_back(i);
      }
      if (members.empty()) continue;
      const std::string title = c == 0            ? "input"
                                : c == layers + 1 ? "output"
                                                  : "layer " + std::to_string(c - 1);
      out << "  subgraph cluster_" << c << " {\n    label=\"" << title
          << "\"; style=rounded; color=grey50; fontsize=12;\n";
      for (const size_t i : members) node_line(i);
      out << "  }\n";
    }
  }
  // Edges between layers do not rank the nodes (constraint=false), so the layers of one row
  // sit side by side; an invisible edge from each layer to the one a row below stacks rows.
  for (size_t j = 0; j < plan.deps.size(); ++j) {
    for (const uint32_t i : plan.deps[j]) {
      const size_t from = cluster_of(i);
      const size_t to = cluster_of(j);
      const bool crosses_layers = spans.found() && from != to && from >= 1 && to <= layers;
      out << "  n" << i << " -> n" << j
          << (crosses_layers ? " [constraint=false color=grey60]" : "") << ";\n";
    }
  }
  if (spans.found()) {
    const auto row = static_cast<size_t>(std::max<int64_t>(per_row, 1));
    for (size_t layer = 0; layer + row < layers; ++layer) {
      const size_t last_of_layer = spans.first + (layer + 1) * spans.per_layer - 1;
      const size_t first_below = spans.first + (layer + row) * spans.per_layer;
      out << "  n" << last_of_layer << " -> n" << first_below << " [style=invis];\n";
    }
    // The output below the last row's first layer.
    if (layers > 0 && spans.first + layers * spans.per_layer < n) {
      const size_t row_start = (layers - 1) / row * row;
      out << "  n" << spans.first + (row_start + 1) * spans.per_layer - 1 << " -> n"
          << spans.first + layers * spans.per_layer << " [style=invis];\n";
    }
  }
  out << "}\n";
  return out.str();
}

}  // namespace onepass::cli
