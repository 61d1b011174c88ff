// The fused epilogues of the matrix-vector kernels (device code): the stores of a warp's
// finished outputs with a residual add, SiLU(gate) * up, or RoPE and the KV-cache writes
// of a one-token Q/K/V product.
#pragma once

#include "../kernels/common.cuh"
#include "../kernels/rope_math.cuh"
#include "mv_common.cuh"
#include "onepass/ops/matmul.h"

namespace onepass::cuda {

template <DType C>
__device__ __forceinline__ void store_cache_pair(void* cache, int64_t at, float y0, float y1) {
  auto* c = static_cast<typename Elem<C>::storage*>(cache) + at;
  c[0] = Elem<C>::store(y0);
  c[1] = Elem<C>::store(y1);
}

// The token's position for the RoPE epilogue of a pair (0 without RoPE), read from memory
// once per pair; a warp's first pair in the mv1 kernels takes it from its shared slot
// (mv1_first_pair_copy_after_staging, mv1_common.cuh).
// GELU in its tanh form, the formula and operation order of gelu_mul_f32 (activation.cu).
__device__ __forceinline__ float mv_gelu(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kCubic = 0.044715f;
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

__device__ __forceinline__ int32_t rope_position(const MvFusion& f) { return f.rope ? *f.rope->positions : 0; }

// The epilogue of a one-token Q/K/V product with rope_kv_write folded in (MatvecRope):
// outputs j0 and j0 + 1 (j0 even) are one RoPE pair of a q or k head, or two values of a
// v head. out ends as the unfused sequence leaves it (q rotated in place, k and v as
// computed); rotated k and v go to the caches at the token's position. The pair's head
// and offset come from one 32-bit division (j0 < n fits; a 64-bit division is a long
// subroutine on every warp's last store), and its cos and sin are computed here, after
// the warp's sums.
//
// With RopeCosSin::load (r.cos_sin_in) the pair's cos and sin are the stored ones: from
// `loaded` (the warp's first pair, copied into its slot) or from memory; no powf or
// sincosf runs. With RopeCosSin::store (r.cos_sin_out) the first q head's pairs store
// theirs.
__device__ __forceinline__ void mv_store_rope(const ops::MatmulArgs& a, const ops::MatvecRope& r, int64_t j0, float v0,
                                              float v1, int32_t position, const float2* loaded = nullptr) {
  const uint32_t head_dim = static_cast<uint32_t>(r.head_dim);
  const uint32_t index = static_cast<uint32_t>(j0) / head_dim;  // head of [q | k | v]
  const uint32_t d = static_cast<uint32_t>(j0) - index * head_dim;
  const uint32_t n_head = static_cast<uint32_t>(r.n_head);
  const uint32_t kv_end = n_head + static_cast<uint32_t>(r.n_kv_head);  // first v head
  float y0 = v0, y1 = v1;
  if (index < kv_end && d < static_cast<uint32_t>(r.rotary_dims)) {
    float2 cs;
    if (r.cos_sin_in != nullptr) {
      cs = loaded != nullptr ? *loaded : make_float2(r.cos_sin_in[d], r.cos_sin_in[d + 1]);
    } else {
      cs = rope_cos_sin(position, d / 2, r.rotary_dims, r.theta, r.freq_scale, r.freq_factors);
      if (r.cos_sin_out != nullptr && index == 0) {
        r.cos_sin_out[d] = cs.x;
        r.cos_sin_out[d + 1] = cs.y;
      }
    }
    rope_apply(v0, v1, cs, y0, y1);
  }
  const bool is_q = index < n_head;
  a.out[j0] = is_q ? y0 : v0;
  a.out[j0 + 1] = is_q ? y1 : v1;
  if (is_q || position < 0 || position >= r.ctx) return;  // device data: never write outside
  const bool is_k = index < kv_end;
  const int64_t head = index - (is_k ? n_head : kv_end);
  void* cache = is_k ? r.k_cache : r.v_cache;
  const int64_t at = (head * r.ctx + position) * r.head_dim + d;
  if (r.cache_type == DType::f16) {
    store_cache_pair<DType::f16>(cache, at, y0, y1);
  } else if (r.cache_type == DType::bf16) {
    store_cache_pair<DType::bf16>(cache, at, y0, y1);
  } else {
    store_cache_pair<DType::f32>(cache, at, y0, y1);
  }
}

// The fused epilogue of row m of x, run by one lane with the warp's two sums: out[m, j]
// (+ residual), or silu(gate) * up or gelu(gate) * up, or RoPE and the KV-cache writes.
// have_pair: residual_pair holds the pair's residual. rope_cs: with RoPE, the pair's
// stored (cos, sin) where the caller has them (mv1_finish_rows' first pair), else null.
__device__ __forceinline__ void mv_store_row(const ops::MatmulArgs& a, const MvFusion& f, int64_t m, int64_t j0,
                                             float v0, float v1, int32_t position, float2 residual_pair = {},
                                             bool have_pair = false, const float2* rope_cs = nullptr) {
  if (f.silu) {
    if (j0 >= a.n) return;
    float v = (f.gelu ? mv_gelu(v0) : v0 / (1.0f + __expf(-v0))) * v1;
    if (f.residual) v += have_pair ? residual_pair.x : f.residual[m * f.residual_stride + j0];
    a.out[m * a.out_stride + j0] = v;
  } else if (f.rope) {
    mv_store_rope(a, *f.rope, j0, v0, v1, position, rope_cs);
  } else {
#pragma unroll
    for (int r = 0; r < kMvRowsPerWarp; ++r) {
      const int64_t j = j0 + r;
      if (j >= a.n) continue;
      float v = r == 0 ? v0 : v1;
      if (f.residual) v += have_pair ? (r == 0 ? residual_pair.x : residual_pair.y) : f.residual[m * f.residual_stride + j];
      a.out[m * a.out_stride + j] = v;
    }
  }
}

// Warp sums and the fused epilogue of every row of x (the general mv kernels).
__device__ __forceinline__ void mv_store(const ops::MatmulArgs& a, const MvFusion& f, int64_t j0,
                                         float (&acc)[kMvMaxRows][kMvRowsPerWarp], int32_t position) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int m = 0; m < kMvMaxRows; ++m) {
    if (m >= a.m) break;
    const float v0 = warp_sum(acc[m][0]);
    const float v1 = warp_sum(acc[m][1]);
    if (lane == 0) mv_store_row(a, f, m, j0, v0, v1, position);
  }
}

}  // namespace onepass::cuda
