// CUDA kernels of the expert-routed matmul (MoE): matmul_id_group (sort the (token, slot)
// pairs by expert), mm_id_<W>_f32 (per expert, tiles of 64 pairs x 64 columns),
// mm_id_tc_<W>_f32 (the same grouping on tensor cores, W != f32: gemm_tc.cuh's pipeline with
// gathered x rows), mv_id_x8_<W>_f32 (one token, block formats: x quantized to int8, dp4a over the units of
// two weight rows per warp) and mv_id_<W>_f32 (one token, any weight type: a warp per
// output column, f32 x). Semantics: ops/matmul_id.h.
#include "../kernels/common.cuh"
#include "../kernels/quant_dot.cuh"
#include "../kernels/registration.h"
#include "../kernels/tile.cuh"
#include "gemm_tc.cuh"
#include "launch.h"
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

// Counting sort, stable: one block. The counts live in shared memory when E + 2 of them
// fit (kGroupSharedCounts), else in scratch. The pairs' experts are taken kGroupChunk at a
// time into shared memory by every thread; the counts are added with atomics (order-free),
// warp 0 scans them into starts stored one place up (counts[e + 1] = start of e) and then
// scatters each chunk in pair order, 32 pairs at a time: lanes of the same expert take
// consecutive places in lane order (__match_any_sync) and the group's first lane moves the
// expert's cursor counts[e + 1] on, which leaves it at the start of e + 1.
constexpr int kGroupSharedCounts = 1024;
constexpr int kGroupChunk = 1024;

__global__ void group_kernel(const __grid_constant__ ops::MatmulIdArgs a) {
  __shared__ int32_t shared_counts[kGroupSharedCounts];
  __shared__ int32_t chunk[kGroupChunk];
  pdl_wait();
  const int64_t experts = a.n_experts;
  const int64_t pairs = a.tokens * a.slots;
  int32_t* offsets = a.scratch;
  int32_t* sorted = a.scratch + experts + 2;
  int32_t* counts = experts + 2 <= kGroupSharedCounts ? shared_counts : offsets;
  for (int64_t e = threadIdx.x; e < experts + 2; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) atomicAdd(&counts[expert_of(a, p) + 1], 1);
  __syncthreads();
  const unsigned lane = threadIdx.x & 31u;
  const unsigned lanes_below = (1u << lane) - 1u;
  volatile int32_t* cursor = counts;  // written and read back by the lanes of warp 0
  if (threadIdx.x < 32) {
    int32_t carry = 0;
    for (int64_t e0 = 0; e0 <= experts; e0 += 32) {
      const int64_t e = e0 + lane;
      const int32_t count = e <= experts ? cursor[e + 1] : 0;
      int32_t inclusive = count;
#pragma unroll
      for (int offset = 1; offset < 32; offset <<= 1) {
        const int32_t v = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (static_cast<int>(lane) >= offset) inclusive += v;
      }
      if (e <= experts) cursor[e + 1] = carry + inclusive - count;
      carry += __shfl_sync(0xffffffffu, inclusive, 31);
    }
  }
  for (int64_t base = 0; base < pairs; base += kGroupChunk) {
    __syncthreads();  // the scan, or warp 0's scatter of the previous chunk, is done
    for (int i = threadIdx.x; i < kGroupChunk; i += blockDim.x) {
      chunk[i] = base + i < pairs ? static_cast<int32_t>(expert_of(a, base + i)) : static_cast<int32_t>(experts + 1);
    }
    __syncthreads();
    if (threadIdx.x >= 32) continue;
    for (int j = 0; j < kGroupChunk && base + j < pairs; j += 32) {
      const int64_t p = base + j + lane;
      const int32_t e = chunk[j + lane];
      const bool valid = p < pairs;
      const unsigned same = __match_any_sync(0xffffffffu, e);
      const int32_t at = valid ? cursor[e + 1] : 0;
      __syncwarp();  // every lane has read its cursor before a leader moves it
      if (valid) {
        sorted[at + __popc(same & lanes_below)] = static_cast<int32_t>(p);
        if ((same & lanes_below) == 0) cursor[e + 1] = at + __popc(same);
      }
      __syncwarp();
    }
  }
  if (counts == shared_counts && threadIdx.x < 32) {
    for (int64_t e = lane; e < experts + 2; e += 32) offsets[e] = cursor[e];
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

// One token's products on block formats (the decode step), grid (column blocks, slots,
// tokens): the slot's x is quantized to int8 per 32 values in dynamic shared memory
// (d = amax / 127 and exact sums of both halves, as the mv kernels' staging), then each of
// the kMvIdX8Warps warps takes two weight rows of the slot's expert, its lanes striding
// over the 32-value units with quant_dot's unit_dot (dp4a). The slots of a token read
// different experts, so each block reads only its own rows; the weights are read in
// place (every field is 2-byte aligned).
constexpr int kMvIdX8Warps = static_cast<int>(kCudaMvIdX8Rows / 2);
constexpr int kMvIdX8Rows = static_cast<int>(kCudaMvIdX8Rows);

template <DType W>
__global__ void __launch_bounds__(32 * kMvIdX8Warps) mv_id_x8_kernel(const __grid_constant__ ops::MatmulIdArgs a) {
  using F = quantdot::Format<W>;
  extern __shared__ __align__(16) unsigned char smem[];
  pdl_wait();
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int64_t t = blockIdx.z;
  const int64_t s = blockIdx.y;
  const int64_t n0 = int64_t{blockIdx.x} * kMvIdX8Rows;
  const int64_t pair = t * a.slots + s;
  float* out = out_row(a, pair);
  const int32_t id = a.ids[t * a.ids_stride + s];
  if (id < 0 || id >= a.n_experts) {  // the same for the whole block
    for (int64_t j = n0 + threadIdx.x; j < min(a.n, n0 + kMvIdX8Rows); j += blockDim.x) out[j] = 0.0f;
    return;
  }
  const int64_t units = a.k / 32;  // K is a multiple of 32 for the block formats
  int8_t* xq = reinterpret_cast<int8_t*>(smem);
  float4* groups = reinterpret_cast<float4*>(smem + (a.k + 15) / 16 * 16);
  const float* x = x_row(a, pair);
  // A warp per group of 32 values, a lane per value.
  for (int64_t g = warp; g < units; g += kMvIdX8Warps) {
    const float v = x[g * 32 + lane];
    float amax = fabsf(v);
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    float half = v;  // lanes 0-15: values 0-15; lanes 16-31: values 16-31
#pragma unroll
    for (int offset = 8; offset > 0; offset >>= 1) half += __shfl_xor_sync(0xffffffffu, half, offset);
    const float other = __shfl_sync(0xffffffffu, half, 16);
    const float d = amax * (1.0f / 127.0f);
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    xq[g * 32 + lane] = static_cast<int8_t>(__float2int_rn(v * inv));
    if (lane == 0) groups[g] = make_float4(d, half, other, 0.0f);
  }
  __syncthreads();
  const int64_t j0 = n0 + 2 * warp;
  if (j0 >= a.n) return;
  const auto* w = static_cast<const uint8_t*>(a.w) + int64_t{id} * a.w_expert_bytes;
  const uint8_t* row0 = w + j0 * a.w_row_bytes;
  const uint8_t* row1 = j0 + 1 < a.n ? row0 + a.w_row_bytes : row0;  // a missing row reads the first again
  float acc0 = 0.0f, acc1 = 0.0f;
#pragma unroll 2
  for (int64_t u = lane; u < units; u += 32) {
    const float4 g = groups[u];
    const auto xg = quantdot::XGroup::load(xq + u * 32, g.x, g.y, g.z);
    const int64_t block = u / F::kUnits;
    const int sub = static_cast<int>(u - block * F::kUnits);
    acc0 += F::unit_dot(row0 + block * F::kBlockBytes, sub, xg);
    acc1 += F::unit_dot(row1 + block * F::kBlockBytes, sub, xg);
  }
  acc0 = warp_sum(acc0);
  acc1 = warp_sum(acc1);
  if (lane == 0) {
    out[j0] = acc0;
    if (j0 + 1 < a.n) out[j0 + 1] = acc1;
  }
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

// Grouped products on tensor cores (block formats, f16, bf16): gemm_tc.cuh's pipeline
// over the expert's weights, with the x rows of a tile gathered from the expert's pairs
// and its output rows scattered back to them. Grid (column tiles, E + 1, Z): block
// (c, e, z) takes the pair tiles z, z + Z, ... of expert e; e = E (invalid ids) writes
// zeros. Rounding as mm_<W>_f32 (x to f16 or bf16, dequantized weights to f16).
template <DType W>
__global__ void __launch_bounds__(tc::kThreads) mm_id_tc_kernel(const __grid_constant__ ops::MatmulIdArgs a) {
  using namespace tc;
  using L = Layout<W>;
  using T = typename Operand<W>::T;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int32_t tile_pairs[kBM];
  pdl_wait();
  const int64_t expert = blockIdx.y;
  const int64_t n0 = int64_t{blockIdx.x} * kBN;
  const int64_t pairs = a.tokens * a.slots;
  const int32_t* offsets = a.scratch;
  const int32_t* sorted = a.scratch + a.n_experts + 2;
  // Clamped: whatever scratch holds, no read goes out of bounds.
  const int64_t begin = min(max(int64_t{offsets[expert]}, int64_t{0}), pairs);
  const int64_t stop = min(max(int64_t{offsets[expert + 1]}, begin), pairs);
  const int64_t tile_step = int64_t{gridDim.z} * kBM;
  if (expert == a.n_experts) {  // invalid ids: zero rows
    for (int64_t p = begin + blockIdx.z; p < stop; p += gridDim.z) {
      const int64_t pair = min(max(int64_t{sorted[p]}, int64_t{0}), pairs - 1);
      for (int64_t c = threadIdx.x; c < kBN && n0 + c < a.n; c += blockDim.x) out_row(a, pair)[n0 + c] = 0.0f;
    }
    return;
  }
  // The expert's weights as a dense product's (w_plan, w_issue and dequant_step read w, n,
  // k and w_row_bytes).
  ops::MatmulArgs m{};
  m.w = static_cast<const uint8_t*>(a.w) + expert * a.w_expert_bytes;
  m.n = a.n;
  m.k = a.k;
  m.w_row_bytes = a.w_row_bytes;
  const int64_t steps = (a.k + kBK - 1) / kBK;
  const bool x_vec = a.x_token_stride % 4 == 0 && a.x_slot_stride % 4 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  const bool w_vec = a.w_row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(m.w) % 16 == 0 && L::raw_bytes % 16 == 0;
  const uint32_t base = smem_addr(smem);
  const WPlan wp = w_plan<W>(m, n0, base + L::raw_offset);
  // x: column chunk xcol .. +3 (floats) of tile rows xrow + 8 j, j < 8 (x_plan's layout);
  // rows past the tile's pairs are neither copied nor zeroed (their outputs are not stored).
  const int xrow = static_cast<int>(threadIdx.x >> 4);
  const int xcol = 4 * static_cast<int>(threadIdx.x & 15);
  const uint32_t xdst = base + L::x_offset + static_cast<uint32_t>((xrow * kXPitch + xcol) * 4);
  const float* xsrc[8];
  auto x_issue_rows = [&](int64_t k0, int slot) {
    const uint32_t dst = xdst + static_cast<uint32_t>(slot * kXStage);
    if (x_vec && k0 + xcol + 4 <= a.k) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (xsrc[j] != nullptr) cp_async16(dst + j * 8 * kXPitch * 4, xsrc[j] + k0 + xcol);
      }
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (xsrc[j] == nullptr) continue;
        uint32_t v[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) v[e] = __float_as_uint(k0 + xcol + e < a.k ? xsrc[j][k0 + xcol + e] : 0.0f);
        st_shared_v4(dst + j * 8 * kXPitch * 4, v[0], v[1], v[2], v[3]);
      }
    }
  };
  for (int64_t p0 = begin + int64_t{blockIdx.z} * kBM; p0 < stop; p0 += tile_step) {
    __syncthreads();  // every warp is done with the previous tile's shared memory
    if (threadIdx.x < kBM) {
      const int64_t p = p0 + threadIdx.x;
      tile_pairs[threadIdx.x] = p < stop ? min(max(sorted[p], 0), static_cast<int32_t>(pairs - 1)) : -1;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int32_t pair = tile_pairs[xrow + 8 * j];
      xsrc[j] = pair >= 0 ? x_row(a, pair) : nullptr;
    }
    float acc[2][4][4] = {};
    // mm_tc_kernel's K walk: stages 0 .. kStages - 2 in flight, stage 0's weights dequantized.
#pragma unroll
    for (int q = 0; q < kStages - 1; ++q) {
      if (q < steps) {
        x_issue_rows(q * kBK, q);
        w_issue<W>(m, wp, w_vec, q);
      }
      cp_async_commit();
    }
    if constexpr (!kDense<W>) {
      cp_async_wait<kStages - 2>();
      __syncthreads();
      dequant_step<W>(m, wp, w_vec, smem, 0);
    }
    for (int64_t s = 0; s < steps; ++s) {
      cp_async_wait<kStages - 3>();
      __syncthreads();
      const int64_t next = s + kStages - 1;
      if (next < steps) {
        x_issue_rows(next * kBK, static_cast<int>(next % kStages));
        w_issue<W>(m, wp, w_vec, next);
      }
      cp_async_commit();
      const float* xs = reinterpret_cast<const float*>(smem + L::x_offset + (s % kStages) * kXStage);
      const T* ws = kDense<W> ? reinterpret_cast<const T*>(smem + L::raw_offset + (s % kStages) * kBN * L::raw_pitch)
                              : reinterpret_cast<const T*>(smem + L::tile_offset + (s & 1) * kWTile);
      multiply_step<W>(xs, ws, acc);
      if constexpr (!kDense<W>) {
        if (s + 1 < steps) dequant_step<W>(m, wp, w_vec, smem, s + 1);
      }
    }
    cp_async_wait<0>();
    const int warp = static_cast<int>(threadIdx.x >> 5);
    const int lane = static_cast<int>(threadIdx.x & 31);
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int32_t pair = tile_pairs[32 * (warp & 1) + 16 * mi + (lane >> 2) + 8 * hf];
        if (pair < 0) continue;
        float* row = out_row(a, pair);
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
          const int64_t n = n0 + 32 * (warp >> 1) + 8 * ni + 2 * (lane & 3);
          if (n < a.n) row[n] = acc[mi][ni][2 * hf];
          if (n + 1 < a.n) row[n + 1] = acc[mi][ni][2 * hf + 1];
        }
      }
    }
  }
}

template <DType W>
void register_type(KernelRegistry& registry) {
  const std::string t(dtype_name(W));
  registry.add(make_cuda_kernel<ops::MatmulIdArgs>("mv_id_" + t + "_f32", reinterpret_cast<const void*>(&mv_id_kernel<W>), 128));
  registry.add(make_cuda_kernel<ops::MatmulIdArgs>("mm_id_" + t + "_f32", reinterpret_cast<const void*>(&mm_id_kernel<W>), 256));
  if constexpr (W != DType::f32) {
    static_assert(tc::Layout<W>::bytes <= 227 * 1024, "shared memory");
    registry.add(make_cuda_kernel<ops::MatmulIdArgs>("mm_id_tc_" + t + "_f32",
                                                     reinterpret_cast<const void*>(&mm_id_tc_kernel<W>),
                                                     static_cast<uint32_t>(tc::kThreads), true, tc::Layout<W>::bytes));
  }
  if constexpr (W != DType::f32 && W != DType::f16 && W != DType::bf16) {
    registry.add(make_cuda_kernel<ops::MatmulIdArgs>("mv_id_x8_" + t + "_f32",
                                                     reinterpret_cast<const void*>(&mv_id_x8_kernel<W>),
                                                     32 * kMvIdX8Warps, true,
                                                     static_cast<uint32_t>(kCudaMvSharedLimit)));
  }
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
