// Integer row kernels of the low-bit k-quants q2_k and q3_k for x rounded to 16-bit integers
// per group of 256 values (XInt16), one group per super-block: Isa::avx512_vnni (vpdpwssd)
// and Isa::avx2 (vpmaddwd, also on Isa::avx512).
//
// Both formats hold 16 sub-blocks of 16 values with a scale each:
//   q3_k: weight j = d · (sc - 32) · q_j, q_j = 2 low bits + 4 · high bit - 4 in [-4, 3];
//         each value is decoded to the 16-bit integer (sc - 32) · q (|.| <= 128);
//   q2_k: weight j = d · sc · q_j - dmin · mn, q_j in [0, 3], sc and mn 4 bits; each value
//         is decoded to sc · q (<= 45), and the mins to the words mn of their sub-block, so
//         Σ mn · x is an integer sum too (x's f32 block sums cover 32 values, the mins 16).
// The super-block's exact integer sums are scaled once in f32: d (and -dmin) times x's
// group scale. No lane overflows: a lane sums at most 32 products (vpmaddwd over a
// super-block), below 32 · 128 · 32767 < 2^28.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "rows.h"
#include "simd.h"

namespace onepass::cpu {
namespace {

constexpr int64_t kQ2KBytes = 84;
constexpr int64_t kQ3KBytes = 110;

// A run of 32 values of a super-block, as a compile-time constant.
template <int kRun>
using Run = std::integral_constant<int, kRun>;

// The 16 scale fields (6 bits, 0..63) of a q3_k super-block's 12 packed bytes as bytes:
// sub-block i has its low 4 bits in the low (i < 8) or high (i >= 8) nibble of byte i % 8
// and its high 2 bits at bit 2 · (i / 4) of byte 8 + i % 4 (ops::q3k_scale), unpacked four
// sub-blocks at a time in 32-bit words.
inline void q3k_scale_bytes(const uint8_t* packed, uint8_t out[16]) {
  uint32_t w[3];
  std::memcpy(w, packed, 12);
  const uint32_t words[4] = {(w[0] & 0x0f0f0f0fu) | ((w[2] & 0x03030303u) << 4),
                             (w[1] & 0x0f0f0f0fu) | (((w[2] >> 2) & 0x03030303u) << 4),
                             ((w[0] >> 4) & 0x0f0f0f0fu) | (((w[2] >> 4) & 0x03030303u) << 4),
                             ((w[1] >> 4) & 0x0f0f0f0fu) | (((w[2] >> 6) & 0x03030303u) << 4)};
  std::memcpy(out, words, 16);
}

// How far ahead of the weights being read the weight_rows_r kernels ask for them (see
// block32_int16.cpp's dot_weight_rows_r).
constexpr int64_t kPrefetchBytes = 4096;

}  // namespace
}  // namespace onepass::cpu

#if ONEPASS_CPU_X86
ONEPASS_AVX512_VNNI_BEGIN
namespace onepass::cpu::avx512_vnni {
namespace {

// Word j of run r's scale vector: sub-block 2r + j / 16 (32 values, two sub-blocks).
inline __m512i sub_block_index(int r) {
  return _mm512_add_epi16(_mm512_set1_epi16(static_cast<int16_t>(2 * r)),
                          _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18,
                                                             17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            4));
}

// Bit s of each word moved to bit `to` (the caller masks).
template <int s, int to>
inline __m512i bit_to(__m512i v) {
  if constexpr (s >= to) {
    return _mm512_srli_epi16(v, s - to);
  } else {
    return _mm512_slli_epi16(v, to - s);
  }
}

// q3_k: f(Run<r>, w, unused) with w the 32 words (sc - 32) · q of values 32r .. 32r + 31.
struct Q3K {
  static constexpr int64_t kBytes = kQ3KBytes;
  static constexpr bool kMin = false;
  static float d(const uint8_t* b) { return half_at(b + 108); }
  static float dmin(const uint8_t*) { return 0.0f; }
  template <typename F>
  static void runs(const uint8_t* b, F&& f) {
    alignas(16) uint8_t sc[16];
    q3k_scale_bytes(b + 96, sc);
    // The 16 scales as words in both halves of the vector, less 32.
    const __m512i scales = _mm512_sub_epi16(
        _mm512_broadcast_i64x4(_mm256_cvtepu8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(sc)))),
        _mm512_set1_epi16(32));
    const __m512i high = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)));
    const __m512i three = _mm512_set1_epi16(3);
    const __m512i four = _mm512_set1_epi16(4);
    auto run = [&](auto r_constant, __m512i low_bytes) {
      constexpr int r = decltype(r_constant)::value;  // = 4g + s
      constexpr int s = r % 4;
      const __m512i low = _mm512_and_si512(_mm512_srli_epi16(low_bytes, 2 * s), three);
      // low | (high bit r at bit 2), then - 4: imm 0xF8 is A | (B & C).
      const __m512i high_bit = bit_to<r, 2>(high);  // (not inside the intrinsic: clang's is a macro)
      const __m512i q = _mm512_sub_epi16(_mm512_ternarylogic_epi32(low, high_bit, four, 0xF8), four);
      f(Run<r>{}, _mm512_mullo_epi16(q, _mm512_permutexvar_epi16(sub_block_index(r), scales)), q);
    };
    const __m512i q0 = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 32)));
    const __m512i q1 = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64)));
    run(Run<0>{}, q0);
    run(Run<1>{}, q0);
    run(Run<2>{}, q0);
    run(Run<3>{}, q0);
    run(Run<4>{}, q1);
    run(Run<5>{}, q1);
    run(Run<6>{}, q1);
    run(Run<7>{}, q1);
  }
};

// q2_k: f(Run<r>, w, mins) with w the words sc · q and mins the words mn of values
// 32r .. 32r + 31.
struct Q2K {
  static constexpr int64_t kBytes = kQ2KBytes;
  static constexpr bool kMin = true;
  static float d(const uint8_t* b) { return half_at(b + 80); }
  static float dmin(const uint8_t* b) { return half_at(b + 82); }
  template <typename F>
  static void runs(const uint8_t* b, F&& f) {
    const __m256i packed = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
    const __m256i nibble = _mm256_set1_epi16(0xF);
    const __m512i scales = _mm512_broadcast_i64x4(_mm256_and_si256(packed, nibble));
    const __m512i mins = _mm512_broadcast_i64x4(_mm256_srli_epi16(packed, 4));
    const __m512i three = _mm512_set1_epi16(3);
    auto run = [&](auto r_constant, __m512i bytes) {
      constexpr int r = decltype(r_constant)::value;
      const __m512i index = sub_block_index(r);
      const __m512i q = _mm512_and_si512(_mm512_srli_epi16(bytes, 2 * (r % 4)), three);
      f(Run<r>{}, _mm512_mullo_epi16(q, _mm512_permutexvar_epi16(index, scales)), _mm512_permutexvar_epi16(index, mins));
    };
    const __m512i q0 = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16)));
    const __m512i q1 = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 48)));
    run(Run<0>{}, q0);
    run(Run<1>{}, q0);
    run(Run<2>{}, q0);
    run(Run<3>{}, q0);
    run(Run<4>{}, q1);
    run(Run<5>{}, q1);
    run(Run<6>{}, q1);
    run(Run<7>{}, q1);
  }
};

// M rows of x with one weight row: each super-block decoded once, its runs dotted with
// every row into an integer sum (and q2_k's integer min sum) per row, then scaled by d (and
// -dmin) times the row's group scale into its f32 sum.
template <typename Fmt, int M>
void low_dot_group(const uint8_t* w, const XInt16& x, float* out, int64_t out_stride) {
  const int64_t blocks = x.k / 256;
  __m512 acc[M];
  for (int i = 0; i < M; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* wb = w + b * Fmt::kBytes;
    __m512i sum[M], min_sum[M];
    for (int i = 0; i < M; ++i) sum[i] = min_sum[i] = _mm512_setzero_si512();
    Fmt::runs(wb, [&](auto run, __m512i values, __m512i mins) {
      constexpr int r = decltype(run)::value;
      for (int i = 0; i < M; ++i) {
        const __m512i xr = _mm512_load_si512(x.q + i * x.k + 256 * b + 32 * r);
        sum[i] = _mm512_dpwssd_epi32(sum[i], values, xr);
        if constexpr (Fmt::kMin) min_sum[i] = _mm512_dpwssd_epi32(min_sum[i], mins, xr);
      }
    });
    const float d = Fmt::d(wb), dmin = Fmt::dmin(wb);
    for (int i = 0; i < M; ++i) {
      const float scale = x.group_scale[i * x.groups + b];
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[i]), _mm512_set1_ps(d * scale), acc[i]);
      if constexpr (Fmt::kMin) {
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(min_sum[i]), _mm512_set1_ps(-dmin * scale), acc[i]);
      }
    }
  }
  for (int i = 0; i < M; ++i) out[i * out_stride] = _mm512_reduce_add_ps(acc[i]);
}

// DotRowsInt16Fn: groups of up to 4 rows of x share one decode of each super-block.
template <typename Fmt>
void low_dot_rows(const void* row, const XInt16& x, int64_t m, float* out, int64_t out_stride) {
  const auto* w = static_cast<const uint8_t*>(row);
  for_row_groups<4>(x, m, out, out_stride, [&]<int M>(const XInt16& rows, float* o) {
    low_dot_group<Fmt, M>(w, rows, o, out_stride);
  });
}

// DecodeRowInt16Fn of the integer GEMM (q3_k): per 32 values the words (sc - 32) · q
// (|.| <= 128), d as the scale, no offset.
void q3k_decode_int16(const void* row, int64_t k, int16_t* values, float* scales, float* offsets) {
  const auto* w = static_cast<const uint8_t*>(row);
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* wb = w + b * Q3K::kBytes;
    int16_t* v = values + 256 * b;
    Q3K::runs(wb, [&](auto run, __m512i words, __m512i) {
      constexpr int r = decltype(run)::value;
      _mm512_storeu_si512(v + 32 * r, words);
    });
    const float d = Q3K::d(wb);
    for (int j = 0; j < 8; ++j) {
      scales[8 * b + j] = d;
      offsets[8 * b + j] = 0.0f;
    }
  }
}

// R weight rows with one row of x: each run of x is loaded once for the R rows (their
// integer sums are R independent chains). A row's value does not depend on R.
template <typename Fmt, int R>
void weight_rows_r(const uint8_t* w, int64_t w_row_bytes, const XInt16& x, float* out) {
  const int64_t blocks = x.k / 256;
  const int64_t lead = std::max<int64_t>(kPrefetchBytes, R * w_row_bytes);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t o = 0; o < R * Fmt::kBytes; o += 64) __builtin_prefetch(w + lead + b * R * Fmt::kBytes + o, 0, 2);
    const int16_t* xb = x.q + 256 * b;
    const float scale = x.group_scale[b];
    for (int r = 0; r < R; ++r) {
      const uint8_t* wb = w + r * w_row_bytes + b * Fmt::kBytes;
      __m512i sum = _mm512_setzero_si512(), min_sum = _mm512_setzero_si512();
      Fmt::runs(wb, [&](auto run, __m512i values, __m512i mins) {
        constexpr int k = decltype(run)::value;
        const __m512i xr = _mm512_load_si512(xb + 32 * k);
        sum = _mm512_dpwssd_epi32(sum, values, xr);
        if constexpr (Fmt::kMin) min_sum = _mm512_dpwssd_epi32(min_sum, mins, xr);
      });
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(Fmt::d(wb) * scale), acc[r]);
      if constexpr (Fmt::kMin) {
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(min_sum), _mm512_set1_ps(-Fmt::dmin(wb) * scale), acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}

// DotWeightRowsInt16Fn: four weight rows at a time.
template <typename Fmt>
void weight_rows(const void* rows, int64_t w_row_bytes, int64_t n, const XInt16& x, float* out) {
  const auto* w = static_cast<const uint8_t*>(rows);
  for_weight_row_groups<4>(n, [&]<int kRows>(int64_t r) {
    weight_rows_r<Fmt, kRows>(w + r * w_row_bytes, w_row_bytes, x, out + r);
  });
}

}  // namespace
}  // namespace onepass::cpu::avx512_vnni
ONEPASS_AVX512_VNNI_END

ONEPASS_AVX2_BEGIN
namespace onepass::cpu::avx2 {
namespace {

// Bit s of each word moved to bit `to` (the caller masks).
template <int s, int to>
inline __m256i bit_to(__m256i v) {
  if constexpr (s >= to) {
    return _mm256_srli_epi16(v, s - to);
  } else {
    return _mm256_slli_epi16(v, to - s);
  }
}

// The formats' 16 sub-blocks of 16 values: f(Sub<i>, w, mins) with w the 16 words of
// sub-block i (as avx512_vnni's runs, one sub-block per vector, so each has one scale).
template <int kSub>
using Sub = std::integral_constant<int, kSub>;

struct Q3K {
  static constexpr int64_t kBytes = kQ3KBytes;
  static constexpr bool kMin = false;
  static float d(const uint8_t* b) { return half_at(b + 108); }
  static float dmin(const uint8_t*) { return 0.0f; }
  // q of 16 values of run r: their low bits (2 · (r % 4) in `bytes`) and high bits (r in
  // `high`), as words.
  template <int r>
  static __m256i values(__m256i bytes, __m256i high) {
    const __m256i four = _mm256_set1_epi16(4);
    const __m256i low = _mm256_and_si256(_mm256_srli_epi16(bytes, 2 * (r % 4)), _mm256_set1_epi16(3));
    return _mm256_sub_epi16(_mm256_or_si256(low, _mm256_and_si256(bit_to<r, 2>(high), four)), four);
  }
  template <typename F>
  static void sub_blocks(const uint8_t* b, F&& f) {
    alignas(16) uint8_t sc[16];
    q3k_scale_bytes(b + 96, sc);
    const __m256i high0 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
    const __m256i high1 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16)));
    auto run = [&](auto r_constant, __m256i bytes0, __m256i bytes1) {
      constexpr int r = decltype(r_constant)::value;
      const __m256i s0 = _mm256_set1_epi16(static_cast<int16_t>(sc[2 * r] - 32));
      const __m256i s1 = _mm256_set1_epi16(static_cast<int16_t>(sc[2 * r + 1] - 32));
      f(Sub<2 * r>{}, _mm256_mullo_epi16(values<r>(bytes0, high0), s0), s0);
      f(Sub<2 * r + 1>{}, _mm256_mullo_epi16(values<r>(bytes1, high1), s1), s1);
    };
    const __m256i q00 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 32)));
    const __m256i q01 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 48)));
    const __m256i q10 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 64)));
    const __m256i q11 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 80)));
    run(Run<0>{}, q00, q01);
    run(Run<1>{}, q00, q01);
    run(Run<2>{}, q00, q01);
    run(Run<3>{}, q00, q01);
    run(Run<4>{}, q10, q11);
    run(Run<5>{}, q10, q11);
    run(Run<6>{}, q10, q11);
    run(Run<7>{}, q10, q11);
  }
};

struct Q2K {
  static constexpr int64_t kBytes = kQ2KBytes;
  static constexpr bool kMin = true;
  static float d(const uint8_t* b) { return half_at(b + 80); }
  static float dmin(const uint8_t* b) { return half_at(b + 82); }
  template <typename F>
  static void sub_blocks(const uint8_t* b, F&& f) {
    const __m256i three = _mm256_set1_epi16(3);
    auto run = [&](auto r_constant, __m256i bytes0, __m256i bytes1) {
      constexpr int r = decltype(r_constant)::value;
      const __m256i q0 = _mm256_and_si256(_mm256_srli_epi16(bytes0, 2 * (r % 4)), three);
      const __m256i q1 = _mm256_and_si256(_mm256_srli_epi16(bytes1, 2 * (r % 4)), three);
      const int sm0 = b[2 * r], sm1 = b[2 * r + 1];  // scale (low nibble) and min (high)
      f(Sub<2 * r>{}, _mm256_mullo_epi16(q0, _mm256_set1_epi16(static_cast<int16_t>(sm0 & 0xF))),
        _mm256_set1_epi16(static_cast<int16_t>(sm0 >> 4)));
      f(Sub<2 * r + 1>{}, _mm256_mullo_epi16(q1, _mm256_set1_epi16(static_cast<int16_t>(sm1 & 0xF))),
        _mm256_set1_epi16(static_cast<int16_t>(sm1 >> 4)));
    };
    const __m256i q00 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16)));
    const __m256i q01 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 32)));
    const __m256i q10 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 48)));
    const __m256i q11 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 64)));
    run(Run<0>{}, q00, q01);
    run(Run<1>{}, q00, q01);
    run(Run<2>{}, q00, q01);
    run(Run<3>{}, q00, q01);
    run(Run<4>{}, q10, q11);
    run(Run<5>{}, q10, q11);
    run(Run<6>{}, q10, q11);
    run(Run<7>{}, q10, q11);
  }
};

// As avx512_vnni::low_dot_group with vpmaddwd, one sub-block of 16 values per product.
template <typename Fmt, int M>
void low_dot_group(const uint8_t* w, const XInt16& x, float* out, int64_t out_stride) {
  const int64_t blocks = x.k / 256;
  __m256 acc[M];
  for (int i = 0; i < M; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* wb = w + b * Fmt::kBytes;
    __m256i sum[M], min_sum[M];
    for (int i = 0; i < M; ++i) sum[i] = min_sum[i] = _mm256_setzero_si256();
    Fmt::sub_blocks(wb, [&](auto sub, __m256i values, __m256i mins) {
      constexpr int s = decltype(sub)::value;
      for (int i = 0; i < M; ++i) {
        const __m256i xs = _mm256_load_si256(reinterpret_cast<const __m256i*>(x.q + i * x.k + 256 * b + 16 * s));
        sum[i] = _mm256_add_epi32(sum[i], _mm256_madd_epi16(values, xs));
        if constexpr (Fmt::kMin) min_sum[i] = _mm256_add_epi32(min_sum[i], _mm256_madd_epi16(mins, xs));
      }
    });
    const float d = Fmt::d(wb), dmin = Fmt::dmin(wb);
    for (int i = 0; i < M; ++i) {
      const float scale = x.group_scale[i * x.groups + b];
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[i]), _mm256_set1_ps(d * scale), acc[i]);
      if constexpr (Fmt::kMin) {
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(min_sum[i]), _mm256_set1_ps(-dmin * scale), acc[i]);
      }
    }
  }
  for (int i = 0; i < M; ++i) out[i * out_stride] = simd::hsum(acc[i]);
}

// DotRowsInt16Fn: groups of up to 2 rows of x share one decode of each super-block.
template <typename Fmt>
void low_dot_rows(const void* row, const XInt16& x, int64_t m, float* out, int64_t out_stride) {
  const auto* w = static_cast<const uint8_t*>(row);
  for_row_groups<2>(x, m, out, out_stride, [&]<int M>(const XInt16& rows, float* o) {
    low_dot_group<Fmt, M>(w, rows, o, out_stride);
  });
}

// R weight rows with one row of x (DotWeightRowsInt16Fn): R streams read side by side, the
// weights asked into L2 ahead in address order; each row's value the one low_dot_group
// gives it alone (the same sums in the same order), whatever R.
template <typename Fmt, int R>
void weight_rows_r(const uint8_t* w, int64_t w_row_bytes, const XInt16& x, float* out) {
  const int64_t blocks = x.k / 256;
  const int64_t lead = std::max<int64_t>(kPrefetchBytes, R * w_row_bytes);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t o = 0; o < R * Fmt::kBytes; o += 64) __builtin_prefetch(w + lead + b * R * Fmt::kBytes + o, 0, 2);
    const int16_t* xb = x.q + 256 * b;
    const float scale = x.group_scale[b];
    for (int r = 0; r < R; ++r) {
      const uint8_t* wb = w + r * w_row_bytes + b * Fmt::kBytes;
      __m256i sum = _mm256_setzero_si256(), min_sum = _mm256_setzero_si256();
      Fmt::sub_blocks(wb, [&](auto sub, __m256i values, __m256i mins) {
        constexpr int c = decltype(sub)::value;
        const __m256i xs = _mm256_load_si256(reinterpret_cast<const __m256i*>(xb + 16 * c));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(values, xs));
        if constexpr (Fmt::kMin) min_sum = _mm256_add_epi32(min_sum, _mm256_madd_epi16(mins, xs));
      });
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(Fmt::d(wb) * scale), acc[r]);
      if constexpr (Fmt::kMin) {
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(min_sum), _mm256_set1_ps(-Fmt::dmin(wb) * scale), acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) out[r] = simd::hsum(acc[r]);
}

template <typename Fmt>
void weight_rows(const void* rows, int64_t w_row_bytes, int64_t n, const XInt16& x, float* out) {
  const auto* w = static_cast<const uint8_t*>(rows);
  for_weight_row_groups<2>(n, [&]<int kRows>(int64_t r) {
    weight_rows_r<Fmt, kRows>(w + r * w_row_bytes, w_row_bytes, x, out + r);
  });
}

// DecodeRowInt16Fn of the integer GEMM on avx2 (q3_k): as avx512_vnni::q3k_decode_int16, per
// 16 values the words (sc - 32) · q, d as the scale, no offset.
void q3k_decode_int16(const void* row, int64_t k, int16_t* values, float* scales, float* offsets) {
  const auto* w = static_cast<const uint8_t*>(row);
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* wb = w + b * Q3K::kBytes;
    int16_t* v = values + 256 * b;
    Q3K::sub_blocks(wb, [&](auto sub, __m256i words, __m256i) {
      constexpr int i = decltype(sub)::value;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(v + 16 * i), words);
    });
    const float d = Q3K::d(wb);
    for (int j = 0; j < 8; ++j) {
      scales[8 * b + j] = d;
      offsets[8 * b + j] = 0.0f;
    }
  }
}

}  // namespace
}  // namespace onepass::cpu::avx2
ONEPASS_AVX2_END
#endif  // ONEPASS_CPU_X86

namespace onepass::cpu {

DotRowsInt16Fn kquant_low_int16_dot(DType w, Isa isa) {
#if ONEPASS_CPU_X86
  if (isa == Isa::avx512_vnni) {
    if (w == DType::q2_k) return avx512_vnni::low_dot_rows<avx512_vnni::Q2K>;
    if (w == DType::q3_k) return avx512_vnni::low_dot_rows<avx512_vnni::Q3K>;
  } else if (isa == Isa::avx2 || isa == Isa::avx512) {
    if (w == DType::q2_k) return avx2::low_dot_rows<avx2::Q2K>;
    if (w == DType::q3_k) return avx2::low_dot_rows<avx2::Q3K>;
  }
#else
  (void)w;
  (void)isa;
#endif
  return nullptr;
}

DotWeightRowsInt16Fn kquant_low_int16_dot_weight_rows(DType w, Isa isa) {
#if ONEPASS_CPU_X86
  if (isa == Isa::avx512_vnni && w == DType::q2_k) return avx512_vnni::weight_rows<avx512_vnni::Q2K>;
  if (isa == Isa::avx512_vnni && w == DType::q3_k) return avx512_vnni::weight_rows<avx512_vnni::Q3K>;
  if ((isa == Isa::avx2 || isa == Isa::avx512) && w == DType::q2_k) return avx2::weight_rows<avx2::Q2K>;
  if ((isa == Isa::avx2 || isa == Isa::avx512) && w == DType::q3_k) return avx2::weight_rows<avx2::Q3K>;
#else
  (void)w;
  (void)isa;
#endif
  return nullptr;
}

DecodeRowInt16Fn kquant_low_int16_decode(DType w, Isa isa) {
#if ONEPASS_CPU_X86
  if (isa == Isa::avx512_vnni && w == DType::q3_k) return avx512_vnni::q3k_decode_int16;
  if ((isa == Isa::avx2 || isa == Isa::avx512) && w == DType::q3_k) return avx2::q3k_decode_int16;
#else
  (void)w;
  (void)isa;
#endif
  return nullptr;
}

}  // namespace onepass::cpu
