// Row kernels of the 32-value block formats q4_0, q4_1 and q8_0 for AVX2 and AVX-512.
//
// AVX2 decoders hand out the integer values of a block and its scale (and min), which
// ScaledBlocks applies after the dot product. AVX-512 decoders hand out the final
// weights: the 4-bit formats through a 16-entry table of the block's weight values
// (vpermps picks an entry by the low 4 bits of each lane), q8_0 by converting integers.
#include "rows.h"
#include "simd.h"

#if ONEPASS_CPU_X86
ONEPASS_AVX2_BEGIN
namespace onepass::cpu::avx2 {
namespace {

struct FmtQ4_0 {
  static constexpr int kElems = 32;
  static constexpr int kBytes = 18;
  static constexpr Combine kCombine = Combine::scale;
  template <typename F>
  static void decode(const uint8_t* b, F&& f) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
    const __m128i mask = _mm_set1_epi8(0xF);
    const __m128i eight = _mm_set1_epi8(8);
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(raw, mask), eight);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), mask), eight);
    const __m256 v[4] = {i8_to_f32(lo), i8_to_f32(_mm_srli_si128(lo, 8)), i8_to_f32(hi),
                         i8_to_f32(_mm_srli_si128(hi, 8))};
    f(0, v, half_at(b), 0.0f);
  }
};

struct FmtQ4_1 {
  static constexpr int kElems = 32;
  static constexpr int kBytes = 20;
  static constexpr Combine kCombine = Combine::scale_offset;
  template <typename F>
  static void decode(const uint8_t* b, F&& f) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4));
    const __m128i mask = _mm_set1_epi8(0xF);
    const __m128i lo = _mm_and_si128(raw, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);
    const __m256 v[4] = {u8_to_f32(lo), u8_to_f32(_mm_srli_si128(lo, 8)), u8_to_f32(hi),
                         u8_to_f32(_mm_srli_si128(hi, 8))};
    f(0, v, half_at(b), half_at(b + 2));
  }
};

struct FmtQ8_0 {
  static constexpr int kElems = 32;
  static constexpr int kBytes = 34;
  static constexpr Combine kCombine = Combine::scale;
  template <typename F>
  static void decode(const uint8_t* b, F&& f) {
    __m256 v[4];
    bytes_to_f32<true>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)), v);
    f(0, v, half_at(b), 0.0f);
  }
};

}  // namespace
}  // namespace onepass::cpu::avx2
ONEPASS_AVX2_END

ONEPASS_AVX512_BEGIN
namespace onepass::cpu::avx512 {
namespace {

struct Q4_0 {
  static constexpr int kElems = 32;
  static constexpr int kBytes = 18;
  template <int kSet, typename F>
  static void decode(const uint8_t* b, F&& f) {
    const __m512 table = _mm512_mul_ps(_mm512_set1_ps(half_at(b)), iota16(-8.0f));  // d * (q - 8)
    const __m512i idx = bytes_u32(b + 2);
    const __m512 w[2] = {_mm512_permutexvar_ps(idx, table),
                         _mm512_permutexvar_ps(_mm512_srli_epi32(idx, 4), table)};
    f(Set<kSet>{}, 0, w);
  }
};

struct Q4_1 {
  static constexpr int kElems = 32;
  static constexpr int kBytes = 20;
  template <int kSet, typename F>
  static void decode(const uint8_t* b, F&& f) {
    const __m512 table = _mm512_fmadd_ps(_mm512_set1_ps(half_at(b)), iota16(0.0f),
                                         _mm512_set1_ps(half_at(b + 2)));  // d * q + m
    const __m512i idx = bytes_u32(b + 4);
    const __m512 w[2] = {_mm512_permutexvar_ps(idx, table),
                         _mm512_permutexvar_ps(_mm512_srli_epi32(idx, 4), table)};
    f(Set<kSet>{}, 0, w);
  }
};

struct Q8_0 {
  static constexpr int kElems = 32;
  static constexpr int kBytes = 34;
  template <int kSet, typename F>
  static void decode(const uint8_t* b, F&& f) {
    const __m512 d = _mm512_set1_ps(half_at(b));
    auto values = [&](int at) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + at));
      return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
    };
    const __m512 w[2] = {values(0), values(16)};
    f(Set<kSet>{}, 0, w);
  }
};

}  // namespace
}  // namespace onepass::cpu::avx512
ONEPASS_AVX512_END

namespace onepass::cpu {

RowKernels block32_row_kernels(DType w, Isa isa) {
  return pick_row_kernels(w, isa,
                          {block_rows<DType::q4_0, avx512::Q4_0, avx2::FmtQ4_0>(),
                           block_rows<DType::q4_1, avx512::Q4_1, avx2::FmtQ4_1>(),
                           block_rows<DType::q8_0, avx512::Q8_0, avx2::FmtQ8_0>()});
}

}  // namespace onepass::cpu
#endif  // ONEPASS_CPU_X86
