// Row kernels of the 32-value 5-bit block formats q5_0 and q5_1 for AVX2 and AVX-512.
//
// AVX2 decoders assemble the 32 values of a block as bytes (nibbles plus the fifth bits
// of qh) and hand them out with the scale (and min), which ScaledBlocks applies after the
// dot product. AVX-512 decoders hand out the final weights through a 32-entry table of the
// block's weight values: vpermt2ps picks an entry by the low 5 bits of each lane, the
// fifth bit set from qh through a lane mask.
#include "rows.h"
#include "simd.h"

#if ONEPASS_CPU_X86
ONEPASS_AVX2_BEGIN
namespace onepass::cpu::avx2 {
namespace {

// The 32 values q[j] = nibble | fifth bit << 4 of a 5-bit block whose qh word is at
// `qh` and nibbles at `qs`, as bytes in value order.
inline __m256i five_bit_values(const uint8_t* qh, const uint8_t* qs) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  // Byte j of `spread` is byte j / 8 of bits; testing bit j % 8 of it gives value j's bit.
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                          _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
                                             0x0202020202020202, 0x0303030303030303));
  const __m256i select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
  const __m256i fifth = _mm256_and_si256(
      _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select), _mm256_set1_epi8(0x10));
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0xF);
  const __m256i nibbles =
      _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), mask), _mm_and_si128(raw, mask));
  return _mm256_or_si256(nibbles, fifth);
}

struct FmtQ5_0 {
  static constexpr int kElems = 32;
  static constexpr int kBytes = 22;
  static constexpr Combine kCombine = Combine::scale;
  template <typename F>
  static void decode(const uint8_t* b, F&& f) {
    __m256 v[4];
    bytes_to_f32<true>(_mm256_sub_epi8(five_bit_values(b + 2, b + 6), _mm256_set1_epi8(16)), v);
    f(0, v, half_at(b), 0.0f);
  }
};

struct FmtQ5_1 {
  static constexpr int kElems = 32;
  static constexpr int kBytes = 24;
  static constexpr Combine kCombine = Combine::scale_offset;
  template <typename F>
  static void decode(const uint8_t* b, F&& f) {
    __m256 v[4];
    bytes_to_f32<false>(five_bit_values(b + 4, b + 8), v);
    f(0, v, half_at(b), half_at(b + 2));
  }
};

}  // namespace
}  // namespace onepass::cpu::avx2
ONEPASS_AVX2_END

ONEPASS_AVX512_BEGIN
namespace onepass::cpu::avx512 {
namespace {

// The block's 32 weights from its table (entries 0..15 in `low`, 16..31 in `high`).
template <int kSet, typename F>
inline void five_bit_weights(const uint8_t* qh, const uint8_t* qs, __m512 low, __m512 high, F&& f) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const __m512i idx = bytes_u32(qs);
  const __m512i sixteen = _mm512_set1_epi32(16);
  const __m512i lo_nibble = _mm512_and_epi32(idx, _mm512_set1_epi32(0xF));
  const __m512i lo =
      _mm512_mask_or_epi32(lo_nibble, static_cast<__mmask16>(bits), lo_nibble, sixteen);
  const __m512i hi_nibble = _mm512_srli_epi32(idx, 4);
  const __m512i hi =
      _mm512_mask_or_epi32(hi_nibble, static_cast<__mmask16>(bits >> 16), hi_nibble, sixteen);
  const __m512 w[2] = {_mm512_permutex2var_ps(low, lo, high),
                       _mm512_permutex2var_ps(low, hi, high)};
  f(Set<kSet>{}, 0, w);
}

struct Q5_0 {
  static constexpr int kElems = 32;
  static constexpr int kBytes = 22;
  template <int kSet, typename F>
  static void decode(const uint8_t* b, F&& f) {
    const __m512 d = _mm512_set1_ps(half_at(b));  // d * (q - 16)
    five_bit_weights<kSet>(b + 2, b + 6, _mm512_mul_ps(d, iota16(-16.0f)),
                           _mm512_mul_ps(d, iota16(0.0f)), f);
  }
};

struct Q5_1 {
  static constexpr int kElems = 32;
  static constexpr int kBytes = 24;
  template <int kSet, typename F>
  static void decode(const uint8_t* b, F&& f) {
    const __m512 d = _mm512_set1_ps(half_at(b));  // d * q + m
    const __m512 m = _mm512_set1_ps(half_at(b + 2));
    five_bit_weights<kSet>(b + 4, b + 8, _mm512_fmadd_ps(d, iota16(0.0f), m),
                           _mm512_fmadd_ps(d, iota16(16.0f), m), f);
  }
};

}  // namespace
}  // namespace onepass::cpu::avx512
ONEPASS_AVX512_END

namespace onepass::cpu {

RowKernels q5_blocks_row_kernels(DType w, Isa isa) {
  return pick_row_kernels(w, isa,
                          {block_rows<DType::q5_0, avx512::Q5_0, avx2::FmtQ5_0>(),
                           block_rows<DType::q5_1, avx512::Q5_1, avx2::FmtQ5_1>()});
}

}  // namespace onepass::cpu
#endif  // ONEPASS_CPU_X86
