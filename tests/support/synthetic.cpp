#include "support/synthetic.h"

#include <algorithm>

#include "support/testing.h"

namespace onepass::testing {
namespace {

bool overlap(const SliceRef& x, const SliceRef& y) {
  return x.buffer == y.buffer && x.length > 0 && y.length > 0 && x.offset < y.offset + y.length &&
         y.offset < x.offset + x.length;
}

}  // namespace

SyntheticGraph SyntheticGraph::random(uint64_t seed, int buffers, int nodes, int64_t max_elems,
                                      int non_reorderable_every) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  SyntheticGraph g;
  for (int b = 0; b < buffers; ++b) {
    g.initial_.push_back(random_u32(static_cast<size_t>(uniform(64, max_elems)), rng()));
  }
  auto random_slice = [&](int64_t length) {
    SliceRef s;
    s.buffer = static_cast<int>(uniform(0, buffers - 1));
    const auto size = static_cast<int64_t>(g.initial_[static_cast<size_t>(s.buffer)].size());
    s.length = std::min(length, size);
    s.offset = uniform(0, size - s.length);
    return s;
  };
  const uint32_t salt_base = static_cast<uint32_t>(rng());
  for (int i = 0; i < nodes; ++i) {
    SyntheticNode n;
    n.salt = salt_base + static_cast<uint32_t>(i);
    for (int attempt = 0;; ++attempt) {
      // Mostly small slices so that partial overlaps and disjoint slices of one buffer
      // are both common.
      n.out = random_slice(uniform(1, max_elems / 2));
      n.a = random_slice(n.out.length);
      n.a.length = n.out.length;
      if (n.a.offset + n.a.length > static_cast<int64_t>(g.initial_[static_cast<size_t>(n.a.buffer)].size())) continue;
      n.b = uniform(0, 3) == 0 ? SliceRef{} : random_slice(uniform(1, 64));
      if (!overlap(n.out, n.a) && !overlap(n.out, n.b)) break;
      if (attempt > 100) {  // fall back to no inputs overlapping: read from elsewhere
        n.b = SliceRef{};
        n.a = n.out;
        n.a.buffer = (n.out.buffer + 1) % buffers;
        n.a.offset = 0;
        n.a.length = std::min<int64_t>(n.out.length, static_cast<int64_t>(g.initial_[static_cast<size_t>(n.a.buffer)].size()));
        n.out.length = n.a.length;
        break;
      }
    }
    n.kind = (non_reorderable_every > 0 && uniform(1, non_reorderable_every) == 1)
                 ? (uniform(0, 1) ? OpKind::attention : OpKind::other)
                 : (uniform(0, 1) ? OpKind::add : OpKind::matmul);
    g.nodes_.push_back(n);
  }
  return g;
}

void SyntheticGraph::upload(Backend& backend) {
  device_.clear();
  for (const auto& values : initial_) {
    BufferView v = backend.alloc(values.size() * sizeof(uint32_t));
    v.write(values);
    device_.push_back(v);
  }
}

void SyntheticGraph::reset_contents() const {
  for (size_t b = 0; b < initial_.size(); ++b) device_[b].write(initial_[b]);
}

Dispatch SyntheticGraph::dispatch(const Backend& backend, size_t i) const {
  const SyntheticNode& n = nodes_[i];
  auto view = [&](const SliceRef& s) {
    return device_[static_cast<size_t>(s.buffer)].slice(static_cast<size_t>(s.offset) * 4,
                                                         static_cast<size_t>(s.length) * 4);
  };
  MixArgs args{};
  const BufferView out = view(n.out);
  const BufferView a = view(n.a);
  args.out = static_cast<uint32_t*>(out.data());
  args.a = static_cast<const uint32_t*>(a.data());
  args.n = n.out.length;
  args.salt = n.salt;
  const Kernel& k = backend.registry().get("test_mix_u32");
  LaunchDims dims;
  if (backend.kind() == BackendKind::cpu) {
    dims.grid.x = static_cast<uint32_t>((args.n + kMixBlock - 1) / kMixBlock);
  } else {
    dims.block.x = 128;
    dims.grid.x = static_cast<uint32_t>((args.n + 127) / 128);
  }
  BufferView b;
  if (n.b.length > 0) {
    b = view(n.b);
    args.b = static_cast<const uint32_t*>(b.data());
    args.b_len = n.b.length;
  }
  Dispatch d(k, dims, args, n.kind, "node" + std::to_string(i));
  d.read(a);
  if (b) d.read(b);
  d.write(out);
  return d;
}

void SyntheticGraph::emit(GraphSession& session) const {
  for (size_t i = 0; i < nodes_.size(); ++i) session.dispatch(dispatch(session.backend(), i));
}

std::vector<std::vector<uint32_t>> SyntheticGraph::simulate() const {
  auto data = initial_;
  for (const SyntheticNode& n : nodes_) {
    auto& out = data[static_cast<size_t>(n.out.buffer)];
    const auto& a = data[static_cast<size_t>(n.a.buffer)];
    const auto* b = n.b.length > 0 ? &data[static_cast<size_t>(n.b.buffer)] : nullptr;
    std::vector<uint32_t> result(static_cast<size_t>(n.out.length));
    for (int64_t i = 0; i < n.out.length; ++i) {
      const uint32_t bv = b ? (*b)[static_cast<size_t>(n.b.offset + i % n.b.length)] : 0u;
      result[static_cast<size_t>(i)] = mix_u32(a[static_cast<size_t>(n.a.offset + i)], bv, n.salt);
    }
    std::copy(result.begin(), result.end(), out.begin() + n.out.offset);
  }
  return data;
}

std::vector<std::vector<uint32_t>> SyntheticGraph::download() const {
  std::vector<std::vector<uint32_t>> out;
  for (const BufferView& v : device_) out.push_back(v.read_as<uint32_t>());
  return out;
}

size_t SyntheticGraph::node_index_of(const Dispatch& d) const {
  const uint32_t salt = d.args_as<MixArgs>().salt;
  return static_cast<size_t>(salt - nodes_.front().salt);
}

}  // namespace onepass::testing
