// CUDA kernel mm_f32_f32: matrix-matrix product with f32 weights on the CUDA cores,
// out [M, N] = x [M, K] · wᵀ. Tiles of 64 x 64 outputs, K in steps of 32 staged in shared
// memory, 4 x 4 outputs per thread. mm for the other weight types runs on the tensor
// cores (gemm_tc.cu).
#include "../kernels/common.cuh"
#include "../kernels/registration.h"
#include "../kernels/tile.cuh"
#include "onepass/ops/matmul.h"
#include "register.h"

namespace onepass::cuda {
namespace {

using tile::kStep;
using tile::kTile;

// The w tile of one K step.
__device__ __forceinline__ void load_w_tile(const ops::MatmulArgs& a, int64_t n0, int64_t k0, float (*wt)[kStep + 1]) {
  const auto* wb = static_cast<const uint8_t*>(a.w);
  for (int i = threadIdx.x; i < kTile * kStep; i += blockDim.x) {
    const int r = i / kStep;
    const int c = i - r * kStep;
    const int64_t n = n0 + r;
    const int64_t k = k0 + c;
    wt[r][c] = (n < a.n && k < a.k) ? reinterpret_cast<const float*>(wb + n * a.w_row_bytes)[k] : 0.0f;
  }
}

__global__ void __launch_bounds__(256) mm_f32_kernel(const __grid_constant__ ops::MatmulArgs a) {
  __shared__ float xt[kTile][kStep + 1];  // +1: no bank conflicts on the transposed reads
  __shared__ float wt[kTile][kStep + 1];
  pdl_wait();
  const int64_t n0 = int64_t{blockIdx.x} * kTile;
  const int64_t m0 = int64_t{blockIdx.y} * kTile;
  const int tn = threadIdx.x & 15;  // 4 output columns (weight rows) each
  const int tm = threadIdx.x >> 4;  // 4 output rows (x rows) each
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < a.k; k0 += kStep) {
    for (int i = threadIdx.x; i < kTile * kStep; i += blockDim.x) {
      const int r = i / kStep;
      const int c = i - r * kStep;
      const int64_t m = m0 + r;
      const int64_t k = k0 + c;
      xt[r][c] = (m < a.m && k < a.k) ? a.x[m * a.x_stride + k] : 0.0f;
    }
    load_w_tile(a, n0, k0, wt);
    __syncthreads();
    tile::accumulate(xt, wt, acc);
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t m = m0 + tm * 4 + i;
    if (m >= a.m) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t n = n0 + tn * 4 + j;
      if (n < a.n) a.out[m * a.out_stride + n] = acc[i][j];
    }
  }
}

}  // namespace

void register_mm_f32_kernels(KernelRegistry& registry) {
  registry.add(make_cuda_kernel<ops::MatmulArgs>("mm_" + std::string(dtype_name(DType::f32)) + "_f32",
                                                 reinterpret_cast<const void*>(&mm_f32_kernel), 256));
}

}  // namespace onepass::cuda
