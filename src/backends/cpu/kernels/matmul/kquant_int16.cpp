// Integer row kernels of q6_k for x rounded to 16-bit integers per group of 256 values
// (XInt16): Isa::avx512_vnni (vpdpwssd) and Isa::avx2 (vpmaddwd, also on Isa::avx512).
//
// A q6_k super-block is 256 values, one XInt16 group: weight j = d · sc[j / 16] · (q_j - 32)
// with q_j a 6-bit integer and sc a signed byte per 16 values. Each value is decoded to the
// 16-bit integer sc · (q - 32) (at most 32 · 128 = 4096 in magnitude), dotted with x's
// integers into 32-bit lanes, and the super-block's exact integer sum is scaled once in
// f32 by d times x's group scale. No lane overflows: a lane sums at most 16 products
// (below 16 · 4096 · 32767 < 2^31).
#include <algorithm>
#include <type_traits>

#include "rows.h"
#include "simd.h"

namespace onepass::cpu {
namespace {

constexpr int64_t kQ6KBytes = 210;

// A run of 32 values of a super-block, as a compile-time constant.
template <int kChunk>
using Chunk = std::integral_constant<int, kChunk>;

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

template <int M>
void q6_k_dot_take(int64_t take, const uint8_t* w, const XInt16& x, float* out, int64_t out_stride) {
  if constexpr (M > 1) {
    if (take < M) return q6_k_dot_take<M - 1>(take, w, x, out, out_stride);
  }
  q6_k_dot_group<M>(w, x, out, out_stride);
}

// DotRowsInt16Fn: groups of up to 4 rows of x share one decode of each super-block.
void q6_k_dot_rows(const void* row, const XInt16& x, int64_t m, float* out, int64_t out_stride) {
  constexpr int64_t kMaxRows = 4;
  const auto* w = static_cast<const uint8_t*>(row);
  XInt16 rows = x;
  while (m > 0) {
    const int64_t take = std::min(m, kMaxRows);
    q6_k_dot_take<kMaxRows>(take, w, rows, out, out_stride);
    m -= take;
    rows.q += take * x.k;
    rows.group_scale += take * x.groups;
    out += take * out_stride;
  }
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

template <int M>
void q6_k_dot_take(int64_t take, const uint8_t* w, const XInt16& x, float* out, int64_t out_stride) {
  if constexpr (M > 1) {
    if (take < M) return q6_k_dot_take<M - 1>(take, w, x, out, out_stride);
  }
  q6_k_dot_group<M>(w, x, out, out_stride);
}

// DotRowsInt16Fn: groups of up to 2 rows of x share one decode of each super-block (more
// spill the 16 registers).
void q6_k_dot_rows(const void* row, const XInt16& x, int64_t m, float* out, int64_t out_stride) {
  constexpr int64_t kMaxRows = 2;
  const auto* w = static_cast<const uint8_t*>(row);
  XInt16 rows = x;
  while (m > 0) {
    const int64_t take = std::min(m, kMaxRows);
    q6_k_dot_take<kMaxRows>(take, w, rows, out, out_stride);
    m -= take;
    rows.q += take * x.k;
    rows.group_scale += take * x.groups;
    out += take * out_stride;
  }
}

}  // namespace
}  // namespace onepass::cpu::avx2
ONEPASS_AVX2_END
#endif  // ONEPASS_CPU_X86

namespace onepass::cpu {

DotRowsInt16Fn kquant_int16_dot(DType w, Isa isa) {
#if ONEPASS_CPU_X86
  if (w == DType::q6_k && isa == Isa::avx512_vnni) return avx512_vnni::q6_k_dot_rows;
  if (w == DType::q6_k && (isa == Isa::avx2 || isa == Isa::avx512)) return avx2::q6_k_dot_rows;
#else
  (void)w;
  (void)isa;
#endif
  return nullptr;
}

}  // namespace onepass::cpu
