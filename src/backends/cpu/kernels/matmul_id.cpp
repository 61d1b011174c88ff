// CPU kernels: matmul_id_group, mm_id_<W>_f32 and mv_id_<W>_f32 (expert-routed matmul).
#include "onepass/ops/matmul_id.h"

#include <algorithm>
#include <vector>

#include "../cpu_kernels.h"
#include "../cpu_launch.h"
#include "float_types.h"
#include "onepass/ops/matmul.h"
#include "quant_blocks.h"

namespace onepass::cpu {
namespace {

// The expert of pair p, or E when its id is out of range (ids live in device memory and
// may hold anything; they are only ever used after this check).
int64_t expert_of(const ops::MatmulIdArgs& a, int64_t pair) {
  const int64_t t = pair / a.slots;
  const int64_t s = pair % a.slots;
  const int32_t id = a.ids[t * a.ids_stride + s];
  return id >= 0 && id < a.n_experts ? id : a.n_experts;
}

const float* x_row(const ops::MatmulIdArgs& a, int64_t pair) {
  return a.x + (pair / a.slots) * a.x_token_stride + (pair % a.slots) * a.x_slot_stride;
}

float* out_row(const ops::MatmulIdArgs& a, int64_t pair) {
  return a.out + (pair / a.slots) * a.out_token_stride + (pair % a.slots) * a.out_slot_stride;
}

// Counting sort of the pairs by expert: offsets[E + 2], then the pairs, stable.
void group_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  const auto& a = *static_cast<const ops::MatmulIdArgs*>(raw);
  if (first != 0 || end == 0) return;  // one block
  const int64_t experts = a.n_experts;
  const int64_t pairs = a.tokens * a.slots;
  int32_t* offsets = a.scratch;
  int32_t* sorted = a.scratch + experts + 2;
  std::fill(offsets, offsets + experts + 2, 0);
  for (int64_t p = 0; p < pairs; ++p) ++offsets[expert_of(a, p) + 1];
  for (int64_t e = 0; e <= experts; ++e) offsets[e + 1] += offsets[e];
  std::vector<int32_t> cursor(offsets, offsets + experts + 1);
  for (int64_t p = 0; p < pairs; ++p)
    sorted[cursor[static_cast<size_t>(expert_of(a, p))]++] = static_cast<int32_t>(p);
}

template <DType W>
void mm_id_kernel(const void* raw, const LaunchDims& dims, uint64_t first, uint64_t end) {
  const auto& a = *static_cast<const ops::MatmulIdArgs*>(raw);
  const Isa isa = active_isa();
  const DecodeRowFn decode = row_kernels(W, isa).decode;
  const int64_t pairs = a.tokens * a.slots;
  const int32_t* offsets = a.scratch;
  const int32_t* sorted = a.scratch + a.n_experts + 2;
  const auto* w = static_cast<const uint8_t*>(a.w);
  constexpr int64_t kChunk = kCpuMmColsPerBlock;
  const float* x_rows[kChunk];
  float* out_rows[kChunk];
  for (uint64_t b = first; b < end; ++b) {
    const int64_t n0 = static_cast<int64_t>(b % dims.grid.x) * kCpuMmRowsPerBlock;
    const int64_t expert = static_cast<int64_t>(b / dims.grid.x);
    const int64_t n_count = std::min(a.n - n0, kCpuMmRowsPerBlock);
    // Offsets come from matmul_id_group; clamped anyway so that no value in scratch can
    // send a read out of bounds.
    const int64_t begin = std::clamp<int64_t>(offsets[expert], 0, pairs);
    const int64_t stop = std::clamp<int64_t>(offsets[expert + 1], begin, pairs);
    if (n_count <= 0 || begin == stop) continue;
    if (expert == a.n_experts) {  // pairs with an invalid id: zeros
      for (int64_t i = begin; i < stop; ++i) {
        const int64_t pair = std::clamp<int64_t>(sorted[i], 0, pairs - 1);
        std::fill(out_row(a, pair) + n0, out_row(a, pair) + n0 + n_count, 0.0f);
      }
      continue;
    }
    const uint8_t* we = w + expert * a.w_expert_bytes;
    float* tile = thread_scratch(n_count * a.k);
    for (int64_t j = 0; j < n_count; ++j)
      decode(we + (n0 + j) * a.w_row_bytes, a.k, tile + j * a.k);
    for (int64_t i0 = begin; i0 < stop; i0 += kChunk) {
      const int64_t count = std::min(kChunk, stop - i0);
      for (int64_t i = 0; i < count; ++i) {
        const int64_t pair = std::clamp<int64_t>(sorted[i0 + i], 0, pairs - 1);
        x_rows[i] = x_row(a, pair);
        out_rows[i] = out_row(a, pair) + n0;
      }
      gemm_rows_f32(x_rows, count, tile, a.k, n_count, a.k, out_rows, isa);
    }
  }
}

template <DType W>
void mv_id_kernel(const void* raw, const LaunchDims& dims, uint64_t first, uint64_t end) {
  const auto& a = *static_cast<const ops::MatmulIdArgs*>(raw);
  const DotRowsFn dot = row_kernels(W, active_isa()).dot;
  const auto* w = static_cast<const uint8_t*>(a.w);
  for (uint64_t b = first; b < end; ++b) {
    const int64_t n0 = static_cast<int64_t>(b % dims.grid.x) * kCpuMvRowsPerBlock;
    const int64_t pair = static_cast<int64_t>(b / dims.grid.x);  // (t, s) with s fastest
    const int64_t n1 = std::min(a.n, n0 + kCpuMvRowsPerBlock);
    float* out = out_row(a, pair);
    const int64_t expert = expert_of(a, pair);
    if (expert == a.n_experts) {
      std::fill(out + n0, out + std::max(n0, n1), 0.0f);
      continue;
    }
    const uint8_t* we = w + expert * a.w_expert_bytes;
    const float* x = x_row(a, pair);
    for (int64_t n = n0; n < n1; ++n) dot(we + n * a.w_row_bytes, x, 0, 1, a.k, out + n, 1);
  }
}

}  // namespace

void register_matmul_id_kernels(KernelRegistry& registry) {
  registry.add(make_cpu_kernel<ops::MatmulIdArgs>("matmul_id_group", group_kernel));
  auto add = [&]<DType W>() {
    const std::string w(dtype_name(W));
    registry.add(make_cpu_kernel<ops::MatmulIdArgs>("mm_id_" + w + "_f32", mm_id_kernel<W>));
    registry.add(make_cpu_kernel<ops::MatmulIdArgs>("mv_id_" + w + "_f32", mv_id_kernel<W>));
  };
  add.template operator()<DType::f32>();
  add.template operator()<DType::f16>();
  add.template operator()<DType::bf16>();
  add.template operator()<DType::q4_0>();
  add.template operator()<DType::q4_1>();
  add.template operator()<DType::q8_0>();
  add.template operator()<DType::q4_k>();
  add.template operator()<DType::q5_k>();
  add.template operator()<DType::q6_k>();
  add.template operator()<DType::q5_0>();
  add.template operator()<DType::q5_1>();
  add.template operator()<DType::q2_k>();
  add.template operator()<DType::q3_k>();
  add.template operator()<DType::iq4_nl>();
  add.template operator()<DType::iq4_xs>();
}

}  // namespace onepass::cpu
