// The synthetic kernel test_mix_u32 (cheap, order-sensitive u32 mixing, so that any
// misordered or concurrent dependent dispatch changes the result), which the tests add to
// their backends, and random graphs of it over overlapping slices of a few buffers, with a
// host simulation as the sequential reference.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "onepass/exec/backend.h"
#include "onepass/exec/dispatch.h"
#include "onepass/exec/graph_session.h"

namespace onepass::testing {

/// out[i] = mix(a[i], b[i % b_len], salt) for i < n; b may be null (b_len 0). Arguments
/// of "test_mix_u32" (and of the CUDA "test_fault"). The CPU kernel runs kMixBlock values
/// per block; the CUDA kernel one value per thread.
struct MixArgs {
  const uint32_t* a;
  const uint32_t* b;
  uint32_t* out;
  int64_t n;
  int64_t b_len;
  uint32_t salt;
};

inline constexpr int64_t kMixBlock = 256;

/// The mixing function (host and device).
#if defined(__CUDACC__)
__host__ __device__
#endif
inline uint32_t mix_u32(uint32_t a, uint32_t b, uint32_t salt) {
  uint32_t h = a * 0x9e3779b1u ^ (b + 0x7f4a7c15u + (salt << 6) + (salt >> 2));
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

/// Adds the CPU kernel test_mix_u32 to a CPU backend (cpu_backend() does so for every
/// backend it makes; tests/cuda/test_kernels.h has the CUDA kernels).
void add_cpu_synthetic_kernels(Backend& backend);

struct SliceRef {
  int buffer = 0;
  int64_t offset = 0;  // elements
  int64_t length = 0;  // elements
};

struct SyntheticNode {
  SliceRef out;
  SliceRef a;
  SliceRef b;  // length 0: no b
  OpKind kind = OpKind::add;
  uint32_t salt = 0;  // unique per node: identifies it after passes reorder the graph
};

class SyntheticGraph {
 public:
  /// `buffers` buffers of 64..`max_elems` u32 values, `nodes` random nodes. About one
  /// node in `non_reorderable_every` gets a kind that stops the reorder lookahead.
  static SyntheticGraph random(uint64_t seed, int buffers, int nodes, int64_t max_elems,
                               int non_reorderable_every = 8);

  /// Allocates the buffers on `backend` and uploads the initial values.
  void upload(Backend& backend);
  /// The dispatch of node i (buffers must be uploaded).
  Dispatch dispatch(const Backend& backend, size_t i) const;
  /// Emits every node through the session (auto barriers decide the ordering).
  void emit(GraphSession& session) const;
  /// Sequential reference: the buffers after running every node in order on the host.
  std::vector<std::vector<uint32_t>> simulate() const;
  /// Current device contents.
  std::vector<std::vector<uint32_t>> download() const;
  /// Resets device contents to the initial values.
  void reset_contents() const;

  const std::vector<SyntheticNode>& nodes() const { return nodes_; }
  size_t node_index_of(const Dispatch& d) const;  // by salt

 private:
  std::vector<std::vector<uint32_t>> initial_;
  std::vector<SyntheticNode> nodes_;
  std::vector<BufferView> device_;
};

}  // namespace onepass::testing
