// Internal interface of the CPU matmul kernels (kernels/matmul/): the row kernels of each
// weight-type family per instruction set, which row_kernels() (dispatch.cpp) collects into
// one table per set, and the mv / mm kernel entry points that register.cpp registers.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <utility>

#include "../quant_blocks.h"
#include "onepass/core/dtype.h"
#include "onepass/exec/kernel.h"

namespace onepass::cpu {

template <typename F, size_t... I>
void for_each_weight_type_at(F& f, std::index_sequence<I...>) {
  (f.template operator()<kMatmulWeightTypes[I]>(), ...);
}

/// Calls f.template operator()<W>() for each W of kMatmulWeightTypes, in order.
template <typename F>
void for_each_weight_type(F&& f) {
  for_each_weight_type_at(f, std::make_index_sequence<std::size(kMatmulWeightTypes)>{});
}

/// One weight type's SIMD row kernels for each x86 instruction set.
struct SimdRowKernels {
  DType type;
  RowKernels avx512;
  RowKernels avx2;
};

/// The kernels of the entry for `w`, for isa = avx2 or avx512; empty (null) when no entry
/// is for `w`.
inline RowKernels pick_row_kernels(DType w, Isa isa,
                                   std::initializer_list<SimdRowKernels> entries) {
  for (const SimdRowKernels& e : entries) {
    if (e.type == w) return isa >= Isa::avx512 ? e.avx512 : e.avx2;
  }
  return {};
}

// Row kernels of `w` in the portable version (portable.cpp).
RowKernels portable_row_kernels(DType w);
// Row kernels of `w` for isa = avx2 or avx512, used on x86-64 only; empty (null) when the
// family does not hold `w`.
RowKernels dense_row_kernels(DType w, Isa isa);       // f32, f16, bf16 (dense.cpp)
RowKernels block32_row_kernels(DType w, Isa isa);     // q4_0, q4_1, q8_0 (block32.cpp)
RowKernels kquant_row_kernels(DType w, Isa isa);      // q4_k, q5_k, q6_k (kquant.cpp)
RowKernels q5_blocks_row_kernels(DType w, Isa isa);   // q5_0, q5_1 (q5_blocks.cpp)
RowKernels iq4_row_kernels(DType w, Isa isa);         // iq4_nl, iq4_xs (iq4.cpp)
RowKernels kquant_low_row_kernels(DType w, Isa isa);  // q2_k, q3_k (kquant_low.cpp)

// The integer row kernels (x rounded to XInt16) of `w` for `isa`: q4_0, q4_1, q5_0, q5_1,
// q8_0 and iq4_nl (block32_int16.cpp), q4_k, q5_k and q6_k (kquant_int16.cpp), q2_k and q3_k
// (kquant_low_int16.cpp), iq4_xs (iq4_xs_int16.cpp); null for the other types and for
// Isa::portable.
DotRowsInt16Fn block32_int16_dot(DType w, Isa isa);
DotWeightRowsInt16Fn block32_int16_dot_weight_rows(DType w, Isa isa);
DotRowsInt16Fn kquant_int16_dot(DType w, Isa isa);
DotWeightRowsInt16Fn kquant_int16_dot_weight_rows(DType w, Isa isa);
DotRowsInt16Fn kquant_low_int16_dot(DType w, Isa isa);
DotWeightRowsInt16Fn kquant_low_int16_dot_weight_rows(DType w, Isa isa);
DotRowsInt16Fn iq4_xs_int16_dot(DType w, Isa isa);
DotWeightRowsInt16Fn iq4_xs_int16_dot_weight_rows(DType w, Isa isa);
// The 16-bit integer row decoders of the integer GEMM (RowKernels::decode_int16) on
// Isa::avx512_vnni, avx512 and avx2: q4_0, q4_1, q5_0, q5_1, q8_0 and iq4_nl
// (block32_int16.cpp), q4_k and q5_k (kquant_int16.cpp), q3_k (kquant_low_int16.cpp), q2_k
// and q6_k with scales per 16 values (kquant16_decode_int16.cpp), iq4_xs (iq4_xs_int16.cpp);
// null for the other types and for Isa::portable.
DecodeRowInt16Fn block32_int16_decode(DType w, Isa isa);
DecodeRowInt16Fn kquant_int16_decode(DType w, Isa isa);
DecodeRowInt16Fn kquant_low_int16_decode(DType w, Isa isa);  // q3_k (kquant_low_int16.cpp)
DecodeRowInt16Fn kquant16_decode_int16(DType w, Isa isa);    // q2_k, q6_k (half blocks)
DecodeRowInt16Fn iq4_xs_int16_decode(DType w, Isa isa);      // iq4_xs (iq4_xs_int16.cpp)
// The 4- and 5-bit kernels on XInt16Bytes (q4_split_x.cpp): q4_0, q4_1, q5_0 and q5_1 on
// Isa::avx512_vnni with VBMI; null for the other types and sets.
DotWeightRowsBytesFn q4_split_x_dot_weight_rows(DType w, Isa isa);
// The 2- and 3-bit kernels on XInt16GroupBytes (kquant_low_split_x.cpp): q2_k and q3_k on
// Isa::avx512_vnni; null for the other types and sets.
DotWeightRowsGroupBytesFn kquant_low_split_x_dot_weight_rows(DType w, Isa isa);
// The 4- to 6-bit k-quant kernels on XInt16GroupBytes (kquant_split_x.cpp): q4_k and q5_k
// in XInt16GroupOrder::nibbles, q6_k in values, on Isa::avx512_vnni; null for the other types
// and sets.
DotWeightRowsGroupBytesFn kquant_split_x_dot_weight_rows(DType w, Isa isa);

/// The dot products of one call of a matrix-vector kernel with m rows of x: x is bound once
/// (rounded to XInt16 when the weight type has integer row kernels on `isa`; with m = 1, to
/// XInt16Bytes or XInt16GroupBytes where it has dot_weight_rows_bytes or _group_bytes), then
/// dot(w_row, out, out_stride) gives out[i * out_stride] for every row i of x.
class RowDots {
 public:
  RowDots(DType w, Isa isa, const float* x, int64_t x_stride, int64_t m, int64_t k)
      : kernels_(row_kernels(w, isa)), x_(x), x_stride_(x_stride), m_(m), k_(k) {
    if (m == 1 && kernels_.dot_weight_rows_bytes != nullptr) {
      x_bytes_ = round_x_int16_bytes(x, k, kernels_.bytes_lane_sums);
    } else if (m == 1 && kernels_.dot_weight_rows_group_bytes != nullptr) {
      x_group_bytes_ = round_x_int16_group_bytes(x, k, kernels_.group_bytes_order);
    } else if (kernels_.dot_int16 != nullptr) {
      x_int16_ = round_x_int16(x, x_stride, m, k, kernels_.int16_block_sums, kernels_.int16_order, isa);
    }
  }
  void operator()(const void* w_row, float* out, int64_t out_stride) const {
    if (x_bytes_.quads != nullptr) {
      kernels_.dot_weight_rows_bytes(w_row, 0, 1, x_bytes_, out);
    } else if (x_group_bytes_.groups != nullptr) {
      kernels_.dot_weight_rows_group_bytes(w_row, 0, 1, x_group_bytes_, out);
    } else if (kernels_.dot_int16 != nullptr) {
      kernels_.dot_int16(w_row, x_int16_, m_, out, out_stride);
    } else {
      kernels_.dot(w_row, x_, x_stride_, m_, k_, out, out_stride);
    }
  }
  /// With one row of x (m = 1): out[r] for the n weight rows from w_rows, w_row_bytes apart,
  /// each the value operator() gives for it.
  void rows(const uint8_t* w_rows, int64_t w_row_bytes, int64_t n, float* out) const {
    if (x_bytes_.quads != nullptr) {
      kernels_.dot_weight_rows_bytes(w_rows, w_row_bytes, n, x_bytes_, out);
    } else if (x_group_bytes_.groups != nullptr) {
      kernels_.dot_weight_rows_group_bytes(w_rows, w_row_bytes, n, x_group_bytes_, out);
    } else if (kernels_.dot_weight_rows_int16 != nullptr) {
      kernels_.dot_weight_rows_int16(w_rows, w_row_bytes, n, x_int16_, out);
    } else {
      for (int64_t r = 0; r < n; ++r) (*this)(w_rows + r * w_row_bytes, out + r, 1);
    }
  }

 private:
  const RowKernels& kernels_;
  const float* x_;
  int64_t x_stride_, m_, k_;
  XInt16 x_int16_;
  XInt16Bytes x_bytes_;
  XInt16GroupBytes x_group_bytes_;
};

/// Up to kInt16TileRows weight rows packed for gemm_int16 (gemm_int16.cpp): per pair of
/// values, the pair of every row as one dword (pairs[(j / 2) * kInt16TileRows + r] holds
/// values j, j + 1 of row r); per 32-value block (per 16 values with half_blocks), the
/// rows' scales and offsets (offsets null when the format has none). Rows past `rows` are
/// zero.
struct Int16Tile {
  const int32_t* pairs = nullptr;
  const float* scales = nullptr;
  const float* offsets = nullptr;
  int64_t k = 0;
  int64_t rows = 0;
  bool half_blocks = false;
};
inline constexpr int64_t kInt16TileRows = 16;

/// Decodes n weight rows (1 <= n <= kInt16TileRows, w_row_bytes apart, k values each, k a
/// multiple of 32) with `decode` into an Int16Tile in per-thread scratch slot 0 (valid until
/// the thread's next use of it); chunk_bytes is the bytes of 256 values of a row, which
/// `decode` is given at a time; half_blocks as RowKernels::decode_int16_half_blocks says.
/// isa: avx512_vnni (vpdpwssd), or avx2 and avx512 (vpmaddwd).
Int16Tile pack_int16_tile(DecodeRowInt16Fn decode, const uint8_t* w, int64_t w_row_bytes, int64_t n, int64_t k,
                          int64_t chunk_bytes, bool offsets, bool half_blocks, Isa isa);
/// The sums of x's integers per 16 values, which gemm_int16 takes for a half-block tile with
/// offsets: sums[i * (k / 16) + j / 16] for the m rows of x (exact in f32: |sum| < 2^20), in a
/// per-thread buffer valid until the thread's next call.
const float* int16_half_block_sums(const XInt16& x, int64_t m, Isa isa);
/// out[i * out_stride + r] = Σ_j x_i[j] · w_r[j] for i < m, r < tile.rows, x rounded as
/// XInt16 says (in value order; with block sums when the tile has offsets per 32 values,
/// with int16_half_block_sums as half_sums when it has them per 16); exact integer sums per
/// 32 values (16 with half blocks), f32 beyond. An element's value depends only on its two
/// rows and the instruction set (isa as pack_int16_tile's).
void gemm_int16(const Int16Tile& tile, const XInt16& x, int64_t m, float* out, int64_t out_stride, Isa isa,
                const float* half_sums = nullptr);

/// The CpuKernelFn of mv_<w>_f32 (mv.cpp), mm_<w>_f32 (mm.cpp) and mv_fused_<w>_f32
/// (mv_fused.cpp).
CpuKernelFn mv_kernel(DType w);
CpuKernelFn mm_kernel(DType w);
CpuKernelFn mv_fused_kernel(DType w);
/// Whether mm_<w>_f32 prepares x in each call (the AMX path packs its rows of x once per
/// call for all the blocks of the call that share them).
bool mm_packs_x_per_call(DType w);

}  // namespace onepass::cpu
