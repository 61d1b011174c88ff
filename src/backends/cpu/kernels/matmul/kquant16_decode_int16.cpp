// The 16-bit integer row decoders of the integer GEMM (gemm_int16.cpp) for the k-quants
// with a scale per 16 values, q2_k and q6_k (Isa::avx512_vnni, and Isa::avx2). Their values go out as the
// bare quants, the scales and mins per 16 values as f32 (RowKernels::decode_int16_half_blocks),
// so the GEMM's integer sums stay small and every scale is exact in f32:
//   q6_k: w = d · sc · (q - 32), q 6 bits, sc a signed byte: value q - 32 (|.| <= 32),
//         scale d · sc (an f16 times a byte: 18 significant bits), no offset;
//   q2_k: w = d · sc · q - dmin · mn, q 2 bits, sc and mn 4 bits: value q (<= 3), scale
//         d · sc, offset -dmin · mn.
#include <cstring>

#include "rows.h"
#include "simd.h"

#if ONEPASS_CPU_X86
ONEPASS_AVX512_VNNI_BEGIN
namespace onepass::cpu::avx512_vnni {
namespace {

constexpr int64_t kQ6KBytes = 210;
constexpr int64_t kQ2KBytes = 84;

// The 16 scale bytes at p (signed when kSigned) times `by`, as 16 f32.
template <bool kSigned>
inline __m512 scale_bytes_times(const uint8_t* p, float by) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m512i words = kSigned ? _mm512_cvtepi8_epi32(bytes) : _mm512_cvtepu8_epi32(bytes);
  return _mm512_mul_ps(_mm512_cvtepi32_ps(words), _mm512_set1_ps(by));
}

// q6_k super-block (210 bytes): per half of 128 values, 64 bytes of low nibbles (byte l:
// value l low, value l + 64 high) and 32 bytes of top bits (byte l: bits 2s, 2s + 1 for
// value l + 32s); then 16 signed scales, then d.
void q6_k_decode_int16(const void* row, int64_t k, int16_t* values, float* scales, float* offsets) {
  const auto* w = static_cast<const uint8_t*>(row);
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i top2 = _mm512_set1_epi8(0x30);
  const __m512i bias = _mm512_set1_epi8(32);
  // The top bits read twice over (both 256-bit halves), shifted per half by its own count
  // to bits 4..5 of each byte: left by 4 and 2 for bits 0..1 and 2..3, right by 0 and 2 for
  // bits 4..5 and 6..7 (bits shifted in from the neighbouring byte are masked off).
  const __m512i shift_up = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shift_down = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  // 64 bytes q - 32 in value order to 64 words.
  auto store = [](int16_t* v, __m512i bytes) {
    _mm512_storeu_si512(v, _mm512_cvtepi8_epi16(_mm512_castsi512_si256(bytes)));
    _mm512_storeu_si512(v + 32, _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(bytes, 1)));
  };
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* wb = w + b * kQ6KBytes;
    int16_t* v = values + 256 * b;
    for (int h = 0; h < 2; ++h) {
      const __m512i low = _mm512_loadu_si512(wb + 64 * h);
      const __m512i top =
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 128 + 32 * h)));
      // A | (B & C): imm 0xF8.
      store(v + 128 * h, _mm512_sub_epi8(_mm512_ternarylogic_epi32(_mm512_and_si512(low, low4),
                                                                   _mm512_sllv_epi16(top, shift_up), top2, 0xF8),
                                         bias));
      store(v + 128 * h + 64,
            _mm512_sub_epi8(_mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(low, 4), low4),
                                                      _mm512_srlv_epi16(top, shift_down), top2, 0xF8),
                            bias));
    }
    _mm512_storeu_ps(scales + 16 * b, scale_bytes_times<true>(wb + 192, half_at(wb + 208)));
    _mm512_storeu_ps(offsets + 16 * b, _mm512_setzero_ps());
  }
}

// q2_k super-block (84 bytes): 16 bytes of scales (sc low nibble, mn high), 64 bytes of
// quants (per half of 128 values 32 bytes, byte l holding value 32s + l at bits 2s, 2s + 1),
// then d and dmin.
void q2_k_decode_int16(const void* row, int64_t k, int16_t* values, float* scales, float* offsets) {
  const auto* w = static_cast<const uint8_t*>(row);
  const __m512i two = _mm512_set1_epi16(3);
  const __m128i nibble = _mm_set1_epi8(0x0F);
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* wb = w + b * kQ2KBytes;
    int16_t* v = values + 256 * b;
    for (int h = 0; h < 2; ++h) {
      const __m512i q = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 16 + 32 * h)));
      _mm512_storeu_si512(v + 128 * h, _mm512_and_si512(q, two));
      _mm512_storeu_si512(v + 128 * h + 32, _mm512_and_si512(_mm512_srli_epi16(q, 2), two));
      _mm512_storeu_si512(v + 128 * h + 64, _mm512_and_si512(_mm512_srli_epi16(q, 4), two));
      _mm512_storeu_si512(v + 128 * h + 96, _mm512_srli_epi16(q, 6));
    }
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb));
    alignas(16) uint8_t sc[16], mn[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(sc), _mm_and_si128(packed, nibble));
    _mm_store_si128(reinterpret_cast<__m128i*>(mn), _mm_and_si128(_mm_srli_epi16(packed, 4), nibble));
    _mm512_storeu_ps(scales + 16 * b, scale_bytes_times<false>(sc, half_at(wb + 80)));
    _mm512_storeu_ps(offsets + 16 * b, scale_bytes_times<false>(mn, -half_at(wb + 82)));
  }
}

}  // namespace
}  // namespace onepass::cpu::avx512_vnni
ONEPASS_AVX512_VNNI_END

// Isa::avx2 (and avx512 without VNNI): the same values, scales and offsets, 16 or 32 values
// per vector.
ONEPASS_AVX2_BEGIN
namespace onepass::cpu::avx2 {
namespace {

constexpr int64_t kQ6KBytes = 210;
constexpr int64_t kQ2KBytes = 84;

// The 16 scale bytes at p (signed when kSigned) times `by`, as 16 f32 at dst.
template <bool kSigned>
inline void scale_bytes_times(const uint8_t* p, float by, float* dst) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i upper = _mm_srli_si128(bytes, 8);
  const __m256i lo = kSigned ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes);
  const __m256i hi = kSigned ? _mm256_cvtepi8_epi32(upper) : _mm256_cvtepu8_epi32(upper);
  _mm256_storeu_ps(dst, _mm256_mul_ps(_mm256_cvtepi32_ps(lo), _mm256_set1_ps(by)));
  _mm256_storeu_ps(dst + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(hi), _mm256_set1_ps(by)));
}

// As avx512_vnni::q6_k_decode_int16: per half of 128 values, 32 values at a time from 32
// bytes of low nibbles and the 32 bytes of top bits shifted to bits 4..5.
void q6_k_decode_int16(const void* row, int64_t k, int16_t* values, float* scales, float* offsets) {
  const auto* w = static_cast<const uint8_t*>(row);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i top2 = _mm256_set1_epi8(0x30);
  const __m256i bias = _mm256_set1_epi8(32);
  auto store = [&](int16_t* v, __m256i nibbles, __m256i top_bits) {
    const __m256i q =
        _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(nibbles, low4), _mm256_and_si256(top_bits, top2)), bias);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(v), _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(v + 16), _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1)));
  };
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* wb = w + b * kQ6KBytes;
    int16_t* v = values + 256 * b;
    for (int h = 0; h < 2; ++h) {
      const __m256i low0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 64 * h));
      const __m256i low1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 64 * h + 32));
      const __m256i top = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 128 + 32 * h));
      store(v + 128 * h, low0, _mm256_slli_epi16(top, 4));
      store(v + 128 * h + 32, low1, _mm256_slli_epi16(top, 2));
      store(v + 128 * h + 64, _mm256_srli_epi16(low0, 4), top);
      store(v + 128 * h + 96, _mm256_srli_epi16(low1, 4), _mm256_srli_epi16(top, 2));
    }
    scale_bytes_times<true>(wb + 192, half_at(wb + 208), scales + 16 * b);
    std::memset(offsets + 16 * b, 0, 16 * sizeof(float));
  }
}

// As avx512_vnni::q2_k_decode_int16.
void q2_k_decode_int16(const void* row, int64_t k, int16_t* values, float* scales, float* offsets) {
  const auto* w = static_cast<const uint8_t*>(row);
  const __m256i three = _mm256_set1_epi16(3);
  const __m128i nibble = _mm_set1_epi8(0x0F);
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* wb = w + b * kQ2KBytes;
    int16_t* v = values + 256 * b;
    for (int h = 0; h < 2; ++h) {
      for (int part = 0; part < 2; ++part) {
        const __m256i q =
            _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 16 + 32 * h + 16 * part)));
        int16_t* d = v + 128 * h + 16 * part;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), _mm256_and_si256(q, three));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 32), _mm256_and_si256(_mm256_srli_epi16(q, 2), three));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 64), _mm256_and_si256(_mm256_srli_epi16(q, 4), three));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 96), _mm256_srli_epi16(q, 6));
      }
    }
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb));
    alignas(16) uint8_t sc[16], mn[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(sc), _mm_and_si128(packed, nibble));
    _mm_store_si128(reinterpret_cast<__m128i*>(mn), _mm_and_si128(_mm_srli_epi16(packed, 4), nibble));
    scale_bytes_times<false>(sc, half_at(wb + 80), scales + 16 * b);
    scale_bytes_times<false>(mn, -half_at(wb + 82), offsets + 16 * b);
  }
}

}  // namespace
}  // namespace onepass::cpu::avx2
ONEPASS_AVX2_END
#endif  // ONEPASS_CPU_X86

namespace onepass::cpu {

DecodeRowInt16Fn kquant16_decode_int16(DType w, Isa isa) {
#if ONEPASS_CPU_X86
  if (isa == Isa::avx512_vnni && w == DType::q6_k) return avx512_vnni::q6_k_decode_int16;
  if (isa == Isa::avx512_vnni && w == DType::q2_k) return avx512_vnni::q2_k_decode_int16;
  if ((isa == Isa::avx2 || isa == Isa::avx512) && w == DType::q6_k) return avx2::q6_k_decode_int16;
  if ((isa == Isa::avx2 || isa == Isa::avx512) && w == DType::q2_k) return avx2::q2_k_decode_int16;
#else
  (void)w;
  (void)isa;
#endif
  return nullptr;
}

}  // namespace onepass::cpu
