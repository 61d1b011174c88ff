// Integer row kernels of iq4_xs for x rounded to 16-bit integers per group of 256 values
// (XInt16): Isa::avx512_vnni (vpdpwssd) and Isa::avx2 (vpmaddwd, also on Isa::avx512).
//
// An iq4_xs super-block is 256 values, one XInt16 group, in 8 runs of 32: weight j =
// d · (sc[j / 32] - 32) · kIq4Values[q_j] with q_j a nibble and sc a 6-bit field per run.
// Each value is decoded to the 16-bit integer (sc - 32) · kIq4Values[q] (one byte shuffle
// picks the grid value, one 16-bit multiply applies the run's scale), dotted with x's
// integers into 32-bit lanes, and the super-block's exact integer sum is scaled once in f32
// by d times x's group scale, where the f32 path converts and multiplies every value.
//
// No 32-bit lane overflows: |sc - 32| <= 32 and |kIq4Values| <= 127, so a weight integer is
// at most 4064 in magnitude, and a lane sums at most 16 products per super-block (2 per
// vpdpwssd or vpmaddwd, 8 runs) with x integers of at most 32767: below 16 · 4064 · 32767
// = 2,130,608,128 < 2^31.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "onepass/ops/quant.h"
#include "rows.h"
#include "simd.h"

namespace onepass::cpu {
namespace {

constexpr int64_t kIQ4XSBytes = 136;

// The 8 runs' integer scales sc - 32 of the super-block at b.
inline void run_scales(const uint8_t* b, int16_t* scales) {
  ops::BlockIQ4_XS block;
  std::memcpy(&block, b, 8);  // d and the scale fields
  for (int i = 0; i < 8; ++i) scales[i] = static_cast<int16_t>(ops::iq4xs_scale(block, i) - 32);
}

}  // namespace
}  // namespace onepass::cpu

#if ONEPASS_CPU_X86
ONEPASS_AVX512_VNNI_BEGIN
namespace onepass::cpu::avx512_vnni {
namespace {

// The GF(2) matrix of vgf2p8affineqb (one per qword) whose output bits 0..3 are input bits
// `shift`..`shift` + 3 and bits 4..7 zero: the nibble at `shift`.
constexpr long long nibble_matrix(int shift) {
  unsigned long long m = 0;
  for (int i = 0; i < 4; ++i) m |= (1ull << (shift + i)) << (8 * (7 - i));
  return static_cast<long long>(m);
}

// The 8 runs' integer scales sc - 32 of the super-block at b, as words 0..7: word i takes
// bits 4 (i % 2) .. 4 (i % 2) + 3 of scales_l[i / 2] and bits 2i, 2i + 1 of scales_h.
inline void run_scales_simd(const uint8_t* b, int16_t* scales) {
  const __m128i head = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b));  // d, scales_h, scales_l
  const __m128i low = _mm_shuffle_epi8(head, _mm_setr_epi8(4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1));
  const __m128i high = _mm_shuffle_epi8(head, _mm_setr_epi8(2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3));
  const __m128i low4 = _mm_and_si128(_mm_srlv_epi16(low, _mm_setr_epi16(0, 4, 0, 4, 0, 4, 0, 4)), _mm_set1_epi16(0xF));
  const __m128i high2 = _mm_and_si128(_mm_srlv_epi16(high, _mm_setr_epi16(0, 2, 4, 6, 8, 10, 12, 14)), _mm_set1_epi16(3));
  _mm_store_si128(reinterpret_cast<__m128i*>(scales),
                  _mm_sub_epi16(_mm_or_si128(low4, _mm_slli_epi16(high2, 4)), _mm_set1_epi16(32)));
}

// Run u of the super-block at b as 32 words kIq4Values[q] in value order; its 16 bytes of
// nibbles hold value l low, value l + 16 high.
inline __m512i run_grid_values(const uint8_t* b, int u) {
  const __m256i grid =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ops::kIq4Values)));
  const __m256i matrix =
      _mm256_setr_epi64x(nibble_matrix(0), nibble_matrix(0), nibble_matrix(4), nibble_matrix(4));
  const __m256i raw =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 8 + 16 * u)));
  return _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(grid, _mm256_gf2p8affine_epi64_epi8(raw, matrix, 0)));
}

// Run u as 32 words (sc - 32) · kIq4Values[q].
inline __m512i run_values(const uint8_t* b, int u, const int16_t* scales) {
  return _mm512_mullo_epi16(run_grid_values(b, u), _mm512_set1_epi16(scales[u]));
}

// DecodeRowInt16Fn of the integer GEMM: each run's grid values kIq4Values[q] (|.| <= 127,
// within its 16-bit lanes' bound) with the run's scale d · (sc - 32), no offset.
void iq4_xs_decode_int16(const void* row, int64_t k, int16_t* values, float* scales, float* offsets) {
  const auto* w = static_cast<const uint8_t*>(row);
  for (int64_t sb = 0; sb < k / 256; ++sb) {
    const uint8_t* b = w + sb * kIQ4XSBytes;
    alignas(16) int16_t run_scale[8];
    run_scales_simd(b, run_scale);
    const float d = half_at(b);
    for (int u = 0; u < 8; ++u) {
      _mm512_storeu_si512(values + 256 * sb + 32 * u, run_grid_values(b, u));
      scales[8 * sb + u] = d * static_cast<float>(run_scale[u]);
      offsets[8 * sb + u] = 0.0f;
    }
  }
}

// M rows of x with one weight row: each run decoded once and dotted with every row into
// one integer sum per row and super-block, then d · group scale into the row's f32 sum.
template <int M>
void iq4_xs_dot_group(const uint8_t* w, const XInt16& x, float* out, int64_t out_stride) {
  const int64_t blocks = x.k / 256;
  __m512 acc[M];
  for (int i = 0; i < M; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* wb = w + b * kIQ4XSBytes;
    alignas(16) int16_t scales[8];
    run_scales_simd(wb, scales);
    __m512i sum[M];
    for (int i = 0; i < M; ++i) sum[i] = _mm512_setzero_si512();
    for (int u = 0; u < 8; ++u) {
      const __m512i v = run_values(wb, u, scales);
      for (int i = 0; i < M; ++i) {
        sum[i] = _mm512_dpwssd_epi32(sum[i], v, _mm512_load_si512(x.q + i * x.k + 256 * b + 32 * u));
      }
    }
    const float d = half_at(wb);
    for (int i = 0; i < M; ++i) {
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[i]), _mm512_set1_ps(d * x.group_scale[i * x.groups + b]), acc[i]);
    }
  }
  for (int i = 0; i < M; ++i) out[i * out_stride] = _mm512_reduce_add_ps(acc[i]);
}

// DotRowsInt16Fn: groups of up to 4 rows of x share one decode of each super-block.
void iq4_xs_dot_rows(const void* row, const XInt16& x, int64_t m, float* out, int64_t out_stride) {
  const auto* w = static_cast<const uint8_t*>(row);
  for_row_groups<4>(x, m, out, out_stride, [&]<int M>(const XInt16& rows, float* o) {
    iq4_xs_dot_group<M>(w, rows, o, out_stride);
  });
}

// How far ahead the weights are asked for, and past which lead into L2 rather than L1:
// block32_int16.cpp's kPrefetchBytes and kPrefetchL1MaxBytes explain both.
constexpr int64_t kPrefetchBytes = 4096;
constexpr int64_t kPrefetchL1MaxBytes = 16384;

// R weight rows with one row of x: each run of x is loaded once for the R rows, and each
// row's super-blocks go into one f32 sum (the R rows are the independent chains). A row's
// value does not depend on R.
template <int R, int kLocality>
void iq4_xs_weight_rows_r(const uint8_t* w, int64_t w_row_bytes, const XInt16& x, float* out) {
  const int64_t blocks = x.k / 256;
  const int64_t lead = std::max<int64_t>(kPrefetchBytes, R * w_row_bytes);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t o = 0; o < R * kIQ4XSBytes; o += 64) {
      __builtin_prefetch(w + lead + b * R * kIQ4XSBytes + o, 0, kLocality);
    }
    alignas(16) int16_t scales[R][8];
    __m512i sum[R];
    for (int r = 0; r < R; ++r) {
      run_scales_simd(w + r * w_row_bytes + b * kIQ4XSBytes, scales[r]);
      sum[r] = _mm512_setzero_si512();
    }
    for (int u = 0; u < 8; ++u) {
      const __m512i xq = _mm512_load_si512(x.q + 256 * b + 32 * u);
      for (int r = 0; r < R; ++r) {
        sum[r] = _mm512_dpwssd_epi32(sum[r], run_values(w + r * w_row_bytes + b * kIQ4XSBytes, u, scales[r]), xq);
      }
    }
    for (int r = 0; r < R; ++r) {
      const float d = half_at(w + r * w_row_bytes + b * kIQ4XSBytes);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[r]), _mm512_set1_ps(d * x.group_scale[b]), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}

template <int kLocality>
void iq4_xs_weight_rows_at(const uint8_t* w, int64_t w_row_bytes, int64_t n, const XInt16& x, float* out) {
  for_weight_row_groups<4>(n, [&]<int kRows>(int64_t r) {
    iq4_xs_weight_rows_r<kRows, kLocality>(w + r * w_row_bytes, w_row_bytes, x, out + r);
  });
}

// DotWeightRowsInt16Fn: four weight rows at a time, the weights asked for ahead in address
// order.
void iq4_xs_dot_weight_rows(const void* rows, int64_t w_row_bytes, int64_t n, const XInt16& x, float* out) {
  const auto* w = static_cast<const uint8_t*>(rows);
  if (4 * w_row_bytes > kPrefetchL1MaxBytes) return iq4_xs_weight_rows_at<2>(w, w_row_bytes, n, x, out);
  iq4_xs_weight_rows_at<3>(w, w_row_bytes, n, x, out);
}

}  // namespace
}  // namespace onepass::cpu::avx512_vnni
ONEPASS_AVX512_VNNI_END

ONEPASS_AVX2_BEGIN
namespace onepass::cpu::avx2 {
namespace {

// Run u of the super-block at b as two vectors of 16 words (sc - 32) · kIq4Values[q]:
// values 0..15 (low nibbles) and 16..31 (high nibbles).
inline void run_values(const uint8_t* b, int u, const int16_t* scales, __m256i& v0, __m256i& v1) {
  const __m128i grid = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ops::kIq4Values));
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 8 + 16 * u));
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const __m256i scale = _mm256_set1_epi16(scales[u]);
  v0 = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm_shuffle_epi8(grid, _mm_and_si128(raw, low4))), scale);
  v1 = _mm256_mullo_epi16(
      _mm256_cvtepi8_epi16(_mm_shuffle_epi8(grid, _mm_and_si128(_mm_srli_epi16(raw, 4), low4))), scale);
}

// As avx512_vnni::iq4_xs_dot_group with vpmaddwd: each row's two integer sums take the first and
// the second 16 values of every run (at most 16 products per lane each).
template <int M>
void iq4_xs_dot_group(const uint8_t* w, const XInt16& x, float* out, int64_t out_stride) {
  const int64_t blocks = x.k / 256;
  __m256 acc[M];
  for (int i = 0; i < M; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* wb = w + b * kIQ4XSBytes;
    alignas(16) int16_t scales[8];
    run_scales(wb, scales);
    __m256i sum[M][2];
    for (int i = 0; i < M; ++i) sum[i][0] = sum[i][1] = _mm256_setzero_si256();
    for (int u = 0; u < 8; ++u) {
      __m256i v0, v1;
      run_values(wb, u, scales, v0, v1);
      for (int i = 0; i < M; ++i) {
        const int16_t* xu = x.q + i * x.k + 256 * b + 32 * u;
        sum[i][0] = _mm256_add_epi32(sum[i][0], _mm256_madd_epi16(v0, _mm256_load_si256(reinterpret_cast<const __m256i*>(xu))));
        sum[i][1] =
            _mm256_add_epi32(sum[i][1], _mm256_madd_epi16(v1, _mm256_load_si256(reinterpret_cast<const __m256i*>(xu + 16))));
      }
    }
    const float d = half_at(wb);
    for (int i = 0; i < M; ++i) {
      const __m256 total = _mm256_add_ps(_mm256_cvtepi32_ps(sum[i][0]), _mm256_cvtepi32_ps(sum[i][1]));
      acc[i] = _mm256_fmadd_ps(total, _mm256_set1_ps(d * x.group_scale[i * x.groups + b]), acc[i]);
    }
  }
  for (int i = 0; i < M; ++i) out[i * out_stride] = simd::hsum(acc[i]);
}

// DotRowsInt16Fn: groups of up to 2 rows of x share one decode of each super-block (more
// spill the 16 registers).
void iq4_xs_dot_rows(const void* row, const XInt16& x, int64_t m, float* out, int64_t out_stride) {
  const auto* w = static_cast<const uint8_t*>(row);
  for_row_groups<2>(x, m, out, out_stride, [&]<int M>(const XInt16& rows, float* o) {
    iq4_xs_dot_group<M>(w, rows, o, out_stride);
  });
}

// DecodeRowInt16Fn of the integer GEMM on avx2: as avx512_vnni::iq4_xs_decode_int16 (each
// run's grid values kIq4Values[q], the run's scale d · (sc - 32), no offset).
void iq4_xs_decode_int16(const void* row, int64_t k, int16_t* values, float* scales, float* offsets) {
  const auto* w = static_cast<const uint8_t*>(row);
  const __m128i grid = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ops::kIq4Values));
  const __m128i low4 = _mm_set1_epi8(0x0F);
  for (int64_t sb = 0; sb < k / 256; ++sb) {
    const uint8_t* b = w + sb * kIQ4XSBytes;
    alignas(16) int16_t run_scale[8];
    run_scales(b, run_scale);
    const float d = half_at(b);
    for (int u = 0; u < 8; ++u) {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 8 + 16 * u));
      int16_t* v = values + 256 * sb + 32 * u;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(v),
                          _mm256_cvtepi8_epi16(_mm_shuffle_epi8(grid, _mm_and_si128(raw, low4))));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(v + 16),
                          _mm256_cvtepi8_epi16(_mm_shuffle_epi8(grid, _mm_and_si128(_mm_srli_epi16(raw, 4), low4))));
      scales[8 * sb + u] = d * static_cast<float>(run_scale[u]);
      offsets[8 * sb + u] = 0.0f;
    }
  }
}

}  // namespace
}  // namespace onepass::cpu::avx2
ONEPASS_AVX2_END
#endif  // ONEPASS_CPU_X86

namespace onepass::cpu {

DotRowsInt16Fn iq4_xs_int16_dot(DType w, Isa isa) {
#if ONEPASS_CPU_X86
  if (w == DType::iq4_xs && isa == Isa::avx512_vnni) return avx512_vnni::iq4_xs_dot_rows;
  if (w == DType::iq4_xs && (isa == Isa::avx2 || isa == Isa::avx512)) return avx2::iq4_xs_dot_rows;
#else
  (void)w;
  (void)isa;
#endif
  return nullptr;
}

DecodeRowInt16Fn iq4_xs_int16_decode(DType w, Isa isa) {
#if ONEPASS_CPU_X86
  if (w == DType::iq4_xs && isa == Isa::avx512_vnni) return avx512_vnni::iq4_xs_decode_int16;
  if (w == DType::iq4_xs && (isa == Isa::avx2 || isa == Isa::avx512)) return avx2::iq4_xs_decode_int16;
#else
  (void)w;
  (void)isa;
#endif
  return nullptr;
}

DotWeightRowsInt16Fn iq4_xs_int16_dot_weight_rows(DType w, Isa isa) {
#if ONEPASS_CPU_X86
  if (w == DType::iq4_xs && isa == Isa::avx512_vnni) return avx512_vnni::iq4_xs_dot_weight_rows;
#else
  (void)w;
  (void)isa;
#endif
  return nullptr;
}

}  // namespace onepass::cpu
