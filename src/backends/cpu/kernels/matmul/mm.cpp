// mm_<W>_f32 on the CPU: each block decodes its kCpuMmRowsPerBlock weight rows once and
// multiplies them with its kCpuMmColsPerBlock rows of x. On Isa::amx, q4_0, q4_1 and q8_0
// take the blocks on the tiles (amx_tiles.inl: x rounded to 16-bit integers per 32 values).
// Elsewhere, where the weight type has a 16-bit integer decoder (RowKernels::decode_int16),
// that is the integer GEMM (gemm_int16.cpp) on x rounded as the matrix-vector kernels round
// it; otherwise rows decoded to f32 (f32 rows used in place) and gemm_rows_f32.
#include <algorithm>

#include "../../cpu_launch.h"
#include "amx_tiles.h"
#include "onepass/ops/matmul.h"
#include "rows.h"

namespace onepass::cpu {
namespace {

// x of a matmul rounded for the integer GEMM in per-thread scratch slot 2, all m rows, and
// what it was rounded from: a thread's later tasks of the same level (cpu_level_id) with the
// same x take it as it is.
struct RoundedX {
  uint64_t level = 0;
  const float* x = nullptr;
  int64_t x_stride = 0, m = 0, k = 0;
  bool block_sums = false;
  XInt16 rounded;
};

const XInt16& rounded_x(const ops::MatmulArgs& a, bool block_sums, Isa isa) {
  thread_local RoundedX kept;
  const uint64_t level = cpu_level_id();
  if (level == 0 || kept.level != level || kept.x != a.x || kept.x_stride != a.x_stride || kept.m != a.m ||
      kept.k != a.k || kept.block_sums != block_sums) {
    kept.rounded = round_x_int16(a.x, a.x_stride, a.m, a.k, block_sums, XInt16Order::values, isa, 2);
    kept.level = level;
    kept.x = a.x;
    kept.x_stride = a.x_stride;
    kept.m = a.m;
    kept.k = a.k;
    kept.block_sums = block_sums;
  }
  return kept.rounded;
}

// The blocks [first, end) through the integer GEMM, weight tiles outermost: block b is
// weight-row tile b / grid.y with x-row block b % grid.y, so a task packs each of its tiles
// once for all the rows of x it meets (decoding and packing a q6_k tile costs about a third
// of its products with 64 rows of x), and x, all its rows, is rounded once per thread and
// level (rounded_x).
template <DType W>
void mm_int16(const ops::MatmulArgs& a, const RowKernels& kernels, const LaunchDims& dims, uint64_t first,
              uint64_t end, Isa isa) {
  static_assert(kCpuMmRowsPerBlock == kInt16TileRows);
  const int64_t chunk_bytes = static_cast<int64_t>(dtype_size(W)) * (256 / dtype_block_elems(W));
  const auto* w = static_cast<const uint8_t*>(a.w);
  const uint64_t x_blocks = dims.grid.y;
  const XInt16& x = rounded_x(a, kernels.int16_block_sums, isa);
  // q2_k's mins: offsets per 16 values times the sums of x's integers.
  const bool half_block_offsets = kernels.decode_int16_half_blocks && W == DType::q2_k;
  const float* half_sums = half_block_offsets ? int16_half_block_sums(x, a.m, isa) : nullptr;
  int64_t packed_n0 = -1;
  Int16Tile tile;
  for (uint64_t b = first; b < end; ++b) {
    const int64_t n0 = static_cast<int64_t>(b / x_blocks) * kCpuMmRowsPerBlock;
    const int64_t m0 = static_cast<int64_t>(b % x_blocks) * kCpuMmColsPerBlock;
    const int64_t n_count = std::min(a.n - n0, kCpuMmRowsPerBlock);
    const int64_t m_count = std::min(a.m - m0, kCpuMmColsPerBlock);
    if (n_count <= 0 || m_count <= 0) continue;
    if (n0 != packed_n0) {
      tile = pack_int16_tile(kernels.decode_int16, w + n0 * a.w_row_bytes, a.w_row_bytes, n_count, a.k, chunk_bytes,
                             kernels.int16_block_sums || half_block_offsets, kernels.decode_int16_half_blocks, isa);
      packed_n0 = n0;
    }
    gemm_int16(tile, x.rows_from(m0), m_count, a.out + m0 * a.out_stride + n0, a.out_stride, isa,
               half_sums != nullptr ? half_sums + m0 * (a.k / 16) : nullptr);
  }
}

template <DType W>
void mm(const void* raw, const LaunchDims& dims, uint64_t first, uint64_t end) {
  const auto& a = *static_cast<const ops::MatmulArgs*>(raw);
  if (amx_mm_type(W)) {
    // The tests' model of the tiles first, so that it runs on AMX machines too.
    if (amx_emulation()) return amx_mm_blocks_emulated(W, a, dims.grid.x, first, end);
    if (active_isa() == Isa::amx) return amx_mm_blocks(W, a, dims.grid.x, first, end);
  }
  // Every other product runs the vector kernels (avx512_vnni's for Isa::amx).
  const Isa isa = vector_isa(active_isa());
  const RowKernels& kernels = row_kernels(W, isa);
  const DecodeRowFn decode = kernels.decode;
  const auto* w = static_cast<const uint8_t*>(a.w);
  if (kernels.decode_int16 != nullptr) return mm_int16<W>(a, kernels, dims, first, end, isa);
  const float* x_rows[kCpuMmColsPerBlock];
  float* out_rows[kCpuMmColsPerBlock];
  for (uint64_t b = first; b < end; ++b) {
    const int64_t n0 = static_cast<int64_t>(b % dims.grid.x) * kCpuMmRowsPerBlock;
    const int64_t m0 = static_cast<int64_t>(b / dims.grid.x) * kCpuMmColsPerBlock;
    const int64_t n_count = std::min(a.n - n0, kCpuMmRowsPerBlock);
    const int64_t m_count = std::min(a.m - m0, kCpuMmColsPerBlock);
    if (n_count <= 0 || m_count <= 0) continue;
    const float* tile;
    int64_t tile_stride;
    if (W == DType::f32 && a.w_row_bytes % 4 == 0) {
      tile = reinterpret_cast<const float*>(w + n0 * a.w_row_bytes);
      tile_stride = a.w_row_bytes / 4;
    } else {
      float* buffer = thread_scratch(n_count * a.k);
      for (int64_t j = 0; j < n_count; ++j)
        decode(w + (n0 + j) * a.w_row_bytes, a.k, buffer + j * a.k);
      tile = buffer;
      tile_stride = a.k;
    }
    for (int64_t i = 0; i < m_count; ++i) {
      x_rows[i] = a.x + (m0 + i) * a.x_stride;
      out_rows[i] = a.out + (m0 + i) * a.out_stride + n0;
    }
    gemm_rows_f32(x_rows, m_count, tile, tile_stride, n_count, a.k, out_rows, isa);
  }
}

}  // namespace

bool mm_packs_x_per_call(DType w) {
  return amx_mm_type(w) && (active_isa() == Isa::amx || amx_emulation());
}

CpuKernelFn mm_kernel(DType w) {
  CpuKernelFn fn = nullptr;
  for_each_weight_type([&]<DType W>() {
    if (W == w) fn = mm<W>;
  });
  return fn;
}

}  // namespace onepass::cpu
