// CUDA kernels of the MLX affine quantized matmul: mv_affine_q<b>_g<g>_<S>_f32 (a warp per
// output row, lanes over the row's packed words) and mm_affine_... (64 x 64 tiles with the
// weights decoded into shared memory). w = scale * q + bias per group (ops/quant.h).
#include "common.cuh"
#include "../../kernel_names.h"
#include "onepass/ops/affine.h"
#include "registration.h"
#include "tile.cuh"

namespace onepass::cuda {
namespace {

template <int kBits, DType S>
__device__ __forceinline__ float affine_value(const ops::AffineMatmulArgs& a, int64_t n, int64_t k, int group) {
  constexpr int kPerWord = 32 / kBits;
  const uint32_t word = a.w[n * a.w_stride + k / kPerWord];
  const uint32_t q = (word >> (kBits * (k % kPerWord))) & ((1u << kBits) - 1u);
  const int64_t g = k / group;
  const float scale = Elem<S>::load(static_cast<const typename Elem<S>::storage*>(a.scales)[n * a.scale_stride + g]);
  const float bias = Elem<S>::load(static_cast<const typename Elem<S>::storage*>(a.biases)[n * a.bias_stride + g]);
  return fmaf(scale, static_cast<float>(q), bias);
}

template <int kBits, int kGroup, DType S>
__global__ void __launch_bounds__(128) mv_affine_kernel(const __grid_constant__ ops::AffineMatmulArgs a) {
  pdl_wait();
  constexpr int kPerWord = 32 / kBits;
  const int lane = threadIdx.x & 31;
  const int64_t n = int64_t{blockIdx.x} * 4 + (threadIdx.x >> 5);
  if (n >= a.n) return;
  float acc[8] = {};
  const int64_t words = a.k / kPerWord;
  const auto* scales = static_cast<const typename Elem<S>::storage*>(a.scales) + n * a.scale_stride;
  const auto* biases = static_cast<const typename Elem<S>::storage*>(a.biases) + n * a.bias_stride;
  for (int64_t j = lane; j < words; j += 32) {
    const uint32_t word = a.w[n * a.w_stride + j];
    const int64_t k0 = j * kPerWord;
    const int64_t g = k0 / kGroup;
    const float scale = Elem<S>::load(scales[g]);
    const float bias = Elem<S>::load(biases[g]);
#pragma unroll
    for (int e = 0; e < kPerWord; ++e) {
      const float w = fmaf(scale, static_cast<float>((word >> (kBits * e)) & ((1u << kBits) - 1u)), bias);
      // Constant indices keep acc in registers; rows past M are skipped.
#pragma unroll
      for (int m = 0; m < 8; ++m) {
        if (m < a.m) acc[m] = fmaf(w, a.x[m * a.x_stride + k0 + e], acc[m]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < 8; ++m) {
    if (m >= a.m) break;
    const float v = warp_sum(acc[m]);
    if (lane == 0) a.out[m * a.out_stride + n] = v;
  }
}

using tile::kStep;
using tile::kTile;

template <int kBits, int kGroup, DType S>
__global__ void __launch_bounds__(256) mm_affine_kernel(const __grid_constant__ ops::AffineMatmulArgs a) {
  __shared__ float xt[kTile][kStep + 1];
  __shared__ float wt[kTile][kStep + 1];
  pdl_wait();
  const int64_t n0 = int64_t{blockIdx.x} * kTile;
  const int64_t m0 = int64_t{blockIdx.y} * kTile;
  const int tn = threadIdx.x & 15;
  const int tm = threadIdx.x >> 4;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < a.k; k0 += kStep) {
    for (int i = threadIdx.x; i < kTile * kStep; i += blockDim.x) {
      const int r = i / kStep;
      const int c = i - r * kStep;
      const int64_t m = m0 + r;
      const int64_t n = n0 + r;
      const int64_t k = k0 + c;
      xt[r][c] = (m < a.m && k < a.k) ? a.x[m * a.x_stride + k] : 0.0f;
      wt[r][c] = (n < a.n && k < a.k) ? affine_value<kBits, S>(a, n, k, kGroup) : 0.0f;
    }
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

template <int kBits, int kGroup, DType S>
void register_format(KernelRegistry& registry) {
  AffineFormat f;
  f.bits = kBits;
  f.group_size = kGroup;
  f.scale_type = S;
  registry.add(make_cuda_kernel<ops::AffineMatmulArgs>(affine_kernel_name(true, f.bits, f.group_size, f.scale_type),
                                                       reinterpret_cast<const void*>(&mv_affine_kernel<kBits, kGroup, S>), 128));
  registry.add(make_cuda_kernel<ops::AffineMatmulArgs>(affine_kernel_name(false, f.bits, f.group_size, f.scale_type),
                                                       reinterpret_cast<const void*>(&mm_affine_kernel<kBits, kGroup, S>), 256));
}

template <int kBits, DType S>
void register_groups(KernelRegistry& registry) {
  register_format<kBits, 32, S>(registry);
  register_format<kBits, 64, S>(registry);
  register_format<kBits, 128, S>(registry);
}

}  // namespace

void register_affine_cuda_kernels(KernelRegistry& registry) {
  register_groups<4, DType::f16>(registry);
  register_groups<4, DType::bf16>(registry);
  register_groups<8, DType::f16>(registry);
  register_groups<8, DType::bf16>(registry);
}

}  // namespace onepass::cuda
