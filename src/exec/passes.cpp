#include "onepass/exec/passes.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "onepass/exec/conflict.h"

namespace onepass {
namespace {

bool overlaps_any(const MemRange& r, std::span<const MemRange> ranges) {
  for (const MemRange& x : ranges) {
    if (r.overlaps(x)) return true;
  }
  return false;
}

bool touches(const Dispatch& d, const MemRange& r) {
  return overlaps_any(r, d.reads) || overlaps_any(r, d.writes);
}

bool any_overlap(std::span<const MemRange> a, std::span<const MemRange> b) {
  for (const MemRange& x : a) {
    if (overlaps_any(x, b)) return true;
  }
  return false;
}

// Index of the consumer for producer `p`, or -1 when the generic legality fails.
long find_consumer(const std::vector<Node>& nodes, size_t p, const MemRange& w) {
  const Dispatch& producer = *as_dispatch(nodes[p]);
  for (size_t j = p + 1; j < nodes.size(); ++j) {
    const Dispatch* x = as_dispatch(nodes[j]);
    if (x == nullptr) continue;
    if (!x->annotated()) return -1;  // may touch anything
    if (touches(*x, w)) return static_cast<long>(j);
    // The fused dispatch runs at the consumer's place, so the producer's inputs must
    // still hold the same values there.
    if (any_overlap(x->writes, producer.reads)) return -1;
  }
  return -1;
}

}  // namespace

uint32_t fuse_pass(std::vector<Node>& nodes, const FusionRules& rules,
                   const Backend& backend, std::span<const MemRange> keep) {
  if (rules.empty()) return 0;
  std::vector<bool> removed(nodes.size(), false);
  uint32_t fusions = 0;
  for (size_t p = 0; p < nodes.size(); ++p) {
    if (removed[p]) continue;
    const Dispatch* producer = as_dispatch(nodes[p]);
    if (producer == nullptr || producer->writes.size() != 1) continue;
    const bool has_rule = std::any_of(rules.rules().begin(), rules.rules().end(),
                                      [&](const FusionRule& r) { return r.producer == producer->op_kind; });
    if (!has_rule) continue;
    const MemRange w = producer->writes[0];
    const long c_index = find_consumer(nodes, p, w);
    if (c_index < 0) continue;
    const size_t c = static_cast<size_t>(c_index);
    const Dispatch& consumer = *as_dispatch(nodes[c]);
    // Whatever the consumer reads of the intermediate must lie within it (the fused
    // kernel computes those values itself), and it must not write it (unless the rule's
    // fused kernel writes what the consumer leaves there).
    bool reads_inside = true;
    for (const MemRange& r : consumer.reads) reads_inside = reads_inside && (!r.overlaps(w) || w.contains(r));
    if (!reads_inside) continue;
    bool writes_inside = true;
    for (const MemRange& r : consumer.writes) writes_inside = writes_inside && (!r.overlaps(w) || w.contains(r));
    if (!writes_inside) continue;
    const bool updates_intermediate = overlaps_any(w, consumer.writes);
    if (any_overlap(consumer.writes, producer->reads)) continue;
    // Unless the fused kernel still writes it, the producer's value must be dead after
    // the consumer: the next node touching the intermediate must overwrite all of it
    // without reading it (or none may follow), and it must not be a graph output.
    bool live_after = overlaps_any(w, keep);
    for (size_t k = c + 1; k < nodes.size(); ++k) {
      const Dispatch* later = as_dispatch(nodes[k]);
      if (later == nullptr || removed[k]) continue;
      if (!later->annotated() || overlaps_any(w, later->reads)) {
        live_after = true;
        break;
      }
      const bool overwrites = std::any_of(later->writes.begin(), later->writes.end(),
                                          [&](const MemRange& r) { return r.contains(w); });
      if (overwrites) break;
    }
    for (const FusionRule& rule : rules.rules()) {
      if (rule.producer != producer->op_kind || rule.consumer != consumer.op_kind) continue;
      if (live_after && !rule.keeps_intermediate) continue;
      if (updates_intermediate && !(rule.consumer_updates_intermediate && rule.keeps_intermediate)) continue;
      std::optional<Dispatch> fused = rule.build(*producer, consumer, backend);
      if (!fused) continue;
      fused->reads = producer->reads;
      for (const MemRange& r : consumer.reads) {
        if (!r.overlaps(w)) fused->reads.push_back(r);
      }
      // The rule's own early reads (what the fused kernel reads before its wait), then both
      // dispatches'.
      fused->early_reads.insert(fused->early_reads.end(), producer->early_reads.begin(), producer->early_reads.end());
      fused->early_reads.insert(fused->early_reads.end(), consumer.early_reads.begin(), consumer.early_reads.end());
      fused->writes = consumer.writes;
      if (rule.keeps_intermediate) fused->writes.insert(fused->writes.begin(), w);
      fused->retained = producer->retained;
      fused->retained.insert(fused->retained.end(), consumer.retained.begin(), consumer.retained.end());
      if (fused->label.empty()) {
        fused->label = producer->label.empty() && consumer.label.empty()
                           ? rule.name
                           : producer->label + "+" + consumer.label;
      }
      nodes[c] = std::move(*fused);
      removed[p] = true;
      ++fusions;
      break;
    }
  }
  if (fusions == 0) return 0;
  std::vector<Node> kept;
  kept.reserve(nodes.size() - fusions);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!removed[i]) kept.push_back(std::move(nodes[i]));
  }
  nodes = std::move(kept);
  return fusions;
}

uint32_t reorder_pass(std::vector<Node>& nodes) {
  std::vector<Node> dispatches;
  dispatches.reserve(nodes.size());
  for (Node& n : nodes) {
    if (!is_barrier(n)) dispatches.push_back(std::move(n));
  }
  const size_t n = dispatches.size();
  std::vector<size_t> order;
  order.reserve(n);
  std::vector<bool> used(n, false);
  RangeTracker group;    // the open concurrent group (mrs0)
  RangeTracker skipped;  // nodes the lookahead stepped over (mrs1)

  for (size_t i0 = 0; i0 < n; ++i0) {
    if (used[i0]) continue;
    const Dispatch& d0 = *as_dispatch(dispatches[i0]);
    if (!d0.annotated()) {
      // Touches anything: a group of its own, and nothing may be pulled across it.
      group.reset();
      group.add_everything();
      order.push_back(i0);
      used[i0] = true;
      continue;
    }
    if (group.conflicts(d0.reads, d0.writes)) {
      skipped.reset();
      skipped.add(d0.reads, d0.writes);
      const size_t end = std::min(n, i0 + kReorderLookahead);
      for (size_t i1 = i0 + 1; i1 < end; ++i1) {
        if (used[i1]) continue;
        const Dispatch& d1 = *as_dispatch(dispatches[i1]);
        if (!is_reorderable(d1.op_kind) || !d1.annotated()) break;
        if (!group.conflicts(d1.reads, d1.writes) && !skipped.conflicts(d1.reads, d1.writes)) {
          group.add(d1.reads, d1.writes);
          order.push_back(i1);
          used[i1] = true;
        } else {
          skipped.add(d1.reads, d1.writes);
        }
      }
      group.reset();
    }
    group.add(d0.reads, d0.writes);
    order.push_back(i0);
    used[i0] = true;
  }

  uint32_t moved = 0;
  nodes.clear();
  for (size_t pos = 0; pos < order.size(); ++pos) {
    if (order[pos] != pos) ++moved;
    nodes.push_back(std::move(dispatches[order[pos]]));
  }
  return moved;
}

std::vector<uint32_t> plan_barriers(std::span<const Node> nodes) {
  std::vector<uint32_t> before;
  RangeTracker group;
  bool pending_explicit = false;
  uint32_t index = 0;
  for (const Node& node : nodes) {
    const Dispatch* d = as_dispatch(node);
    if (d == nullptr) {
      pending_explicit = true;
      continue;
    }
    bool barrier = false;
    if (index > 0) {
      barrier = pending_explicit || !d->annotated() || group.conflicts(d->reads, d->writes);
    }
    if (barrier) {
      before.push_back(index);
      group.reset();
    }
    if (d->annotated()) {
      group.add(d->reads, d->writes);
    } else {
      group.add_everything();
    }
    pending_explicit = false;
    ++index;
  }
  return before;
}

DataflowPlan plan_dataflow(std::span<const Node> nodes) {
  std::vector<const Dispatch*> ds;
  for (const Node& n : nodes) {
    if (const Dispatch* d = as_dispatch(n)) ds.push_back(d);
  }
  const size_t n = ds.size();
  const size_t words = (n + 63) / 64;
  std::vector<uint64_t> ancestors(n * words, 0);  // bitset per dispatch
  std::vector<size_t> level(n, 1);
  DataflowPlan plan;
  plan.deps.resize(n);
  for (size_t j = 0; j < n; ++j) {
    uint64_t* reach = &ancestors[j * words];
    for (size_t i = j; i-- > 0;) {
      if ((reach[i / 64] >> (i % 64)) & 1u) continue;  // already ordered through another dep
      if (hazard_between(*ds[i], *ds[j]) == Hazard::none) continue;
      plan.deps[j].push_back(static_cast<uint32_t>(i));
      const uint64_t* from = &ancestors[i * words];
      for (size_t w = 0; w < words; ++w) reach[w] |= from[w];
      reach[i / 64] |= uint64_t{1} << (i % 64);
      level[j] = std::max(level[j], level[i] + 1);
    }
    std::reverse(plan.deps[j].begin(), plan.deps[j].end());
    plan.edges += plan.deps[j].size();
    plan.depth = std::max(plan.depth, level[j]);
  }
  return plan;
}

size_t dual_buffer_split(std::span<const Node> nodes) {
  size_t total = 0;
  for (const Node& n : nodes) total += is_barrier(n) ? 0 : 1;
  const size_t n0 = std::max<size_t>(64, total / 10);
  size_t seen = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!is_barrier(nodes[i]) && ++seen == n0) return i + 1;
  }
  return nodes.size();
}

std::string dump_nodes(std::span<const Node> nodes, const std::string& title) {
  std::ostringstream out;
  size_t dispatches = 0;
  size_t barriers = 0;
  for (const Node& n : nodes) (is_barrier(n) ? barriers : dispatches)++;
  out << "== " << title << ": " << nodes.size() << " nodes, " << dispatches << " dispatches, "
      << barriers << " barriers\n";
  size_t index = 0;
  for (const Node& n : nodes) {
    char prefix[16];
    std::snprintf(prefix, sizeof prefix, "%5zu ", index++);
    out << prefix;
    const Dispatch* d = as_dispatch(n);
    if (d == nullptr) {
      out << "---- barrier ----\n";
      continue;
    }
    out << op_kind_name(d->op_kind) << " " << d->name();
    if (!d->label.empty()) out << " '" << d->label << "'";
    out << " grid=" << d->dims.grid.x << "x" << d->dims.grid.y << "x" << d->dims.grid.z
        << " block=" << d->dims.block.x << "x" << d->dims.block.y << "x" << d->dims.block.z;
    if (d->dims.shared_bytes) out << " smem=" << d->dims.shared_bytes;
    out << " R{";
    for (const MemRange& r : d->reads) out << " " << std::hex << r.begin << "+" << std::dec << r.size();
    out << " } W{";
    for (const MemRange& r : d->writes) out << " " << std::hex << r.begin << "+" << std::dec << r.size();
    out << " }\n";
  }
  return out.str();
}

}  // namespace onepass
