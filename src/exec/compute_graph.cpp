#include "onepass/exec/compute_graph.h"

#include <sstream>

#include "onepass/core/error.h"

namespace onepass {
namespace {

uint32_t encode_range_with_barriers(std::span<const Node> nodes, CommandEncoder& encoder) {
  const std::vector<uint32_t> before = plan_barriers(nodes);
  size_t next = 0;
  uint32_t index = 0;
  uint32_t barriers = 0;
  for (const Node& n : nodes) {
    const Dispatch* d = as_dispatch(n);
    if (d == nullptr) continue;
    if (next < before.size() && before[next] == index) {
      encoder.memory_barrier();
      ++barriers;
      ++next;
    }
    encoder.dispatch(*d);
    ++index;
  }
  return barriers;
}

// Colours per op kind for the DOT dump (graphviz X11 names).
const char* kind_colour(OpKind kind) {
  switch (kind) {
    case OpKind::norm:
    case OpKind::norm_mul: return "lightblue";
    case OpKind::add:
    case OpKind::mul:
    case OpKind::scale:
    case OpKind::activation: return "palegreen";
    case OpKind::softmax:
    case OpKind::attention: return "orange";
    case OpKind::rope: return "plum";
    case OpKind::matmul:
    case OpKind::matmul_id: return "lightsalmon";
    case OpKind::copy:
    case OpKind::gather:
    case OpKind::kv_write: return "khaki";
    default: return "lightgrey";
  }
}

}  // namespace

size_t ComputeGraph::dispatch_count() const {
  size_t n = 0;
  for (const Node& node : nodes_) n += is_barrier(node) ? 0 : 1;
  return n;
}

size_t ComputeGraph::barrier_count() const { return nodes_.size() - dispatch_count(); }

size_t ComputeGraph::unannotated_dispatch_count() const {
  size_t n = 0;
  for (const Node& node : nodes_) {
    const Dispatch* d = as_dispatch(node);
    n += (d != nullptr && !d->annotated()) ? 1 : 0;
  }
  return n;
}

uint32_t ComputeGraph::encode_sequential(CommandEncoder& encoder) const {
  check(!encoder.is_capturing(), "ComputeGraph", "encode into a capturing encoder");
  uint32_t barriers = 0;
  for (const Node& n : nodes_) {
    if (const Dispatch* d = as_dispatch(n)) {
      encoder.dispatch(*d);
    } else {
      encoder.memory_barrier();
      ++barriers;
    }
  }
  return barriers;
}

uint32_t ComputeGraph::encode_with_barriers(CommandEncoder& encoder) const {
  check(!encoder.is_capturing(), "ComputeGraph", "encode into a capturing encoder");
  return encode_range_with_barriers(nodes_, encoder);
}

DualBufferBarriers ComputeGraph::encode_dual_buffer(CommandEncoder& first,
                                                    CommandEncoder& second) const {
  check(!first.is_capturing() && !second.is_capturing(), "ComputeGraph",
        "encode into a capturing encoder");
  const size_t split = dual_buffer_split(nodes_);
  const std::span<const Node> all(nodes_);
  DualBufferBarriers out;
  out.first = encode_range_with_barriers(all.subspan(0, split), first);
  out.split_dispatches = first.dispatches_encoded();
  // The device starts on the first chunk while the host encodes the second.
  first.commit();
  out.second = encode_range_with_barriers(all.subspan(split), second);
  return out;
}

DataflowStats ComputeGraph::encode_dataflow(CommandEncoder& encoder) const {
  check(!encoder.is_capturing(), "ComputeGraph", "encode into a capturing encoder");
  const DataflowPlan plan = plan_dataflow(nodes_);
  const uint32_t base = encoder.dispatches_encoded();
  std::vector<uint32_t> deps;
  size_t index = 0;
  for (const Node& n : nodes_) {
    const Dispatch* d = as_dispatch(n);
    if (d == nullptr) continue;
    deps.clear();
    for (uint32_t dep : plan.deps[index]) deps.push_back(base + dep);
    encoder.dispatch_after(*d, deps);
    ++index;
  }
  return {plan.edges, plan.depth};
}

std::string ComputeGraph::to_dot(const std::string& name) const {
  const DataflowPlan plan = plan_dataflow(nodes_);
  std::ostringstream out;
  out << "digraph \"" << name << "\" {\n  rankdir=TB;\n  node [shape=box style=filled fontsize=10];\n";
  size_t index = 0;
  for (const Node& n : nodes_) {
    const Dispatch* d = as_dispatch(n);
    if (d == nullptr) continue;
    std::string label = d->name();
    if (!d->label.empty()) label += "\\n" + d->label;
    for (char& c : label) {
      if (c == '"') c = '\'';
    }
    out << "  n" << index << " [label=\"" << index << ": " << label << "\" fillcolor=\""
        << kind_colour(d->op_kind) << "\"];\n";
    ++index;
  }
  for (size_t j = 0; j < plan.deps.size(); ++j) {
    for (uint32_t i : plan.deps[j]) out << "  n" << i << " -> n" << j << ";\n";
  }
  out << "}\n";
  return out.str();
}

}  // namespace onepass
