// The CUDA-core tile product shared by the matrix-matrix kernels (mm_*, mm_affine_*,
// mm_id_*): 256 threads, a 64 x 64 tile of out, K in steps of 32 staged in shared memory;
// each thread owns 4 x 4 outputs. Device code only.
#pragma once

namespace onepass::cuda::tile {

constexpr int kTile = 64;
constexpr int kStep = 32;
/// Shared-memory staging of one K step: rows x values, +1 to avoid bank conflicts on the
/// column reads.
using Stage = float[kTile][kStep + 1];

/// Thread t owns out rows (x rows) 4 * (t / 16) .. +3 and columns (weight rows)
/// 4 * (t % 16) .. +3 of the tile.
__device__ __forceinline__ int row_group() { return static_cast<int>(threadIdx.x) >> 4; }
__device__ __forceinline__ int col_group() { return static_cast<int>(threadIdx.x) & 15; }

/// acc += x tile · w tileᵀ over one staged K step.
__device__ __forceinline__ void accumulate(const Stage& xt, const Stage& wt, float (&acc)[4][4]) {
  const int tm = row_group();
  const int tn = col_group();
#pragma unroll 8
  for (int c = 0; c < kStep; ++c) {
    float xv[4], wv[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      xv[i] = xt[tm * 4 + i][c];
      wv[i] = wt[tn * 4 + i][c];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(xv[i], wv[j], acc[i][j]);
    }
  }
}

}  // namespace onepass::cuda::tile
