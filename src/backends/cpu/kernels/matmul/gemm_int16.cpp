// The integer GEMM of the mm kernels (Isa::avx512_vnni): weight rows decoded to 16-bit
// integers with an f32 scale and offset per 32 values (RowKernels::decode_int16), x rounded
// as the matrix-vector kernels round it (XInt16), so prefill and decode see the same x.
//
// A tile of kInt16TileRows weight rows is packed "vertically": per pair of values one
// 64-byte vector holding that pair of each of the 16 rows, so one vpdpwssd with a
// broadcast pair of x accumulates 16 rows at once; per 32-value block a vector of the 16
// rows' scales and one of their offsets. Decoded rows are turned into that layout by a
// 16 x 16 transpose of dwords in registers, one per 32-value block.
//
// The microkernel takes MR rows of x (up to 8) x 16 weight rows: per 32-value block, 16
// vpdpwssd per row of x into int32 lanes (one lane per weight row, 32 products each), then
// the block's exact integer sum times the rows' scales into an f32 sum per XInt16 group,
// that sum times the group's scale into the output, and the offsets times x's block sums.
// No lane overflows: |x| <= 32768 and the decoders' |w| < 2048 (q4_0 8, q4_1 15, q5_0 16, q8_0 128,
// q4_k 63 · 15 = 945, q5_k 63 · 31 = 1953), so 32 · 2047 · 32768 < 2^31.
//
// Each output lane is computed the same way whatever the number of weight rows (the packed
// tile has zero rows past them), the place of the row in the tile, or MR: results do not
// depend on the tile shapes or on how the work is split between threads.
#include <algorithm>
#include <cstring>

#include "onepass/core/error.h"
#include "rows.h"
#include "simd.h"

namespace onepass::cpu {
namespace {

// Values per decode call while packing: one k-quant super-block, eight 32-value blocks; the
// 16 rows' decoded chunk (8 KiB of values) stays in L1 until it is transposed.
constexpr int64_t kPackChunk = 256;

}  // namespace
}  // namespace onepass::cpu

#if ONEPASS_CPU_X86
ONEPASS_AVX512_VNNI_BEGIN
namespace onepass::cpu::avx512_vnni {
namespace {

// rows[r] (16 dwords each) into cols[c] (dword r of cols[c] = dword c of rows[r]).
inline void transpose_16x16(const __m512i rows[16], __m512i cols[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(rows[2 * i], rows[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(rows[2 * i], rows[2 * i + 1]);
  }
  // u[4q + c], 128-bit lane L: rows 4q .. 4q + 3 of column 4L + c.
  for (int q = 0; q < 4; ++q) {
    u[4 * q] = _mm512_unpacklo_epi64(t[4 * q], t[4 * q + 2]);
    u[4 * q + 1] = _mm512_unpackhi_epi64(t[4 * q], t[4 * q + 2]);
    u[4 * q + 2] = _mm512_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);
    u[4 * q + 3] = _mm512_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]);
  }
  // Column 4L + c takes lane L of u[c], u[4 + c], u[8 + c], u[12 + c].
  for (int c = 0; c < 4; ++c) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44);
    const __m512i v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE);
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
    const __m512i v3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE);
    cols[c] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    cols[4 + c] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
    cols[8 + c] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    cols[12 + c] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
  }
}

// The decoded chunk (16 rows of `values` values, row stride kPackChunk) into the packed
// layout from block `first_block` on.
void pack_chunk(const int16_t* chunk, int64_t values, int64_t first_block, int32_t* pairs) {
  for (int64_t j = 0; j < values / 32; ++j) {
    __m512i rows[16], cols[16];
    for (int r = 0; r < 16; ++r) rows[r] = _mm512_load_si512(chunk + r * kPackChunk + 32 * j);
    transpose_16x16(rows, cols);
    int32_t* dst = pairs + (first_block + j) * 16 * kInt16TileRows;
    for (int p = 0; p < 16; ++p) _mm512_store_si512(dst + p * kInt16TileRows, cols[p]);
  }
}

inline __m512i broadcast_pair(const int16_t* x) {
  int32_t pair;
  std::memcpy(&pair, x, 4);
  return _mm512_set1_epi32(pair);
}

// MR rows of x with the 16 rows of the tile. With fewer than 4 rows of x each row's integer
// sum runs in two chains (even and odd pairs; exact, so the same sum), which keeps the
// vpdpwssd latency hidden.
template <int MR, bool kOffsets>
void tile_rows(const Int16Tile& tile, const XInt16& x, float* out, int64_t out_stride, __mmask16 mask) {
  constexpr int kChains = MR < 4 ? 2 : 1;
  const int64_t blocks = tile.k / 32;
  constexpr int64_t kGroupBlocks = kXInt16Group / 32;
  __m512 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b0 = 0, g = 0; b0 < blocks; b0 += kGroupBlocks, ++g) {
    const int64_t b1 = std::min(blocks, b0 + kGroupBlocks);
    __m512 part[MR];
    for (int i = 0; i < MR; ++i) part[i] = _mm512_setzero_ps();
    for (int64_t b = b0; b < b1; ++b) {
      const int32_t* wp = tile.pairs + b * 16 * kInt16TileRows;
      __m512i sum[MR][kChains];
      for (int i = 0; i < MR; ++i) {
        for (int c = 0; c < kChains; ++c) sum[i][c] = _mm512_setzero_si512();
      }
      for (int p = 0; p < 16; ++p) {
        const __m512i w = _mm512_load_si512(wp + p * kInt16TileRows);
        for (int i = 0; i < MR; ++i) {
          const __m512i xp = broadcast_pair(x.q + i * x.k + 32 * b + 2 * p);
          sum[i][p % kChains] = _mm512_dpwssd_epi32(sum[i][p % kChains], w, xp);
        }
      }
      const __m512 scale = _mm512_load_ps(tile.scales + b * kInt16TileRows);
      for (int i = 0; i < MR; ++i) {
        __m512i total = sum[i][0];
        if constexpr (kChains == 2) total = _mm512_add_epi32(total, sum[i][1]);
        part[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), scale, part[i]);
      }
      if constexpr (kOffsets) {
        const __m512 offset = _mm512_load_ps(tile.offsets + b * kInt16TileRows);
        for (int i = 0; i < MR; ++i) {
          acc[i] = _mm512_fmadd_ps(offset, _mm512_set1_ps(x.block_sum[i * blocks + b]), acc[i]);
        }
      }
    }
    for (int i = 0; i < MR; ++i) acc[i] = _mm512_fmadd_ps(part[i], _mm512_set1_ps(x.group_scale[i * x.groups + g]), acc[i]);
  }
  for (int i = 0; i < MR; ++i) _mm512_mask_storeu_ps(out + i * out_stride, mask, acc[i]);
}

template <bool kOffsets, int MR>
void tile_rows_take(int64_t take, const Int16Tile& tile, const XInt16& x, float* out, int64_t out_stride,
                    __mmask16 mask) {
  if constexpr (MR > 1) {
    if (take < MR) return tile_rows_take<kOffsets, MR - 1>(take, tile, x, out, out_stride, mask);
  }
  tile_rows<MR, kOffsets>(tile, x, out, out_stride, mask);
}

template <bool kOffsets>
void gemm(const Int16Tile& tile, const XInt16& x, int64_t m, float* out, int64_t out_stride) {
  constexpr int64_t kMr = 8;  // 8 integer sums + 8 group sums + 8 outputs: 24 of the 32 registers
  const auto mask = static_cast<__mmask16>((1u << tile.rows) - 1);
  XInt16 rows = x;
  while (m > 0) {
    const int64_t take = std::min(m, kMr);
    tile_rows_take<kOffsets, kMr>(take, tile, rows, out, out_stride, mask);
    m -= take;
    rows.q += take * x.k;
    rows.group_scale += take * x.groups;
    if (rows.block_sum != nullptr) rows.block_sum += take * (x.k / 32);
    out += take * out_stride;
  }
}

}  // namespace
}  // namespace onepass::cpu::avx512_vnni
ONEPASS_AVX512_VNNI_END
#endif  // ONEPASS_CPU_X86

namespace onepass::cpu {

Int16Tile pack_int16_tile(DecodeRowInt16Fn decode, const uint8_t* w, int64_t w_row_bytes, int64_t n, int64_t k,
                          int64_t chunk_bytes, bool offsets) {
  check(n >= 1 && n <= kInt16TileRows && k % 32 == 0, "cpu", "an int16 weight tile takes 1 to ", kInt16TileRows,
        " rows of whole 32-value blocks, got ", n, " rows of ", k);
  const int64_t blocks = k / 32;
  // Scratch (64-byte aligned, in 4-byte units): the packed pairs, the scales and offsets per
  // block, then the decoded chunk of 16 rows with its scales and offsets.
  const int64_t pair_words = blocks * 16 * kInt16TileRows;
  const int64_t block_words = blocks * kInt16TileRows;
  const int64_t chunk_words = kInt16TileRows * kPackChunk / 2;
  const int64_t chunk_block_words = kInt16TileRows * (kPackChunk / 32);
  float* base = thread_scratch(pair_words + 2 * block_words + chunk_words + 2 * chunk_block_words);
  Int16Tile tile;
  tile.k = k;
  tile.rows = n;
  auto* pairs = reinterpret_cast<int32_t*>(base);
  float* scales = base + pair_words;
  float* block_offsets = scales + block_words;
  auto* chunk = reinterpret_cast<int16_t*>(block_offsets + block_words);
  float* chunk_scales = block_offsets + block_words + chunk_words;
  float* chunk_offsets = chunk_scales + chunk_block_words;
  // Rows past n stay zero: zero values, scales and offsets give zero lanes.
  if (n < kInt16TileRows) {
    std::fill(chunk + n * kPackChunk, chunk + kInt16TileRows * kPackChunk, int16_t{0});
    std::fill(chunk_scales, chunk_scales + chunk_block_words, 0.0f);
    std::fill(chunk_offsets, chunk_offsets + chunk_block_words, 0.0f);
  }
#if ONEPASS_CPU_X86
  for (int64_t c0 = 0, c = 0; c0 < k; c0 += kPackChunk, ++c) {
    const int64_t values = std::min(kPackChunk, k - c0);
    for (int64_t r = 0; r < n; ++r) {
      decode(w + r * w_row_bytes + c * chunk_bytes, values, chunk + r * kPackChunk, chunk_scales + r * (kPackChunk / 32),
             chunk_offsets + r * (kPackChunk / 32));
    }
    avx512_vnni::pack_chunk(chunk, values, c0 / 32, pairs);
    for (int64_t j = 0; j < values / 32; ++j) {
      for (int64_t r = 0; r < kInt16TileRows; ++r) {
        scales[(c0 / 32 + j) * kInt16TileRows + r] = chunk_scales[r * (kPackChunk / 32) + j];
        block_offsets[(c0 / 32 + j) * kInt16TileRows + r] = chunk_offsets[r * (kPackChunk / 32) + j];
      }
    }
  }
#else
  (void)decode;
  (void)w;
  (void)w_row_bytes;
  (void)chunk_bytes;
  check(false, "cpu", "the int16 GEMM is an avx512_vnni path");
#endif
  tile.pairs = pairs;
  tile.scales = scales;
  tile.offsets = offsets ? block_offsets : nullptr;
  return tile;
}

void gemm_int16(const Int16Tile& tile, const XInt16& x, int64_t m, float* out, int64_t out_stride) {
  check(x.k == tile.k && (tile.offsets == nullptr || x.block_sum != nullptr), "cpu",
        "int16 GEMM: x of ", x.k, " values for a tile of ", tile.k, ", with block sums where the tile has offsets");
#if ONEPASS_CPU_X86
  if (tile.offsets != nullptr) return avx512_vnni::gemm<true>(tile, x, m, out, out_stride);
  return avx512_vnni::gemm<false>(tile, x, m, out, out_stride);
#else
  (void)m;
  (void)out;
  (void)out_stride;
  check(false, "cpu", "the int16 GEMM is an avx512_vnni path");
#endif
}

}  // namespace onepass::cpu
