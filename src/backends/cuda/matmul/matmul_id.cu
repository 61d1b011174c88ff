// CUDA kernels of the expert-routed matmul (MoE): matmul_id_group (sort the (token, slot)
// pairs by expert), mm_id_<W>_f32 (per expert, tiles of 64 pairs x 64 columns) and
// mv_id_<W>_f32 (one token: a warp per output column). Semantics: ops/matmul_id.h.
#include "../kernels/common.cuh"
#include "../kernels/quant_dot.cuh"
#include "../kernels/registration.h"
#include "../kernels/tile.cuh"
#include "onepass/ops/matmul_id.h"

namespace onepass::cuda {
namespace {

__device__ __forceinline__ int64_t expert_of(const ops::MatmulIdArgs& a, int64_t pair) {
  const int64_t t = pair / a.slots;
  const int32_t id = a.ids[t * a.ids_stride + (pair - t * a.slots)];
  return (id >= 0 && id < a.n_experts) ? id : a.n_experts;
}

__device__ __forceinline__ const float* x_row(const ops::MatmulIdArgs& a, int64_t pair) {
  return a.x + (pair / a.slots) * a.x_token_stride + (pair % a.slots) * a.x_slot_stride;
}

__device__ __forceinline__ float* out_row(const ops::MatmulIdArgs& a, int64_t pair) {
  return a.out + (pair / a.slots) * a.out_token_stride + (pair % a.slots) * a.out_slot_stride;
}

// Counting sort, stable: one block. Counts with shared atomics (order-free), then one
// thread scans and scatters in pair order (MoE batches are small; this is not hot).
__global__ void group_kernel(const __grid_constant__ ops::MatmulIdArgs a) {
  pdl_wait();
  const int64_t experts = a.n_experts;
  const int64_t pairs = a.tokens * a.slots;
  int32_t* offsets = a.scratch;
  int32_t* sorted = a.scratch + experts + 2;
  for (int64_t e = threadIdx.x; e < experts + 2; e += blockDim.x) offsets[e] = 0;
  __syncthreads();
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) atomicAdd(&offsets[expert_of(a, p) + 1], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int64_t e = 0; e <= experts; ++e) offsets[e + 1] += offsets[e];
    // Stable scatter: one pass over the pairs per expert, in pair order.
    for (int64_t e = 0; e <= experts; ++e) {
      int32_t at = offsets[e];
      for (int64_t p = 0; p < pairs; ++p) {
        if (expert_of(a, p) == e) sorted[at++] = static_cast<int32_t>(p);
      }
    }
  }
}

template <DType W>
__device__ __forceinline__ void decode_unit(const uint8_t* row, int64_t unit, float* vals) {
  if constexpr (W == DType::f32 || W == DType::f16 || W == DType::bf16) {
    const auto* v = reinterpret_cast<const typename Elem<W>::storage*>(row) + unit * 32;
#pragma unroll
    for (int l = 0; l < 32; ++l) vals[l] = Elem<W>::load(v[l]);
  } else {
    using F = quantdot::Format<W>;
    const int64_t block = unit / F::kUnits;
    F::dequant(row + block * F::kBlockBytes, static_cast<int>(unit - block * F::kUnits), vals);
  }
}

template <DType W>
__device__ __forceinline__ float load_value(const uint8_t* row, int64_t k) {
  return Elem<W>::load(reinterpret_cast<const typename Elem<W>::storage*>(row)[k]);
}

constexpr int kMvRows = 4;  // warps per block, one output column each

template <DType W>
__global__ void __launch_bounds__(128) mv_id_kernel(const __grid_constant__ ops::MatmulIdArgs a) {
  pdl_wait();
  const int lane = threadIdx.x & 31;
  const int64_t n = int64_t{blockIdx.x} * kMvRows + (threadIdx.x >> 5);
  const int64_t t = blockIdx.z;
  const int64_t s = blockIdx.y;
  if (n >= a.n) return;
  const int64_t pair = t * a.slots + s;
  float* out = out_row(a, pair);
  const int32_t id = a.ids[t * a.ids_stride + s];
  if (id < 0 || id >= a.n_experts) {
    if (lane == 0) out[n] = 0.0f;
    return;
  }
  const auto* row = static_cast<const uint8_t*>(a.w) + int64_t{id} * a.w_expert_bytes + n * a.w_row_bytes;
  const float* x = x_row(a, pair);
  float acc = 0.0f;
  if constexpr (W == DType::f32 || W == DType::f16 || W == DType::bf16) {
    for (int64_t k = lane; k < a.k; k += 32) acc = fmaf(load_value<W>(row, k), x[k], acc);
  } else {
    float vals[32];
    for (int64_t u = lane; u < a.k / 32; u += 32) {
      decode_unit<W>(row, u, vals);
#pragma unroll
      for (int l = 0; l < 32; ++l) acc = fmaf(vals[l], x[u * 32 + l], acc);
    }
  }
  acc = warp_sum(acc);
  if (lane == 0) out[n] = acc;
}

using tile::kStep;
using tile::kTile;

template <DType W>
__global__ void __launch_bounds__(256) mm_id_kernel(const __grid_constant__ ops::MatmulIdArgs a) {
  __shared__ float xt[kTile][kStep + 1];
  __shared__ float wt[kTile][kStep + 1];
  __shared__ int32_t tile_pairs[kTile];
  pdl_wait();
  const int64_t expert = blockIdx.y;
  const int64_t n0 = int64_t{blockIdx.x} * kTile;
  const int64_t pairs = a.tokens * a.slots;
  const int32_t* offsets = a.scratch;
  const int32_t* sorted = a.scratch + a.n_experts + 2;
  // Clamped: whatever scratch holds, no read goes out of bounds.
  const int64_t begin = min(max(int64_t{offsets[expert]}, int64_t{0}), pairs);
  const int64_t stop = min(max(int64_t{offsets[expert + 1]}, begin), pairs);
  if (expert == a.n_experts) {  // invalid ids: zero rows
    for (int64_t p = begin; p < stop; ++p) {
      const int64_t pair = min(max(int64_t{sorted[p]}, int64_t{0}), pairs - 1);
      for (int64_t c = threadIdx.x; c < kTile && n0 + c < a.n; c += blockDim.x) out_row(a, pair)[n0 + c] = 0.0f;
    }
    return;
  }
  const auto* w = static_cast<const uint8_t*>(a.w) + expert * a.w_expert_bytes;
  const int tn = threadIdx.x & 15;
  const int tm = threadIdx.x >> 4;
  for (int64_t p0 = begin; p0 < stop; p0 += kTile) {
    if (threadIdx.x < kTile) {
      const int64_t p = p0 + threadIdx.x;
      tile_pairs[threadIdx.x] = p < stop ? min(max(sorted[p], 0), static_cast<int32_t>(pairs - 1)) : -1;
    }
    __syncthreads();
    float acc[4][4] = {};
    for (int64_t k0 = 0; k0 < a.k; k0 += kStep) {
      for (int i = threadIdx.x; i < kTile * kStep; i += blockDim.x) {
        const int r = i / kStep;
        const int c = i - r * kStep;
        const int32_t pair = tile_pairs[r];
        const int64_t k = k0 + c;
        xt[r][c] = (pair >= 0 && k < a.k) ? x_row(a, pair)[k] : 0.0f;
      }
      if constexpr (W == DType::f32 || W == DType::f16 || W == DType::bf16) {
        for (int i = threadIdx.x; i < kTile * kStep; i += blockDim.x) {
          const int r = i / kStep;
          const int c = i - r * kStep;
          const int64_t n = n0 + r;
          const int64_t k = k0 + c;
          wt[r][c] = (n < a.n && k < a.k) ? load_value<W>(w + n * a.w_row_bytes, k) : 0.0f;
        }
      } else {
        if (threadIdx.x < kTile) {
          const int64_t n = n0 + threadIdx.x;
          float vals[32];
          if (n < a.n) {
            decode_unit<W>(w + n * a.w_row_bytes, k0 / 32, vals);
          } else {
#pragma unroll
            for (int l = 0; l < 32; ++l) vals[l] = 0.0f;
          }
#pragma unroll
          for (int l = 0; l < 32; ++l) wt[threadIdx.x][l] = vals[l];
        }
      }
      __syncthreads();
      tile::accumulate(xt, wt, acc);
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int32_t pair = tile_pairs[tm * 4 + i];
      if (pair < 0) continue;
      float* out = out_row(a, pair);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t n = n0 + tn * 4 + j;
        if (n < a.n) out[n] = acc[i][j];
      }
    }
    __syncthreads();  // tile_pairs is rewritten by the next tile
  }
}

template <DType W>
void register_type(KernelRegistry& registry) {
  const std::string t(dtype_name(W));
  registry.add(make_cuda_kernel<ops::MatmulIdArgs>("mv_id_" + t + "_f32", reinterpret_cast<const void*>(&mv_id_kernel<W>), 128));
  registry.add(make_cuda_kernel<ops::MatmulIdArgs>("mm_id_" + t + "_f32", reinterpret_cast<const void*>(&mm_id_kernel<W>), 256));
}

}  // namespace

void register_matmul_id_cuda_kernels(KernelRegistry& registry) {
  registry.add(make_cuda_kernel<ops::MatmulIdArgs>("matmul_id_group", reinterpret_cast<const void*>(&group_kernel), 1024));
  register_type<DType::f32>(registry);
  register_type<DType::f16>(registry);
  register_type<DType::bf16>(registry);
  register_type<DType::q4_0>(registry);
  register_type<DType::q4_1>(registry);
  register_type<DType::q8_0>(registry);
  register_type<DType::q4_k>(registry);
  register_type<DType::q5_k>(registry);
  register_type<DType::q6_k>(registry);
  register_type<DType::q5_0>(registry);
  register_type<DType::q5_1>(registry);
  register_type<DType::q2_k>(registry);
  register_type<DType::q3_k>(registry);
  register_type<DType::iq4_nl>(registry);
  register_type<DType::iq4_xs>(registry);
}

}  // namespace onepass::cuda
