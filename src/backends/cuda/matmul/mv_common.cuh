// Shared pieces of the matrix-vector kernels (device code): block shape, the fused
// operations of a product (MvFusion), and weight-row addressing.
#pragma once

#include "../kernels/common.cuh"
#include "../kernels/quant_dot.cuh"
#include "onepass/ops/matmul.h"

namespace onepass::cuda {

// The general mv kernels: kMvWarps warps per block, each computing kMvRowsPerWarp output
// rows at a time for up to kMvMaxRows rows of x.
constexpr int kMvWarps = 4;
constexpr int kMvRowsPerWarp = 2;
constexpr int kMvMaxRows = 8;  // rows of x

// Dynamic shared memory the mv and mv1 kernels may use (x staged in shared memory, plus
// the weight stages of the mv1 bodies).
constexpr uint32_t kMvSharedBytes = 100 * 1024;

// Dense weights: 16-byte words per lane, row and chunk; two chunks in flight per warp in
// the general body (2 rows x 2 chunks x kDenseLoads words = 128 bytes per lane).
constexpr int kDenseLoads = 2;

// What the fusion pass folded into a matrix-vector product (see FusedMatvecArgs).
struct MvFusion {
  const float* norm_weight = nullptr;
  float eps = 0.0f;
  bool silu = false;                // gated: silu(gate) * up, or gelu(gate) * up
  bool gelu = false;
  const float* residual = nullptr;
  int64_t residual_stride = 0;
  const ops::MatvecRope* rope = nullptr;  // one token's Q/K/V: RoPE and KV-cache writes
  bool residual_early = false;      // FusedMatvecArgs::residual_early
};

__device__ __forceinline__ MvFusion fusion_of(const ops::FusedMatvecArgs& f) {
  return MvFusion{f.norm_weight, f.eps, f.silu != 0, f.gelu != 0, f.residual, f.residual_stride,
                  f.rope.positions != nullptr ? &f.rope : nullptr, f.residual_early != 0};
}

// Weight row of the r-th row a warp reads for output j0 (clamped: a missing second row
// reads the first again and its result is dropped, so the loop has no branches). With
// SiLU fused, output j reads gate row j and up row j + n.
__device__ __forceinline__ int64_t mv_weight_row(const ops::MatmulArgs& a, const MvFusion& f, int64_t j0, int r) {
  if (f.silu) return j0 + (r == 0 ? 0 : a.n);
  return j0 + r < a.n ? j0 + r : j0;
}

// Words of 16 bytes a warp stages per row and chunk: a chunk is 32 units (one per lane),
// whose bytes are contiguous in the row; one more word for an unaligned start.
template <DType W>
constexpr int mv_stage_words() {
  using F = quantdot::Format<W>;
  constexpr int bytes = 32 / F::kUnits * F::kBlockBytes;
  return (bytes + 15) / 16 + 1;
}

}  // namespace onepass::cuda
