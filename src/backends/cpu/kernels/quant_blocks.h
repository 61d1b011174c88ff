// Row-level building blocks of the CPU matrix kernels (matmul, affine, matmul_id,
// embedding): dot products of one weight row with a few rows of x, row decoding to f32,
// and a small f32 GEMM. Each exists in a portable version and, on x86-64, AVX2 and
// AVX-512 versions chosen at run time. Implemented in matmul/.
#pragma once

#include <cstdint>
#include <string_view>

#include "onepass/core/dtype.h"

namespace onepass::cpu {

enum class Isa : uint8_t {
  portable,     // plain C++ the compiler may vectorise for the baseline ISA
  avx2,         // AVX2 + FMA + F16C: q4_0, q4_1, q5_0, q5_1, q8_0, q6_k, iq4_nl and iq4_xs
                // matrix-vector products dot 16-bit integer x with integer weights (XInt16,
                // vpmaddwd)
  avx512,       // AVX-512F on top of avx2 (16-value table lookups decode the 4-bit formats;
                // the integer products are avx2's)
  avx512_vnni,  // avx512 plus BW, VL, VNNI and GFNI: the integer products with vpdpwssd
                // (with VBMI too, the one-row products of q4_0, q4_1, q5_0 and q5_1 with
                // vpdpbusd; the one-row products of the k-quants with vpdpbusd)
  amx,          // avx512_vnni plus AMX-TILE and AMX-INT8, with the OS's tile data permission:
                // the matrix-matrix products of q4_0, q4_1 and q8_0 on tiles (amx_tiles.inl);
                // every other kernel is avx512_vnni's
};

/// The set whose vector kernels `isa` runs: avx512_vnni for Isa::amx, else `isa`.
constexpr Isa vector_isa(Isa isa) { return isa == Isa::amx ? Isa::avx512_vnni : isa; }
/// "portable", "avx2", "avx512", "avx512_vnni" or "amx".
const char* isa_name(Isa isa);
/// `best` capped by the name of a set (ONEPASS_CPU_ISA's value): the narrower of the two; an
/// empty name (the variable set to nothing, as the other ONEPASS_ variables) caps nothing.
/// Throws Error for another name isa_name does not give.
Isa capped_isa(Isa best, std::string_view name);

/// The widest Isa this CPU supports (checked once).
Isa best_isa();
/// Whether `isa` can run on this CPU.
bool isa_supported(Isa isa);
/// The Isa the kernels use: best_isa(), capped by the environment variable
/// ONEPASS_CPU_ISA=portable|avx2|avx512|avx512_vnni|amx (read once; for benchmarking and testing the
/// narrower paths), or whatever set_active_isa() chose last.
Isa active_isa();
/// Makes the kernels use `isa` from their next dispatch on (tests run every path this
/// way); call it only while no work is running. Throws Error when the CPU lacks it.
void set_active_isa(Isa isa);

/// out[i * out_stride] = Σ_j x[i * x_stride + j] · w_row[j] for i < m, with the weight row
/// of k values in the function's weight type; f32 accumulation. Rows of x share one decode
/// of the weight row in groups of up to 4 (AVX2) or 8 (portable, AVX-512).
using DotRowsFn = void (*)(const void* w_row, const float* x, int64_t x_stride, int64_t m,
                           int64_t k, float* out, int64_t out_stride);
/// dst[j] = w_row[j] as f32 for j < k.
using DecodeRowFn = void (*)(const void* w_row, int64_t k, float* dst);

/// Rows of x rounded to 16-bit integers for the integer row kernels. Value j of row i is
/// about q[i * k + j] · group_scale[i * groups + j / kXInt16Group], off by at most half a
/// step, the step being the group's largest |x| / 32767 (so relative to that largest value
/// the error is at most 2^-16); block_sum[i * k / 32 + j / 32] is the f32 sum of the
/// row's unrounded values of j's 32-value block (for the additive term of q4_1 and q5_1).
/// k is a multiple of 32; groups = ceil(k / kXInt16Group).
struct XInt16 {
  const int16_t* q = nullptr;
  const float* group_scale = nullptr;
  const float* block_sum = nullptr;  // null unless asked for
  int64_t k = 0;
  int64_t groups = 0;

  /// The rows from `row` on.
  XInt16 rows_from(int64_t row) const {
    XInt16 rows = *this;
    rows.q += row * k;
    rows.group_scale += row * groups;
    if (rows.block_sum != nullptr) rows.block_sum += row * (k / 32);
    return rows;
  }
};
inline constexpr int64_t kXInt16Group = 256;

/// The order of XInt16's integers in each row: value order, or (the avx512_vnni q6_k kernel,
/// which splits its weight words so) per run of 64 values the 32 of even index, then the 32
/// of odd index.
enum class XInt16Order : uint8_t { values, even_odd };

/// Rounds m rows of k values of x (k a multiple of 32; of 64 for even_odd) into per-thread
/// scratch slot `slot` (valid until the thread's next use of it), with block sums when
/// `block_sums` is set, using `isa` (any but Isa::portable; avx512_vnni for even_odd; every
/// set gives the same integers and scales).
XInt16 round_x_int16(const float* x, int64_t x_stride, int64_t m, int64_t k, bool block_sums, XInt16Order order,
                     Isa isa, int slot = 1);

/// out[i * out_stride] = Σ_j x_i[j] · w_row[j] for i < m with x rounded as XInt16 says;
/// f32 accumulation of exact integer block products.
using DotRowsInt16Fn = void (*)(const void* w_row, const XInt16& x, int64_t m, float* out,
                                int64_t out_stride);

/// out[r] = Σ_j x_0[j] · w_rows[r * w_row_bytes + j] for r < n, with one row of x (m = 1)
/// rounded as XInt16 says; a row's value does not depend on n or on its place among them.
using DotWeightRowsInt16Fn = void (*)(const void* w_rows, int64_t w_row_bytes, int64_t n,
                                      const XInt16& x, float* out);

/// The row grouping of a DotRowsInt16Fn: calls `group.template operator()<M>(rows, out)` for
/// the m rows of x in groups of kMaxRows (the last takes the 1..kMaxRows left), each with x's
/// integers, group scales and block sums (where it has them) and out advanced past the rows
/// before it. `group` is the kernel's generic lambda, defined in its target region: its M
/// rows share one decode of each weight block.
template <int M, typename Group>
void call_row_group(int64_t take, const XInt16& rows, float* out, Group& group) {
  if constexpr (M > 1) {
    if (take < M) return call_row_group<M - 1>(take, rows, out, group);
  }
  group.template operator()<M>(rows, out);
}

template <int kMaxRows, typename Group>
void for_row_groups(const XInt16& x, int64_t m, float* out, int64_t out_stride, Group&& group) {
  for (int64_t row = 0; row < m; row += kMaxRows) {
    const int64_t take = m - row < kMaxRows ? m - row : kMaxRows;
    call_row_group<kMaxRows>(take, x.rows_from(row), out + row * out_stride, group);
  }
}

/// The weight-row grouping of the DotWeightRows*Fn kernels: calls
/// `rows.template operator()<R>(r)` for the n weight rows in groups of R (r = 0, R, 2 R, ...),
/// then `rows.template operator()<1>(r)` for each row left. `rows` is the kernel's generic
/// lambda, defined in its target region: it dots its R weight rows from row r with x. Always
/// inlined, so that the kernel's loop and its lambda are compiled as one function of the
/// kernel's instruction set (a call out to this function cost 4-5% on q4_k, q5_k and q6_k).
template <int R, typename Rows>
[[gnu::always_inline]] inline void for_weight_row_groups(int64_t n, Rows&& rows) {
  int64_t r = 0;
  for (; r + R <= n; r += R) rows.template operator()<R>(r);
  for (; r < n; ++r) rows.template operator()<1>(r);
}

/// One row of x rounded as XInt16 does (the same integers and group scales), each integer
/// split into bytes, x = 256 · h + l with h signed and l unsigned, for the 4- and 5-bit
/// kernels that multiply the weights' values with bytes (vpdpbusd). Per quad of 4 blocks (128 values), 64 bytes
/// each: l of values 0..15 of the blocks, l of values 16..31, h of 0..15, h of 16..31, where
/// 32-bit lane j holds block j % 4's values 4 (j / 4) .. 4 (j / 4) + 3 (+ 16); then per lane
/// (its 8 values) the int32 -8 · Σ x (q4_0's offset of its nibbles, half q5_0's), and with
/// lane sums the f32 Σ of the unrounded values (the additive term of q4_1 and q5_1). Blocks past k are zero.
struct XInt16Bytes {
  const uint8_t* quads = nullptr;
  const float* group_scale = nullptr;
  int64_t k = 0;
  int64_t quad_bytes = 0;
};
inline constexpr int64_t kXInt16BytesQuad = 128;

/// Rounds one row of k values of x (k a multiple of 32) into XInt16Bytes in a per-thread
/// buffer (valid until the thread's next call), with lane sums when `lane_sums` is set;
/// Isa::avx512_vnni.
XInt16Bytes round_x_int16_bytes(const float* x, int64_t k, bool lane_sums);

/// out[r] = Σ_j x[j] · w_rows[r * w_row_bytes + j] for r < n, with one row of x rounded as
/// XInt16Bytes says; a row's value does not depend on n or on its place among them.
using DotWeightRowsBytesFn = void (*)(const void* w_rows, int64_t w_row_bytes, int64_t n,
                                      const XInt16Bytes& x, float* out);

/// The order of XInt16GroupBytes's values in each group, that of the quant bits of the
/// formats that read it: q2_k's and q3_k's bit pairs, q4_k's and q5_k's nibbles, or q6_k's
/// values in order.
enum class XInt16GroupOrder : uint8_t { bit_pairs, nibbles, values };

/// One row of x rounded as XInt16 does (the same integers and group scales), each integer
/// split into bytes, x = 256 · h + l with h signed and l unsigned, for the k-quant kernels
/// that multiply their 2- to 6-bit quants with bytes (vpdpbusd). Per group of 256 values (k a
/// multiple of 256), x_int16_group_bytes(order) bytes: four parts j, each the l of 64 values
/// then their h (128 bytes), then 64 bytes of sums, per part (values) or after the four
/// (the others). Byte 16 i + e of part j is value
///   bit_pairs: 32 j + 16 (i % 2) + 128 (i / 2) + e (part j is the values of bits 2j, 2j + 1
///              of q2_k's and q3_k's quant bytes); the sums are 16 int32 sums of the 16
///              integers of each quarter, quarter i of part j at 4 i + j;
///   nibbles:   64 i + 32 (j % 2) + 16 (j / 2) + e (part j is nibble j % 2 of bytes
///              16 (j / 2) .. + 15 of each of q4_k's and q5_k's four 32-byte runs of quants,
///              run i in 128-bit lane i); the sums are the 8 f32 sums of the unrounded values
///              of each 32-value sub-block (for the additive mins), then 32 zero bytes;
///   values:    64 j + 16 i + e (q6_k's quants as its 64-byte runs of low bits hold them:
///              the 16-value sub-block 4 j + i in 128-bit lane i); part j's 64 bytes of sums
///              follow its h: the int32 -32 · Σ h over each 32-bit lane's 4 values (q6_k's
///              offset of its quants, q - 32, as the high bytes see it).
struct XInt16GroupBytes {
  const uint8_t* groups = nullptr;
  const float* group_scale = nullptr;
  int64_t k = 0;
};
inline constexpr int64_t kXInt16GroupBytes = 576;        // bit_pairs, nibbles
inline constexpr int64_t kXInt16ValuesGroupBytes = 768;  // values: four parts of 192 bytes

/// The bytes of one group of XInt16GroupBytes in `order`.
constexpr int64_t x_int16_group_bytes(XInt16GroupOrder order) {
  return order == XInt16GroupOrder::values ? kXInt16ValuesGroupBytes : kXInt16GroupBytes;
}

/// Rounds one row of k values of x (k a multiple of 256) into XInt16GroupBytes in `order`
/// in a per-thread buffer (valid until the thread's next call); Isa::avx512_vnni.
XInt16GroupBytes round_x_int16_group_bytes(const float* x, int64_t k,
                                           XInt16GroupOrder order = XInt16GroupOrder::bit_pairs);

/// out[r] = Σ_j x[j] · w_rows[r * w_row_bytes + j] for r < n, with one row of x rounded as
/// XInt16GroupBytes says; a row's value does not depend on n or on its place among them.
using DotWeightRowsGroupBytesFn = void (*)(const void* w_rows, int64_t w_row_bytes, int64_t n,
                                           const XInt16GroupBytes& x, float* out);

/// The weight row of k values (k a multiple of 32; of the format's block) as 16-bit
/// integers with an f32 scale and offset per 32 values: w[j] = scales[j / 32] · values[j] +
/// offsets[j / 32], every |values[j]| below 2048. Where RowKernels::decode_int16_half_blocks
/// is set, the scales and offsets are per 16 values (scales[j / 16], offsets[j / 16]) and
/// every |values[j]| is at most 32.
using DecodeRowInt16Fn = void (*)(const void* w_row, int64_t k, int16_t* values, float* scales, float* offsets);

struct RowKernels {
  DotRowsFn dot = nullptr;
  DecodeRowFn decode = nullptr;
  // Set where the matrix-matrix products decode weight tiles to 16-bit integers for the
  // integer GEMM (q4_0, q4_1, q5_0, q8_0, q2_k, q3_k, q4_k, q5_k and q6_k on avx512_vnni); x
  // then is rounded as dot_int16 takes it (in value order), with block sums when
  // int16_block_sums is set.
  DecodeRowInt16Fn decode_int16 = nullptr;
  // decode_int16 gives scales and offsets per 16 values (q2_k, q6_k).
  bool decode_int16_half_blocks = false;
  // Set where integer x is faster (every block format on every SIMD set): the matrix-vector
  // kernels then use it in place of `dot`; x needs block sums when int16_block_sums is set.
  DotRowsInt16Fn dot_int16 = nullptr;
  // With one row of x, for several weight rows at once; null where one at a time is as fast.
  DotWeightRowsInt16Fn dot_weight_rows_int16 = nullptr;
  bool int16_block_sums = false;
  XInt16Order int16_order = XInt16Order::values;
  // With one row of x, in place of dot_weight_rows_int16 where set (q4_0, q4_1, q5_0 and
  // q5_1 on avx512_vnni with VBMI); x needs lane sums when bytes_lane_sums is set.
  DotWeightRowsBytesFn dot_weight_rows_bytes = nullptr;
  bool bytes_lane_sums = false;
  // With one row of x, in place of dot_weight_rows_int16 where set (q2_k, q3_k, q4_k, q5_k
  // and q6_k on avx512_vnni); x is rounded in group_bytes_order.
  DotWeightRowsGroupBytesFn dot_weight_rows_group_bytes = nullptr;
  XInt16GroupOrder group_bytes_order = XInt16GroupOrder::bit_pairs;
};

/// Row kernels for a matmul weight type (kMatmulWeightTypes); throws for other types.
const RowKernels& row_kernels(DType weight_type, Isa isa);

/// out_rows[i][j] = Σ_k x_rows[i][k] · w[j * w_stride + k] for i < m, j < n. The value of
/// each element depends only on its two input rows, not on m, n or the position in the
/// tile, so callers may split the work any way.
void gemm_rows_f32(const float* const* x_rows, int64_t m, const float* w, int64_t w_stride,
                   int64_t n, int64_t k, float* const* out_rows, Isa isa);

/// Every f16 bit pattern as f32 (256 KiB). The SIMD decoders read block and group scales
/// through it: a load and a broadcast from memory, where converting in registers takes
/// instructions on the shuffle port that the nibble decode already keeps busy.
extern const float* const kHalfToFloat;

/// A per-thread f32 buffer of at least `count` values, 64-byte aligned (reused across
/// calls; its contents do not survive a call asking for more). Slot 0 holds decoded weight
/// tiles and the fused products' normalised x, slot 1 the rounded x of round_x_int16, slot 2
/// the integer GEMM's rounded x, kept for its tasks of one level (mm.cpp).
inline constexpr int kThreadScratchSlots = 3;
float* thread_scratch(int64_t count, int slot = 0);

/// The weight types of matmul, matmul_id and embedding, in registration order.
inline constexpr DType kMatmulWeightTypes[] = {
    DType::f32,  DType::f16,  DType::bf16, DType::q4_0,   DType::q4_1,
    DType::q8_0, DType::q4_k, DType::q5_k, DType::q6_k,   DType::q5_0,
    DType::q5_1, DType::q2_k, DType::q3_k, DType::iq4_nl, DType::iq4_xs};

}  // namespace onepass::cpu
