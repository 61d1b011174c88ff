// The integer GEMM of the mm kernels (Isa::avx512_vnni; avx2 and avx512 below): weight rows
// decoded to 16-bit integers with an f32 scale and offset per 32 values
// (RowKernels::decode_int16), x rounded as the matrix-vector kernels round it (XInt16), so
// prefill and decode see the same x.
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
// No lane overflows: |x| <= 32768 and the decoders' |w| < 2048 (q4_0 8, q4_1 15, q5_0 16, q5_1 31,
// q8_0 128, iq4_nl and iq4_xs 127 (their grid values; iq4_xs's run scale goes with d),
// q4_k 63 · 15 = 945, q5_k 63 · 31 = 1953), so 32 · 2047 · 32768 < 2^31.
//
// The k-quants with a scale per 16 values (q2_k, q6_k) are packed as half blocks: the bare
// quants (q6_k's q - 32, |.| <= 32; q2_k's q <= 3) with a scale and offset per 16 values. Each
// half's 8 pairs go into their own integer sum (16 products, |sum| <= 16 · 32 · 32768 =
// 2^24), scaled by the half's scale; q2_k's mins are the offsets times the sums of x's 16
// integers (int16_half_block_sums), added to the group's f32 sum before its scale, so they
// see x rounded exactly as the values do.
//
// Isa::avx2 (and avx512 without VNNI) multiplies the same packed tiles with vpmaddwd (two
// products per int32 lane) and vpaddd: the same exact integer sums per 32 (16) values, group
// by group through all rows of x, so that the group's 8 KiB of the tile stay in L1 (see
// avx2::gemm).
//
// Each output lane is computed the same way whatever the number of weight rows (the packed
// tile has zero rows past them), the place of the row in the tile, or MR: results do not
// depend on the tile shapes or on how the work is split between threads.
#include <algorithm>
#include <cstring>
#include <vector>

#include "onepass/core/error.h"
#include "rows.h"
#include "simd.h"

namespace onepass::cpu {
namespace {

// Values per decode call while packing: one k-quant super-block, eight 32-value blocks; the
// 16 rows' decoded chunk (8 KiB of values) stays in L1 until it is transposed.
constexpr int64_t kPackChunk = 256;
// How many chunks ahead of the one being decoded the packing asks for each row's weights:
// 16 short streams, which the hardware prefetchers do not keep ahead of.
constexpr int64_t kPackPrefetchChunks = 2;

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

// The decoded chunk's scales (or offsets; 16 rows of `units` floats, row stride `stride`,
// units <= 16) as `units` vectors of the 16 rows' values.
void pack_chunk_scales(const float* chunk, int64_t stride, int64_t units, float* dst) {
  __m512i rows[16], cols[16];
  const auto mask = static_cast<__mmask16>((1u << units) - 1);
  for (int r = 0; r < 16; ++r) rows[r] = _mm512_castps_si512(_mm512_maskz_loadu_ps(mask, chunk + r * stride));
  transpose_16x16(rows, cols);
  for (int64_t j = 0; j < units; ++j) _mm512_store_si512(dst + j * kInt16TileRows, cols[j]);
}

inline __m512i broadcast_pair(const int16_t* x) {
  int32_t pair;
  std::memcpy(&pair, x, 4);
  return _mm512_set1_epi32(pair);
}

// How a tile's scales and offsets run: per 32-value block, with or without offsets (x's
// f32 block sums), or per 16 values, with or without offsets (x's integer half-block sums).
enum class Layout { blocks, blocks_offsets, halves, halves_offsets };

// MR rows of x with the 16 rows of the tile. With fewer than 4 rows of x each row's integer
// sum runs in two chains (even and odd pairs; exact, so the same sum), which keeps the
// vpdpwssd latency hidden.
template <int MR, Layout kLayout>
void tile_rows(const Int16Tile& tile, const XInt16& x, const float* half_sums, float* out, int64_t out_stride,
               __mmask16 mask) {
  constexpr bool kHalves = kLayout == Layout::halves || kLayout == Layout::halves_offsets;
  constexpr int kUnits = kHalves ? 2 : 1;  // scales per 32-value block
  constexpr int kPairs = 16 / kUnits;      // pairs per scale
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
      for (int u = 0; u < kUnits; ++u) {
        const int32_t* wp = tile.pairs + (b * 16 + u * kPairs) * kInt16TileRows;
        const int16_t* xu = x.q + 32 * b + 2 * kPairs * u;
        __m512i sum[MR][kChains];
        for (int i = 0; i < MR; ++i) {
          for (int c = 0; c < kChains; ++c) sum[i][c] = _mm512_setzero_si512();
        }
        // Unrolled, so that each sum stays in its register (a rolled loop copied every sum
        // to another register and back around each vpdpwssd).
#pragma GCC unroll 16
        for (int p = 0; p < kPairs; ++p) {
          const __m512i w = _mm512_load_si512(wp + p * kInt16TileRows);
#pragma GCC unroll 8
          for (int i = 0; i < MR; ++i) {
            const __m512i xp = broadcast_pair(xu + i * x.k + 2 * p);
            sum[i][p % kChains] = _mm512_dpwssd_epi32(sum[i][p % kChains], w, xp);
          }
        }
        const __m512 scale = _mm512_load_ps(tile.scales + (b * kUnits + u) * kInt16TileRows);
        for (int i = 0; i < MR; ++i) {
          __m512i total = sum[i][0];
          if constexpr (kChains == 2) total = _mm512_add_epi32(total, sum[i][1]);
          part[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), scale, part[i]);
        }
        if constexpr (kLayout == Layout::halves_offsets) {
          const __m512 offset = _mm512_load_ps(tile.offsets + (b * kUnits + u) * kInt16TileRows);
          for (int i = 0; i < MR; ++i) {
            part[i] = _mm512_fmadd_ps(offset, _mm512_set1_ps(half_sums[i * 2 * blocks + 2 * b + u]), part[i]);
          }
        }
      }
      if constexpr (kLayout == Layout::blocks_offsets) {
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

template <Layout kLayout, int MR>
void tile_rows_take(int64_t take, const Int16Tile& tile, const XInt16& x, const float* half_sums, float* out,
                    int64_t out_stride, __mmask16 mask) {
  if constexpr (MR > 1) {
    if (take < MR) return tile_rows_take<kLayout, MR - 1>(take, tile, x, half_sums, out, out_stride, mask);
  }
  tile_rows<MR, kLayout>(tile, x, half_sums, out, out_stride, mask);
}

template <Layout kLayout>
void gemm(const Int16Tile& tile, const XInt16& x, const float* half_sums, int64_t m, float* out,
          int64_t out_stride) {
  constexpr int64_t kMr = 8;  // 8 integer sums + 8 group sums + 8 outputs: 24 of the 32 registers
  const auto mask = static_cast<__mmask16>((1u << tile.rows) - 1);
  for (int64_t row = 0; row < m; row += kMr) {
    tile_rows_take<kLayout, kMr>(std::min(m - row, kMr), tile, x.rows_from(row),
                                 half_sums != nullptr ? half_sums + row * (x.k / 16) : nullptr, out + row * out_stride,
                                 out_stride, mask);
  }
}

// Sums of 16 consecutive words of each row of x (k a multiple of 32): per 32 values one
// vector of words added pairwise into dwords, then each half's 8 dwords.
void half_block_sums(const XInt16& x, int64_t m, float* sums) {
  const __m512i ones = _mm512_set1_epi16(1);
  for (int64_t i = 0; i < m; ++i) {
    const int16_t* row = x.q + i * x.k;
    float* dst = sums + i * (x.k / 16);
    for (int64_t b = 0; b < x.k / 32; ++b) {
      const __m512i pairs = _mm512_madd_epi16(_mm512_loadu_si512(row + 32 * b), ones);  // 16 dwords
      dst[2 * b] = static_cast<float>(_mm512_mask_reduce_add_epi32(0x00FF, pairs));
      dst[2 * b + 1] = static_cast<float>(_mm512_mask_reduce_add_epi32(0xFF00, pairs));
    }
  }
}

}  // namespace
}  // namespace onepass::cpu::avx512_vnni
ONEPASS_AVX512_VNNI_END

ONEPASS_AVX2_BEGIN
namespace onepass::cpu::avx2 {
namespace {

// The Isa::avx2 GEMM (also Isa::avx512 without VNNI) on the same packed tiles: each 64-byte
// pair vector of the 16 rows is two vectors of 8 rows, both multiplied with each broadcast
// pair of x; vpmaddwd gives each row's two products of a pair in one int32 lane, vpaddd adds
// them up. Per 32 values the same exact integer sums as vpdpwssd, the same f32 steps after
// them.

// rows[r] (8 dwords each) into cols[c] (dword r of cols[c] = dword c of rows[r]).
inline void transpose_8x8(const __m256i rows[8], __m256i cols[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(rows[2 * i], rows[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(rows[2 * i], rows[2 * i + 1]);
  }
  // u[4q + c], 128-bit lane L: rows 4q .. 4q + 3 of column 4L + c.
  for (int q = 0; q < 2; ++q) {
    u[4 * q] = _mm256_unpacklo_epi64(t[4 * q], t[4 * q + 2]);
    u[4 * q + 1] = _mm256_unpackhi_epi64(t[4 * q], t[4 * q + 2]);
    u[4 * q + 2] = _mm256_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);
    u[4 * q + 3] = _mm256_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    cols[c] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x20);
    cols[4 + c] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x31);
  }
}

// As avx512_vnni::pack_chunk: four 8 x 8 transposes per 32-value block.
void pack_chunk(const int16_t* chunk, int64_t values, int64_t first_block, int32_t* pairs) {
  for (int64_t j = 0; j < values / 32; ++j) {
    int32_t* dst = pairs + (first_block + j) * 16 * kInt16TileRows;
    for (int rh = 0; rh < 2; ++rh) {
      for (int ch = 0; ch < 2; ++ch) {
        __m256i rows[8], cols[8];
        for (int r = 0; r < 8; ++r) {
          rows[r] = _mm256_load_si256(reinterpret_cast<const __m256i*>(chunk + (8 * rh + r) * kPackChunk + 32 * j + 16 * ch));
        }
        transpose_8x8(rows, cols);
        for (int c = 0; c < 8; ++c) {
          _mm256_store_si256(reinterpret_cast<__m256i*>(dst + (8 * ch + c) * kInt16TileRows + 8 * rh), cols[c]);
        }
      }
    }
  }
}

// As avx512_vnni::pack_chunk_scales.
void pack_chunk_scales(const float* chunk, int64_t stride, int64_t units, float* dst) {
  for (int64_t j = 0; j < units; ++j) {
    for (int64_t r = 0; r < kInt16TileRows; ++r) dst[j * kInt16TileRows + r] = chunk[r * stride + j];
  }
}

inline __m256i broadcast_pair(const int16_t* x) {
  int32_t pair;
  std::memcpy(&pair, x, 4);
  return _mm256_set1_epi32(pair);
}

enum class Layout { blocks, blocks_offsets, halves, halves_offsets };

// MR rows of x with the 16 rows of the tile over the blocks [b0, b1) of group g, as
// avx512_vnni::tile_rows per lane: per pair of values the two halves' vectors (rows 0..7 and
// 8..15) with one broadcast pair of x each. The integer sums and the group's sums stay in
// registers (4 MR of the 16); acc, the rows' 16 output sums, is in memory, touched once per
// group (and per block for the formats with offsets per block).
template <int MR, Layout kLayout>
void group_rows(const Int16Tile& tile, const XInt16& x, const float* half_sums, int64_t b0, int64_t b1, int64_t g,
                float (*acc)[16]) {
  constexpr bool kHalves = kLayout == Layout::halves || kLayout == Layout::halves_offsets;
  constexpr int kUnits = kHalves ? 2 : 1;
  constexpr int kPairs = 16 / kUnits;
  const int64_t blocks = tile.k / 32;
  __m256 part[MR][2];
  for (int i = 0; i < MR; ++i) part[i][0] = part[i][1] = _mm256_setzero_ps();
  for (int64_t b = b0; b < b1; ++b) {
    for (int u = 0; u < kUnits; ++u) {
      const int32_t* wp = tile.pairs + (b * 16 + u * kPairs) * kInt16TileRows;
      const int16_t* xu = x.q + 32 * b + 2 * kPairs * u;
      __m256i sum[MR][2];
      for (int i = 0; i < MR; ++i) sum[i][0] = sum[i][1] = _mm256_setzero_si256();
#pragma GCC unroll 16
      for (int p = 0; p < kPairs; ++p) {
        const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(wp + p * kInt16TileRows));
        const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(wp + p * kInt16TileRows + 8));
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
          const __m256i xp = broadcast_pair(xu + i * x.k + 2 * p);
          sum[i][0] = _mm256_add_epi32(sum[i][0], _mm256_madd_epi16(w0, xp));
          sum[i][1] = _mm256_add_epi32(sum[i][1], _mm256_madd_epi16(w1, xp));
        }
      }
      for (int h = 0; h < 2; ++h) {
        const __m256 scale = _mm256_load_ps(tile.scales + (b * kUnits + u) * kInt16TileRows + 8 * h);
        for (int i = 0; i < MR; ++i) part[i][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[i][h]), scale, part[i][h]);
        if constexpr (kLayout == Layout::halves_offsets) {
          const __m256 offset = _mm256_load_ps(tile.offsets + (b * kUnits + u) * kInt16TileRows + 8 * h);
          for (int i = 0; i < MR; ++i) {
            part[i][h] = _mm256_fmadd_ps(offset, _mm256_set1_ps(half_sums[i * 2 * blocks + 2 * b + u]), part[i][h]);
          }
        }
      }
    }
    if constexpr (kLayout == Layout::blocks_offsets) {
      for (int h = 0; h < 2; ++h) {
        const __m256 offset = _mm256_load_ps(tile.offsets + b * kInt16TileRows + 8 * h);
        for (int i = 0; i < MR; ++i) {
          _mm256_store_ps(acc[i] + 8 * h, _mm256_fmadd_ps(offset, _mm256_set1_ps(x.block_sum[i * blocks + b]),
                                                          _mm256_load_ps(acc[i] + 8 * h)));
        }
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    const __m256 group_scale = _mm256_set1_ps(x.group_scale[i * x.groups + g]);
    for (int h = 0; h < 2; ++h) {
      _mm256_store_ps(acc[i] + 8 * h, _mm256_fmadd_ps(part[i][h], group_scale, _mm256_load_ps(acc[i] + 8 * h)));
    }
  }
}

template <Layout kLayout, int MR>
void group_rows_take(int64_t take, const Int16Tile& tile, const XInt16& x, const float* half_sums, int64_t b0,
                     int64_t b1, int64_t g, float (*acc)[16]) {
  if constexpr (MR > 1) {
    if (take < MR) return group_rows_take<kLayout, MR - 1>(take, tile, x, half_sums, b0, b1, g, acc);
  }
  group_rows<MR, kLayout>(tile, x, half_sums, b0, b1, g, acc);
}

// Group by group (256 values: 8 KiB of the packed tile, which stays in L1), all rows of x
// (up to 64 at a time) in turn, 3 at a time.
template <Layout kLayout>
void gemm(const Int16Tile& tile, const XInt16& x, const float* half_sums, int64_t m, float* out, int64_t out_stride) {
  constexpr int64_t kMr = 3;  // 6 integer sums, 6 group sums, 2 weight vectors and x: 15 of the 16 registers
  constexpr int64_t kChunk = 64;
  constexpr int64_t kGroupBlocks = kXInt16Group / 32;
  const int64_t blocks = tile.k / 32;
  alignas(32) float acc[kChunk][16];
  for (int64_t c0 = 0; c0 < m; c0 += kChunk) {
    const int64_t rows = std::min(m - c0, kChunk);
    std::fill(&acc[0][0], &acc[0][0] + rows * 16, 0.0f);
    for (int64_t b0 = 0, g = 0; b0 < blocks; b0 += kGroupBlocks, ++g) {
      const int64_t b1 = std::min(blocks, b0 + kGroupBlocks);
      for (int64_t row = 0; row < rows; row += kMr) {
        group_rows_take<kLayout, kMr>(std::min(rows - row, kMr), tile, x.rows_from(c0 + row),
                                      half_sums != nullptr ? half_sums + (c0 + row) * (x.k / 16) : nullptr, b0, b1, g,
                                      acc + row);
      }
    }
    for (int64_t i = 0; i < rows; ++i) std::copy_n(acc[i], tile.rows, out + (c0 + i) * out_stride);
  }
}

void half_block_sums(const XInt16& x, int64_t m, float* sums) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < m; ++i) {
    const int16_t* row = x.q + i * x.k;
    float* dst = sums + i * (x.k / 16);
    for (int64_t h = 0; h < x.k / 16; ++h) {
      const __m256i pairs = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 16 * h)), ones);
      __m128i s = _mm_add_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
      dst[h] = static_cast<float>(_mm_cvtsi128_si32(s));
    }
  }
}

}  // namespace
}  // namespace onepass::cpu::avx2
ONEPASS_AVX2_END
#endif  // ONEPASS_CPU_X86

namespace onepass::cpu {

Int16Tile pack_int16_tile(DecodeRowInt16Fn decode, const uint8_t* w, int64_t w_row_bytes, int64_t n, int64_t k,
                          int64_t chunk_bytes, bool offsets, bool half_blocks, Isa isa) {
  check(n >= 1 && n <= kInt16TileRows && k % 32 == 0, "cpu", "an int16 weight tile takes 1 to ", kInt16TileRows,
        " rows of whole 32-value blocks, got ", n, " rows of ", k);
  const int64_t blocks = k / 32;
  const int64_t units = half_blocks ? 2 : 1;  // scales per 32-value block
  const int64_t chunk_units = units * (kPackChunk / 32);
  // Scratch (64-byte aligned, in 4-byte units): the packed pairs, the scales and offsets per
  // block (per half block), then the decoded chunk of 16 rows with its scales and offsets.
  const int64_t pair_words = blocks * 16 * kInt16TileRows;
  const int64_t block_words = units * blocks * kInt16TileRows;
  const int64_t chunk_words = kInt16TileRows * kPackChunk / 2;
  const int64_t chunk_block_words = kInt16TileRows * chunk_units;
  float* base = thread_scratch(pair_words + 2 * block_words + chunk_words + 2 * chunk_block_words);
  Int16Tile tile;
  tile.k = k;
  tile.rows = n;
  tile.half_blocks = half_blocks;
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
      const uint8_t* row = w + r * w_row_bytes;
      for (int64_t o = 0; o < chunk_bytes; o += 64) __builtin_prefetch(row + (c + kPackPrefetchChunks) * chunk_bytes + o, 0, 2);
      decode(row + c * chunk_bytes, values, chunk + r * kPackChunk, chunk_scales + r * chunk_units,
             chunk_offsets + r * chunk_units);
    }
    const int64_t chunk_scale_count = units * values / 32;
    float* chunk_scales_dst = scales + units * c0 / 32 * kInt16TileRows;
    float* chunk_offsets_dst = block_offsets + units * c0 / 32 * kInt16TileRows;
    if (isa == Isa::avx512_vnni) {
      avx512_vnni::pack_chunk(chunk, values, c0 / 32, pairs);
      avx512_vnni::pack_chunk_scales(chunk_scales, chunk_units, chunk_scale_count, chunk_scales_dst);
      avx512_vnni::pack_chunk_scales(chunk_offsets, chunk_units, chunk_scale_count, chunk_offsets_dst);
    } else {
      avx2::pack_chunk(chunk, values, c0 / 32, pairs);
      avx2::pack_chunk_scales(chunk_scales, chunk_units, chunk_scale_count, chunk_scales_dst);
      avx2::pack_chunk_scales(chunk_offsets, chunk_units, chunk_scale_count, chunk_offsets_dst);
    }
  }
#else
  (void)decode;
  (void)w;
  (void)w_row_bytes;
  (void)chunk_bytes;
  (void)isa;
  check(false, "cpu", "the int16 GEMM is an x86-64 path");
#endif
  tile.pairs = pairs;
  tile.scales = scales;
  tile.offsets = offsets ? block_offsets : nullptr;
  return tile;
}

const float* int16_half_block_sums(const XInt16& x, int64_t m, Isa isa) {
  thread_local std::vector<float> sums;
  sums.resize(static_cast<size_t>(m * (x.k / 16)));
#if ONEPASS_CPU_X86
  if (isa == Isa::avx512_vnni) {
    avx512_vnni::half_block_sums(x, m, sums.data());
  } else {
    avx2::half_block_sums(x, m, sums.data());
  }
#else
  (void)isa;
  check(false, "cpu", "the int16 GEMM is an x86-64 path");
#endif
  return sums.data();
}

void gemm_int16(const Int16Tile& tile, const XInt16& x, int64_t m, float* out, int64_t out_stride, Isa isa,
                const float* half_sums) {
  const bool needs_block_sums = tile.offsets != nullptr && !tile.half_blocks;
  const bool needs_half_sums = tile.offsets != nullptr && tile.half_blocks;
  check(x.k == tile.k && (!needs_block_sums || x.block_sum != nullptr) && (!needs_half_sums || half_sums != nullptr),
        "cpu", "int16 GEMM: x of ", x.k, " values for a tile of ", tile.k,
        ", with block sums where the tile has offsets per 32 values, half-block sums where per 16");
#if ONEPASS_CPU_X86
  if (isa == Isa::avx512_vnni) {
    using avx512_vnni::Layout;
    if (needs_half_sums) return avx512_vnni::gemm<Layout::halves_offsets>(tile, x, half_sums, m, out, out_stride);
    if (tile.half_blocks) return avx512_vnni::gemm<Layout::halves>(tile, x, nullptr, m, out, out_stride);
    if (needs_block_sums) return avx512_vnni::gemm<Layout::blocks_offsets>(tile, x, nullptr, m, out, out_stride);
    return avx512_vnni::gemm<Layout::blocks>(tile, x, nullptr, m, out, out_stride);
  }
  using avx2::Layout;
  if (needs_half_sums) return avx2::gemm<Layout::halves_offsets>(tile, x, half_sums, m, out, out_stride);
  if (tile.half_blocks) return avx2::gemm<Layout::halves>(tile, x, nullptr, m, out, out_stride);
  if (needs_block_sums) return avx2::gemm<Layout::blocks_offsets>(tile, x, nullptr, m, out, out_stride);
  return avx2::gemm<Layout::blocks>(tile, x, nullptr, m, out, out_stride);
#else
  (void)isa;
  (void)m;
  (void)out;
  (void)out_stride;
  (void)half_sums;
  check(false, "cpu", "the int16 GEMM is an x86-64 path");
#endif
}

}  // namespace onepass::cpu
