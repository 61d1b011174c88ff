// Integer row kernels of the k-quants q4_k, q5_k and q6_k for x rounded to 16-bit integers
// per group of 256 values (XInt16), one group per super-block: Isa::avx512_vnni (vpdpwssd)
// and Isa::avx2 (vpmaddwd, also on Isa::avx512).
//
// q4_k / q5_k: weight j = d · sc[j / 32] · q_j - dmin · mn[j / 32], q_j 4 or 5 bits, sc and
// mn 6 bits per 32-value sub-block. Each value is decoded to the 16-bit integer sc · q (at
// most 63 · 31 = 1953), dotted with x's integers into 32-bit lanes, and the super-block's
// exact integer sum is scaled once in f32 by d times x's group scale; the mins take
// dmin · Σ mn · (f32 sum of the sub-block's x), x's block sums. No lane overflows: a lane
// sums at most 32 products (vpmaddwd over a super-block), below 32 · 1953 · 32767 < 2^31.
//
// A q6_k super-block is 256 values, one XInt16 group: weight j = d · sc[j / 16] · (q_j - 32)
// with q_j a 6-bit integer and sc a signed byte per 16 values. Each value is decoded to the
// 16-bit integer sc · (q - 32) (at most 32 · 128 = 4096 in magnitude), dotted with x's
// integers into 32-bit lanes, and the super-block's exact integer sum is scaled once in
// f32 by d times x's group scale. No lane overflows: a lane sums at most 16 products
// (below 16 · 4096 · 32767 < 2^31).
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "rows.h"
#include "simd.h"

namespace onepass::cpu {
namespace {

constexpr int64_t kQ6KBytes = 210;

// A run of 32 values of a super-block, as a compile-time constant.
template <int kChunk>
using Chunk = std::integral_constant<int, kChunk>;

// The 8 sub-block scales sc and mins mn (6 bits each) of a q4_k / q5_k super-block at b, as
// bytes: the 12 packed bytes (kquant_scale_min) unpacked four sub-blocks at a time in
// 32-bit words.
inline void kquant_scale_bytes(const uint8_t* b, uint8_t sc[8], uint8_t mn[8]) {
  uint32_t w[3];
  std::memcpy(w, b + 4, 12);
  const uint32_t s[2] = {w[0] & 0x3f3f3f3fu, (w[2] & 0x0f0f0f0fu) | (((w[0] >> 6) & 0x03030303u) << 4)};
  const uint32_t m[2] = {w[1] & 0x3f3f3f3fu, ((w[2] >> 4) & 0x0f0f0f0fu) | (((w[1] >> 6) & 0x03030303u) << 4)};
  std::memcpy(sc, s, 8);
  std::memcpy(mn, m, 8);
}

// How far ahead of the weights being read kasym_weight_rows_r asks for them, in bytes along
// the rows read side by side (see block32_int16.cpp's dot_weight_rows_r: R short streams,
// which the hardware prefetchers do not pick up as one long one).
constexpr int64_t kPrefetchBytes = 4096;

}  // namespace
}  // namespace onepass::cpu

#if ONEPASS_CPU_X86
ONEPASS_AVX512_VNNI_BEGIN
namespace onepass::cpu::avx512_vnni {
namespace {

// The 4 runs of 64 values of the q6_k super-block at b, in value order: f(Chunk<u>, even,
// odd) with `even` the 32 words sc · (q - 32) of the run's values of even index, `odd` those
// of odd index (x in XInt16Order::even_odd matches them word for word).
//
// Per half of 128 values: 64 bytes of low nibbles (byte l: value l low, value l + 64 high)
// and 32 bytes of top bits (byte l: bits 2s..2s+1 for value l + 32s). The top-bit bytes are
// read twice over (both 256-bit halves) and shifted per half by a different count, so one
// 512-bit operation assembles the 64 bytes q - 32 of a run in value order. Their words are
// split into even and odd bytes by shifts, not by the shuffle unit, which the scales' word
// permute keeps busy: one permute per run, its 4 sub-blocks' scales each on 8 words.
template <typename F>
inline void q6_k_runs(const uint8_t* b, F&& f) {
  // Word j of a run's `even` and `odd` belongs to the run's sub-block j / 8.
  alignas(64) static constexpr int16_t kSubBlockOfWord[32] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                               2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
  const __m512i scales =
      _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192))));
  const __m512i sub_block = _mm512_load_si512(kSubBlockOfWord);
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i top2 = _mm512_set1_epi8(0x30);
  const __m512i bias = _mm512_set1_epi8(32);
  // Per 16-bit lane: first 256 bits / last 256 bits. Bits 0..1 and 2..3 of a top-bit byte
  // go to bits 4..5 with a left shift by 4 and 2, bits 4..5 and 6..7 with a right shift by 0
  // and 2 (the bits shifted in from the neighbouring byte are masked off).
  const __m512i shift_up = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shift_down = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  auto run = [&](auto chunk, __m512i bytes) {
    constexpr int u = decltype(chunk)::value;
    const __m512i scale = _mm512_permutexvar_epi16(_mm512_add_epi16(sub_block, _mm512_set1_epi16(4 * u)), scales);
    const __m512i even = _mm512_srai_epi16(_mm512_slli_epi16(bytes, 8), 8);
    const __m512i odd = _mm512_srai_epi16(bytes, 8);
    f(chunk, _mm512_mullo_epi16(even, scale), _mm512_mullo_epi16(odd, scale));
  };
  auto half = [&](auto h_constant) {
    constexpr int h = decltype(h_constant)::value;
    const __m512i low = _mm512_loadu_si512(b + 64 * h);
    const __m512i top =
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h)));
    // low | (shifted top & 0x30), then - 32: imm 0xF8 is A | (B & C).
    run(Chunk<2 * h>{},
        _mm512_sub_epi8(
            _mm512_ternarylogic_epi32(_mm512_and_si512(low, low4), _mm512_sllv_epi16(top, shift_up), top2, 0xF8),
            bias));
    run(Chunk<2 * h + 1>{},
        _mm512_sub_epi8(_mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(low, 4), low4),
                                                  _mm512_srlv_epi16(top, shift_down), top2, 0xF8),
                        bias));
  };
  half(std::integral_constant<int, 0>{});
  half(std::integral_constant<int, 1>{});
}

// M rows of x (in XInt16Order::even_odd) with one weight row: each super-block decoded
// once, its runs dotted with every row into two integer sums per row (even and odd words),
// then d · group scale into the row's f32 sum.
template <int M>
void q6_k_dot_group(const uint8_t* w, const XInt16& x, float* out, int64_t out_stride) {
  const int64_t blocks = x.k / 256;
  __m512 acc[M];
  for (int i = 0; i < M; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* wb = w + b * kQ6KBytes;
    __m512i sum[M][2];
    for (int i = 0; i < M; ++i) sum[i][0] = sum[i][1] = _mm512_setzero_si512();
    q6_k_runs(wb, [&](auto chunk, __m512i even, __m512i odd) {
      constexpr int u = decltype(chunk)::value;
      for (int i = 0; i < M; ++i) {
        const int16_t* xu = x.q + i * x.k + 256 * b + 64 * u;
        sum[i][0] = _mm512_dpwssd_epi32(sum[i][0], even, _mm512_load_si512(xu));
        sum[i][1] = _mm512_dpwssd_epi32(sum[i][1], odd, _mm512_load_si512(xu + 32));
      }
    });
    const float d = half_at(wb + 208);
    for (int i = 0; i < M; ++i) {
      const __m512 total = _mm512_cvtepi32_ps(_mm512_add_epi32(sum[i][0], sum[i][1]));
      acc[i] = _mm512_fmadd_ps(total, _mm512_set1_ps(d * x.group_scale[i * x.groups + b]), acc[i]);
    }
  }
  for (int i = 0; i < M; ++i) out[i * out_stride] = _mm512_reduce_add_ps(acc[i]);
}

// DotRowsInt16Fn: groups of up to 4 rows of x share one decode of each super-block.
void q6_k_dot_rows(const void* row, const XInt16& x, int64_t m, float* out, int64_t out_stride) {
  const auto* w = static_cast<const uint8_t*>(row);
  for_row_groups<4>(x, m, out, out_stride, [&]<int M>(const XInt16& rows, float* o) {
    q6_k_dot_group<M>(w, rows, o, out_stride);
  });
}



// The 4 pairs of 32-value sub-blocks (2p, 2p + 1) of the q4_k / q5_k super-block at b:
// f(Chunk<p>, low, high), the 32 words sc · q of each sub-block in value order. Byte l of a
// pair's 32 quant bytes holds value l of sub-block 2p (low nibble) and of 2p + 1 (high);
// q5_k's fifth bit of value l of sub-block s is bit s of qh byte l.
template <bool kFifthBit, typename F>
inline void kasym_pairs(const uint8_t* b, const uint8_t sc[8], F&& f) {
  const uint8_t* qs = b + (kFifthBit ? 48 : 16);
  const __m512i low4 = _mm512_set1_epi16(0x000F);
  const __m512i bit4 = _mm512_set1_epi16(0x0010);
  __m512i qh = _mm512_setzero_si512();
  if constexpr (kFifthBit) qh = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16)));
  // Bit s of qh's words moved to bit 4.
  auto fifth = [&](auto s_constant) {
    constexpr int s = decltype(s_constant)::value;
    if constexpr (s <= 4) {
      return _mm512_slli_epi16(qh, 4 - s);
    } else {
      return _mm512_srli_epi16(qh, s - 4);
    }
  };
  auto pair = [&](auto p_constant) {
    constexpr int p = decltype(p_constant)::value;
    const __m512i raw = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * p)));
    __m512i low = _mm512_and_si512(raw, low4);
    __m512i high = _mm512_srli_epi16(raw, 4);
    if constexpr (kFifthBit) {
      // A | (B & C): imm 0xF8.
      low = _mm512_ternarylogic_epi32(low, fifth(std::integral_constant<int, 2 * p>{}), bit4, 0xF8);
      high = _mm512_ternarylogic_epi32(high, fifth(std::integral_constant<int, 2 * p + 1>{}), bit4, 0xF8);
    }
    f(Chunk<p>{}, _mm512_mullo_epi16(low, _mm512_set1_epi16(sc[2 * p])),
      _mm512_mullo_epi16(high, _mm512_set1_epi16(sc[2 * p + 1])));
  };
  pair(std::integral_constant<int, 0>{});
  pair(std::integral_constant<int, 1>{});
  pair(std::integral_constant<int, 2>{});
  pair(std::integral_constant<int, 3>{});
}

// The 8 mins of a super-block times -dmin, as f32 lanes.
inline __m256 kasym_mins(const uint8_t* b, const uint8_t mn[8]) {
  const __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mn))));
  return _mm256_mul_ps(m, _mm256_set1_ps(-half_at(b + 2)));
}

// M rows of x (in value order, with block sums) with one q4_k / q5_k weight row: each
// super-block decoded once, its pairs dotted with every row into two integer sums per row
// (low and high sub-blocks), then d · group scale into the row's f32 sum; the mins into an
// 8-lane f32 sum per row.
template <bool kFifthBit, int M>
void kasym_dot_group(const uint8_t* w, const XInt16& x, float* out, int64_t out_stride) {
  constexpr int64_t kBytes = kFifthBit ? 176 : 144;
  const int64_t blocks = x.k / 256;
  __m512 acc[M];
  __m256 mins[M];
  for (int i = 0; i < M; ++i) {
    acc[i] = _mm512_setzero_ps();
    mins[i] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* wb = w + b * kBytes;
    alignas(8) uint8_t sc[8], mn[8];
    kquant_scale_bytes(wb, sc, mn);
    __m512i sum[M][2];
    for (int i = 0; i < M; ++i) sum[i][0] = sum[i][1] = _mm512_setzero_si512();
    kasym_pairs<kFifthBit>(wb, sc, [&](auto chunk, __m512i low, __m512i high) {
      constexpr int p = decltype(chunk)::value;
      for (int i = 0; i < M; ++i) {
        const int16_t* xp = x.q + i * x.k + 256 * b + 64 * p;
        sum[i][0] = _mm512_dpwssd_epi32(sum[i][0], low, _mm512_load_si512(xp));
        sum[i][1] = _mm512_dpwssd_epi32(sum[i][1], high, _mm512_load_si512(xp + 32));
      }
    });
    const float d = half_at(wb);
    const __m256 m = kasym_mins(wb, mn);
    for (int i = 0; i < M; ++i) {
      const __m512 total = _mm512_cvtepi32_ps(_mm512_add_epi32(sum[i][0], sum[i][1]));
      acc[i] = _mm512_fmadd_ps(total, _mm512_set1_ps(d * x.group_scale[i * x.groups + b]), acc[i]);
      mins[i] = _mm256_fmadd_ps(m, _mm256_loadu_ps(x.block_sum + i * (x.k / 32) + 8 * b), mins[i]);
    }
  }
  for (int i = 0; i < M; ++i) out[i * out_stride] = _mm512_reduce_add_ps(acc[i]) + simd::hsum(mins[i]);
}

// DotRowsInt16Fn: groups of up to 4 rows of x share one decode of each super-block.
template <bool kFifthBit>
void kasym_dot_rows(const void* row, const XInt16& x, int64_t m, float* out, int64_t out_stride) {
  const auto* w = static_cast<const uint8_t*>(row);
  for_row_groups<4>(x, m, out, out_stride, [&]<int M>(const XInt16& rows, float* o) {
    kasym_dot_group<kFifthBit, M>(w, rows, o, out_stride);
  });
}

// DecodeRowInt16Fn of the integer GEMM: per sub-block the 32 words sc · q, d as the scale
// and -dmin · mn as the offset.
template <bool kFifthBit>
void kasym_decode_int16(const void* row, int64_t k, int16_t* values, float* scales, float* offsets) {
  constexpr int64_t kBytes = kFifthBit ? 176 : 144;
  const auto* w = static_cast<const uint8_t*>(row);
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* wb = w + b * kBytes;
    alignas(8) uint8_t sc[8], mn[8];
    kquant_scale_bytes(wb, sc, mn);
    int16_t* v = values + 256 * b;
    kasym_pairs<kFifthBit>(wb, sc, [&](auto chunk, __m512i low, __m512i high) {
      constexpr int p = decltype(chunk)::value;
      _mm512_storeu_si512(v + 64 * p, low);
      _mm512_storeu_si512(v + 64 * p + 32, high);
    });
    _mm256_storeu_ps(scales + 8 * b, _mm256_set1_ps(half_at(wb)));
    _mm256_storeu_ps(offsets + 8 * b, kasym_mins(wb, mn));
  }
}

// R weight rows with one row of x: each super-block of x is loaded once for the R rows, each
// row's integer sum scaled by d · group scale into its f32 sum, its mins into an 8-lane sum.
// A row's value does not depend on R.
template <bool kFifthBit, int R>
void kasym_weight_rows_r(const uint8_t* w, int64_t w_row_bytes, const XInt16& x, float* out) {
  constexpr int64_t kBytes = kFifthBit ? 176 : 144;
  const int64_t blocks = x.k / 256;
  const int64_t lead = std::max<int64_t>(kPrefetchBytes, R * w_row_bytes);
  __m512 acc[R];
  __m256 mins[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm512_setzero_ps();
    mins[r] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t o = 0; o < R * kBytes; o += 64) __builtin_prefetch(w + lead + b * R * kBytes + o, 0, 2);
    const int16_t* xb = x.q + 256 * b;
    const __m256 block_sums = _mm256_loadu_ps(x.block_sum + 8 * b);
    const float scale = x.group_scale[b];
    for (int r = 0; r < R; ++r) {
      const uint8_t* wb = w + r * w_row_bytes + b * kBytes;
      alignas(8) uint8_t sc[8], mn[8];
      kquant_scale_bytes(wb, sc, mn);
      __m512i sum = _mm512_setzero_si512();
      kasym_pairs<kFifthBit>(wb, sc, [&](auto chunk, __m512i low, __m512i high) {
        constexpr int p = decltype(chunk)::value;
        sum = _mm512_dpwssd_epi32(sum, low, _mm512_load_si512(xb + 64 * p));
        sum = _mm512_dpwssd_epi32(sum, high, _mm512_load_si512(xb + 64 * p + 32));
      });
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(half_at(wb) * scale), acc[r]);
      mins[r] = _mm256_fmadd_ps(kasym_mins(wb, mn), block_sums, mins[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(acc[r]) + simd::hsum(mins[r]);
}

// DotWeightRowsInt16Fn: four weight rows at a time.
template <bool kFifthBit>
void kasym_weight_rows(const void* rows, int64_t w_row_bytes, int64_t n, const XInt16& x, float* out) {
  const auto* w = static_cast<const uint8_t*>(rows);
  for_weight_row_groups<4>(n, [&]<int kRows>(int64_t r) {
    kasym_weight_rows_r<kFifthBit, kRows>(w + r * w_row_bytes, w_row_bytes, x, out + r);
  });
}

}  // namespace
}  // namespace onepass::cpu::avx512_vnni
ONEPASS_AVX512_VNNI_END

ONEPASS_AVX2_BEGIN
namespace onepass::cpu::avx2 {
namespace {

// The 16 runs of 16 values of the q6_k super-block at b, in value order: f(run, v) with v
// the 16 words sc[run] · (q - 32) of values [16 run, 16 run + 16), runs given in pairs
// (2c, 2c + 1) as compile-time constants.
template <typename F>
inline void q6_k_runs(const uint8_t* b, F&& f) {
  alignas(32) int16_t scales[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(scales),
                     _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192))));
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i top2 = _mm256_set1_epi8(0x30);
  const __m256i bias = _mm256_set1_epi8(32);
  auto runs = [&](auto chunk, __m256i bytes) {
    constexpr int c = decltype(chunk)::value;
    const __m256i q0 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(bytes));
    const __m256i q1 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(bytes, 1));
    f(chunk, _mm256_mullo_epi16(q0, _mm256_set1_epi16(scales[2 * c])),
      _mm256_mullo_epi16(q1, _mm256_set1_epi16(scales[2 * c + 1])));
  };
  auto half = [&](auto h_constant) {
    constexpr int h = decltype(h_constant)::value;
    const __m256i low0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * h));
    const __m256i low1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * h + 32));
    const __m256i top = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h));
    // Value l + 32s of the half: nibble (low0, low1, low0 >> 4, low1 >> 4 for s = 0..3) with
    // top bits 2s..2s+1 moved to bits 4..5, then - 32.
    auto assemble = [&](__m256i nibble, __m256i top_bits) {
      return _mm256_sub_epi8(
          _mm256_or_si256(_mm256_and_si256(nibble, low4), _mm256_and_si256(top_bits, top2)), bias);
    };
    runs(Chunk<4 * h>{}, assemble(low0, _mm256_slli_epi16(top, 4)));
    runs(Chunk<4 * h + 1>{}, assemble(low1, _mm256_slli_epi16(top, 2)));
    runs(Chunk<4 * h + 2>{}, assemble(_mm256_srli_epi16(low0, 4), top));
    runs(Chunk<4 * h + 3>{}, assemble(_mm256_srli_epi16(low1, 4), _mm256_srli_epi16(top, 2)));
  };
  half(std::integral_constant<int, 0>{});
  half(std::integral_constant<int, 1>{});
}

// As avx512_vnni::q6_k_dot_group with vpmaddwd: each row's two integer sums take the first
// and the second 16 values of every run of 32 (at most 16 products per lane each).
template <int M>
void q6_k_dot_group(const uint8_t* w, const XInt16& x, float* out, int64_t out_stride) {
  const int64_t blocks = x.k / 256;
  __m256 acc[M];
  for (int i = 0; i < M; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* wb = w + b * kQ6KBytes;
    __m256i sum[M][2];
    for (int i = 0; i < M; ++i) sum[i][0] = sum[i][1] = _mm256_setzero_si256();
    q6_k_runs(wb, [&](auto chunk, __m256i v0, __m256i v1) {
      constexpr int c = decltype(chunk)::value;
      for (int i = 0; i < M; ++i) {
        const int16_t* xc = x.q + i * x.k + 256 * b + 32 * c;
        sum[i][0] = _mm256_add_epi32(sum[i][0], _mm256_madd_epi16(v0, _mm256_load_si256(reinterpret_cast<const __m256i*>(xc))));
        sum[i][1] =
            _mm256_add_epi32(sum[i][1], _mm256_madd_epi16(v1, _mm256_load_si256(reinterpret_cast<const __m256i*>(xc + 16))));
      }
    });
    const float d = half_at(wb + 208);
    for (int i = 0; i < M; ++i) {
      const __m256 total = _mm256_add_ps(_mm256_cvtepi32_ps(sum[i][0]), _mm256_cvtepi32_ps(sum[i][1]));
      acc[i] = _mm256_fmadd_ps(total, _mm256_set1_ps(d * x.group_scale[i * x.groups + b]), acc[i]);
    }
  }
  for (int i = 0; i < M; ++i) out[i * out_stride] = simd::hsum(acc[i]);
}

// DotRowsInt16Fn: groups of up to 2 rows of x share one decode of each super-block (more
// spill the 16 registers).
void q6_k_dot_rows(const void* row, const XInt16& x, int64_t m, float* out, int64_t out_stride) {
  const auto* w = static_cast<const uint8_t*>(row);
  for_row_groups<2>(x, m, out, out_stride, [&]<int M>(const XInt16& rows, float* o) {
    q6_k_dot_group<M>(w, rows, o, out_stride);
  });
}



// The 8 mins of a q4_k / q5_k super-block times -dmin, as f32 lanes (avx512_vnni's kasym_mins).
inline __m256 kasym_mins(const uint8_t* b, const uint8_t mn[8]) {
  const __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mn))));
  return _mm256_mul_ps(m, _mm256_set1_ps(-half_at(b + 2)));
}

// Bit s of each word moved to bit 4 (the other bits are masked off by the caller).
template <int s>
inline __m256i bit_to_4(__m256i v) {
  if constexpr (s <= 4) {
    return _mm256_slli_epi16(v, 4 - s);
  } else {
    return _mm256_srli_epi16(v, s - 4);
  }
}

// The 8 sub-blocks of the q4_k / q5_k super-block at b: f(Chunk<s>, v0, v1), the words
// sc · q of values 0..15 and 16..31 of sub-block s (see avx512_vnni::kasym_pairs); the bare
// q without kScaled.
template <bool kFifthBit, bool kScaled = true, typename F>
inline void kasym_sub_blocks(const uint8_t* b, const uint8_t sc[8], F&& f) {
  const uint8_t* qs = b + (kFifthBit ? 48 : 16);
  const __m256i low4 = _mm256_set1_epi16(0x000F);
  const __m256i bit4 = _mm256_set1_epi16(0x0010);
  __m256i qh0 = _mm256_setzero_si256(), qh1 = _mm256_setzero_si256();
  if constexpr (kFifthBit) {
    qh0 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16)));
    qh1 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 32)));
  }
  auto sub_block = [&](auto s_constant, __m256i v0, __m256i v1) {
    constexpr int s = decltype(s_constant)::value;
    if constexpr (kFifthBit) {
      v0 = _mm256_or_si256(v0, _mm256_and_si256(bit_to_4<s>(qh0), bit4));
      v1 = _mm256_or_si256(v1, _mm256_and_si256(bit_to_4<s>(qh1), bit4));
    }
    if constexpr (kScaled) {
      const __m256i scale = _mm256_set1_epi16(sc[s]);
      f(Chunk<s>{}, _mm256_mullo_epi16(v0, scale), _mm256_mullo_epi16(v1, scale));
    } else {
      f(Chunk<s>{}, v0, v1);
    }
  };
  auto pair = [&](auto p_constant) {
    constexpr int p = decltype(p_constant)::value;
    const __m256i raw0 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 32 * p)));
    const __m256i raw1 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 32 * p + 16)));
    sub_block(std::integral_constant<int, 2 * p>{}, _mm256_and_si256(raw0, low4), _mm256_and_si256(raw1, low4));
    sub_block(std::integral_constant<int, 2 * p + 1>{}, _mm256_srli_epi16(raw0, 4), _mm256_srli_epi16(raw1, 4));
  };
  pair(std::integral_constant<int, 0>{});
  pair(std::integral_constant<int, 1>{});
  pair(std::integral_constant<int, 2>{});
  pair(std::integral_constant<int, 3>{});
}

// As avx512_vnni::kasym_dot_group with vpmaddwd: two integer sums per row (the first and
// the second 16 values of every sub-block, at most 16 products per lane each).
template <bool kFifthBit, int M>
void kasym_dot_group(const uint8_t* w, const XInt16& x, float* out, int64_t out_stride) {
  constexpr int64_t kBytes = kFifthBit ? 176 : 144;
  const int64_t blocks = x.k / 256;
  __m256 acc[M];
  __m256 mins[M];
  for (int i = 0; i < M; ++i) acc[i] = mins[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* wb = w + b * kBytes;
    alignas(8) uint8_t sc[8], mn[8];
    kquant_scale_bytes(wb, sc, mn);
    __m256i sum[M][2];
    for (int i = 0; i < M; ++i) sum[i][0] = sum[i][1] = _mm256_setzero_si256();
    kasym_sub_blocks<kFifthBit>(wb, sc, [&](auto chunk, __m256i v0, __m256i v1) {
      constexpr int s = decltype(chunk)::value;
      for (int i = 0; i < M; ++i) {
        const int16_t* xs = x.q + i * x.k + 256 * b + 32 * s;
        sum[i][0] = _mm256_add_epi32(sum[i][0], _mm256_madd_epi16(v0, _mm256_load_si256(reinterpret_cast<const __m256i*>(xs))));
        sum[i][1] =
            _mm256_add_epi32(sum[i][1], _mm256_madd_epi16(v1, _mm256_load_si256(reinterpret_cast<const __m256i*>(xs + 16))));
      }
    });
    const float d = half_at(wb);
    const __m256 m = kasym_mins(wb, mn);
    for (int i = 0; i < M; ++i) {
      const __m256 total = _mm256_cvtepi32_ps(_mm256_add_epi32(sum[i][0], sum[i][1]));
      acc[i] = _mm256_fmadd_ps(total, _mm256_set1_ps(d * x.group_scale[i * x.groups + b]), acc[i]);
      mins[i] = _mm256_fmadd_ps(m, _mm256_loadu_ps(x.block_sum + i * (x.k / 32) + 8 * b), mins[i]);
    }
  }
  for (int i = 0; i < M; ++i) out[i * out_stride] = simd::hsum(acc[i]) + simd::hsum(mins[i]);
}

// DotRowsInt16Fn: groups of up to 2 rows of x share one decode of each super-block.
template <bool kFifthBit>
void kasym_dot_rows(const void* row, const XInt16& x, int64_t m, float* out, int64_t out_stride) {
  const auto* w = static_cast<const uint8_t*>(row);
  for_row_groups<2>(x, m, out, out_stride, [&]<int M>(const XInt16& rows, float* o) {
    kasym_dot_group<kFifthBit, M>(w, rows, o, out_stride);
  });
}

// R weight rows with one row of x (DotWeightRowsInt16Fn): R streams read side by side, the
// weights asked into L2 ahead in address order. Each sub-block's integer sum of its bare
// quants (no 16-bit multiply by sc, which would share the multiplier with vpmaddwd) goes
// into f32 times d · sc · group scale, the sub-blocks taking turns over two sums per row; a
// row's value does not depend on R.
template <bool kFifthBit, int R>
void kasym_weight_rows_r(const uint8_t* w, int64_t w_row_bytes, const XInt16& x, float* out) {
  constexpr int64_t kBytes = kFifthBit ? 176 : 144;
  const int64_t blocks = x.k / 256;
  const int64_t lead = std::max<int64_t>(kPrefetchBytes, R * w_row_bytes);
  __m256 acc[R][2], mins[R];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = mins[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t o = 0; o < R * kBytes; o += 64) __builtin_prefetch(w + lead + b * R * kBytes + o, 0, 2);
    const int16_t* xb = x.q + 256 * b;
    const __m256 block_sums = _mm256_loadu_ps(x.block_sum + 8 * b);
    for (int r = 0; r < R; ++r) {
      const uint8_t* wb = w + r * w_row_bytes + b * kBytes;
      alignas(8) uint8_t sc[8], mn[8];
      kquant_scale_bytes(wb, sc, mn);
      alignas(32) float scales[8];
      _mm256_store_ps(scales, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                                                _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc)))),
                                            _mm256_set1_ps(half_at(wb) * x.group_scale[b])));
      kasym_sub_blocks<kFifthBit, false>(wb, sc, [&](auto chunk, __m256i v0, __m256i v1) {
        constexpr int c = decltype(chunk)::value;
        const __m256i t =
            _mm256_add_epi32(_mm256_madd_epi16(v0, _mm256_load_si256(reinterpret_cast<const __m256i*>(xb + 32 * c))),
                             _mm256_madd_epi16(v1, _mm256_load_si256(reinterpret_cast<const __m256i*>(xb + 32 * c + 16))));
        acc[r][c % 2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_broadcast_ss(scales + c), acc[r][c % 2]);
      });
      mins[r] = _mm256_fmadd_ps(kasym_mins(wb, mn), block_sums, mins[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = simd::hsum(_mm256_add_ps(acc[r][0], acc[r][1])) + simd::hsum(mins[r]);
}

template <bool kFifthBit>
void kasym_weight_rows(const void* rows, int64_t w_row_bytes, int64_t n, const XInt16& x, float* out) {
  const auto* w = static_cast<const uint8_t*>(rows);
  for_weight_row_groups<2>(n, [&]<int kRows>(int64_t r) {
    kasym_weight_rows_r<kFifthBit, kRows>(w + r * w_row_bytes, w_row_bytes, x, out + r);
  });
}

// As kasym_weight_rows_r for q6_k (its sc · (q - 32) words, as q6_k_dot_group): each row's
// value the one q6_k_dot_group gives it alone, whatever R.
template <int R>
void q6_k_weight_rows_r(const uint8_t* w, int64_t w_row_bytes, const XInt16& x, float* out) {
  const int64_t blocks = x.k / 256;
  const int64_t lead = std::max<int64_t>(kPrefetchBytes, R * w_row_bytes);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t o = 0; o < R * kQ6KBytes; o += 64) __builtin_prefetch(w + lead + b * R * kQ6KBytes + o, 0, 2);
    const int16_t* xb = x.q + 256 * b;
    for (int r = 0; r < R; ++r) {
      const uint8_t* wb = w + r * w_row_bytes + b * kQ6KBytes;
      __m256i sum0 = _mm256_setzero_si256(), sum1 = _mm256_setzero_si256();
      q6_k_runs(wb, [&](auto chunk, __m256i v0, __m256i v1) {
        constexpr int c = decltype(chunk)::value;
        sum0 = _mm256_add_epi32(sum0, _mm256_madd_epi16(v0, _mm256_load_si256(reinterpret_cast<const __m256i*>(xb + 32 * c))));
        sum1 = _mm256_add_epi32(sum1,
                                _mm256_madd_epi16(v1, _mm256_load_si256(reinterpret_cast<const __m256i*>(xb + 32 * c + 16))));
      });
      const __m256 total = _mm256_add_ps(_mm256_cvtepi32_ps(sum0), _mm256_cvtepi32_ps(sum1));
      acc[r] = _mm256_fmadd_ps(total, _mm256_set1_ps(half_at(wb + 208) * x.group_scale[b]), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = simd::hsum(acc[r]);
}

void q6_k_weight_rows(const void* rows, int64_t w_row_bytes, int64_t n, const XInt16& x, float* out) {
  const auto* w = static_cast<const uint8_t*>(rows);
  for_weight_row_groups<2>(n, [&]<int kRows>(int64_t r) {
    q6_k_weight_rows_r<kRows>(w + r * w_row_bytes, w_row_bytes, x, out + r);
  });
}

// DecodeRowInt16Fn of the integer GEMM on avx2: as avx512_vnni::kasym_decode_int16 (per
// sub-block the 32 words sc · q, d as the scale, -dmin · mn as the offset).
template <bool kFifthBit>
void kasym_decode_int16(const void* row, int64_t k, int16_t* values, float* scales, float* offsets) {
  constexpr int64_t kBytes = kFifthBit ? 176 : 144;
  const auto* w = static_cast<const uint8_t*>(row);
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* wb = w + b * kBytes;
    alignas(8) uint8_t sc[8], mn[8];
    kquant_scale_bytes(wb, sc, mn);
    int16_t* v = values + 256 * b;
    kasym_sub_blocks<kFifthBit>(wb, sc, [&](auto chunk, __m256i v0, __m256i v1) {
      constexpr int s = decltype(chunk)::value;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(v + 32 * s), v0);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(v + 32 * s + 16), v1);
    });
    _mm256_storeu_ps(scales + 8 * b, _mm256_set1_ps(half_at(wb)));
    _mm256_storeu_ps(offsets + 8 * b, kasym_mins(wb, mn));
  }
}

}  // namespace
}  // namespace onepass::cpu::avx2
ONEPASS_AVX2_END
#endif  // ONEPASS_CPU_X86

namespace onepass::cpu {

DotRowsInt16Fn kquant_int16_dot(DType w, Isa isa) {
#if ONEPASS_CPU_X86
  if (isa == Isa::avx512_vnni) {
    if (w == DType::q4_k) return avx512_vnni::kasym_dot_rows<false>;
    if (w == DType::q5_k) return avx512_vnni::kasym_dot_rows<true>;
    if (w == DType::q6_k) return avx512_vnni::q6_k_dot_rows;
  } else if (isa == Isa::avx2 || isa == Isa::avx512) {
    if (w == DType::q4_k) return avx2::kasym_dot_rows<false>;
    if (w == DType::q5_k) return avx2::kasym_dot_rows<true>;
    if (w == DType::q6_k) return avx2::q6_k_dot_rows;
  }
#else
  (void)w;
  (void)isa;
#endif
  return nullptr;
}

DotWeightRowsInt16Fn kquant_int16_dot_weight_rows(DType w, Isa isa) {
#if ONEPASS_CPU_X86
  if (isa == Isa::avx512_vnni && w == DType::q4_k) return avx512_vnni::kasym_weight_rows<false>;
  if (isa == Isa::avx512_vnni && w == DType::q5_k) return avx512_vnni::kasym_weight_rows<true>;
  if ((isa == Isa::avx2 || isa == Isa::avx512) && w == DType::q4_k) return avx2::kasym_weight_rows<false>;
  if ((isa == Isa::avx2 || isa == Isa::avx512) && w == DType::q5_k) return avx2::kasym_weight_rows<true>;
  if ((isa == Isa::avx2 || isa == Isa::avx512) && w == DType::q6_k) return avx2::q6_k_weight_rows;
#else
  (void)w;
  (void)isa;
#endif
  return nullptr;
}

DecodeRowInt16Fn kquant_int16_decode(DType w, Isa isa) {
#if ONEPASS_CPU_X86
  if (isa == Isa::avx512_vnni && w == DType::q4_k) return avx512_vnni::kasym_decode_int16<false>;
  if (isa == Isa::avx512_vnni && w == DType::q5_k) return avx512_vnni::kasym_decode_int16<true>;
  if ((isa == Isa::avx2 || isa == Isa::avx512) && w == DType::q4_k) return avx2::kasym_decode_int16<false>;
  if ((isa == Isa::avx2 || isa == Isa::avx512) && w == DType::q5_k) return avx2::kasym_decode_int16<true>;
#else
  (void)w;
  (void)isa;
#endif
  return nullptr;
}

}  // namespace onepass::cpu
