// Row kernels of the non-uniform 4-bit formats iq4_nl (32-value blocks) and iq4_xs
// (256-value super-blocks of 8 runs of 32) for AVX2 and AVX-512.
//
// AVX2 decoders turn the nibbles into the grid's integer values (kIq4Values) with one byte
// shuffle per 16 values and hand them out with the run's scale, which ScaledBlocks applies
// after the dot product. AVX-512 decoders hand out the final weights through a 16-entry
// table of scale * kIq4Values per run (vpermps picks an entry by the low 4 bits).
#include "onepass/ops/quant.h"
#include "rows.h"
#include "simd.h"

#if ONEPASS_CPU_X86
ONEPASS_AVX2_BEGIN
namespace onepass::cpu::avx2 {
namespace {

// The 32 grid values of 16 nibble bytes (byte j: value j low, value j + 16 high) as 4 x 8
// floats in value order.
inline void iq4_values(const uint8_t* qs, __m256* v) {
  const __m128i grid = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ops::kIq4Values));
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0xF);
  const __m128i lo = _mm_shuffle_epi8(grid, _mm_and_si128(raw, mask));
  const __m128i hi = _mm_shuffle_epi8(grid, _mm_and_si128(_mm_srli_epi16(raw, 4), mask));
  v[0] = i8_to_f32(lo);
  v[1] = i8_to_f32(_mm_srli_si128(lo, 8));
  v[2] = i8_to_f32(hi);
  v[3] = i8_to_f32(_mm_srli_si128(hi, 8));
}

struct FmtIQ4_NL {
  static constexpr int kElems = 32;
  static constexpr int kBytes = 18;
  static constexpr Combine kCombine = Combine::scale;
  template <typename F>
  static void decode(const uint8_t* b, F&& f) {
    __m256 v[4];
    iq4_values(b + 2, v);
    f(0, v, half_at(b), 0.0f);
  }
};

struct FmtIQ4_XS {
  static constexpr int kElems = 256;
  static constexpr int kBytes = 136;
  static constexpr Combine kCombine = Combine::scale;
  template <typename F>
  static void decode(const uint8_t* b, F&& f) {
    ops::BlockIQ4_XS block;
    std::memcpy(&block, b, 8);  // d and the scales
    const float d = half_at(b);
    for (int i = 0; i < 8; ++i) {
      __m256 v[4];
      iq4_values(b + 8 + 16 * i, v);
      f(i, v, d * static_cast<float>(ops::iq4xs_scale(block, i) - 32), 0.0f);
    }
  }
};

}  // namespace
}  // namespace onepass::cpu::avx2
ONEPASS_AVX2_END

ONEPASS_AVX512_BEGIN
namespace onepass::cpu::avx512 {
namespace {

// The run's 32 weights scale * kIq4Values[q] from its 16 nibble bytes.
template <typename Set, typename F>
inline void iq4_run(Set set, int sub, float scale, const uint8_t* qs, F&& f) {
  const __m512 grid = _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ops::kIq4Values))));
  const __m512 table = _mm512_mul_ps(_mm512_set1_ps(scale), grid);
  const __m512i idx = bytes_u32(qs);
  const __m512 w[2] = {_mm512_permutexvar_ps(idx, table),
                       _mm512_permutexvar_ps(_mm512_srli_epi32(idx, 4), table)};
  f(set, sub, w);
}

struct IQ4_NL {
  static constexpr int kElems = 32;
  static constexpr int kBytes = 18;
  template <int kSet, typename F>
  static void decode(const uint8_t* b, F&& f) {
    iq4_run(Set<kSet>{}, 0, half_at(b), b + 2, f);
  }
};

struct IQ4_XS {
  static constexpr int kElems = 256;
  static constexpr int kBytes = 136;
  template <int, typename F>
  static void decode(const uint8_t* b, F&& f) {
    ops::BlockIQ4_XS block;
    std::memcpy(&block, b, 8);  // d and the scales
    const float d = half_at(b);
    for (int i = 0; i < 8; i += 2) {
      iq4_run(Set<0>{}, i, d * static_cast<float>(ops::iq4xs_scale(block, i) - 32), b + 8 + 16 * i,
              f);
      iq4_run(Set<1>{}, i + 1, d * static_cast<float>(ops::iq4xs_scale(block, i + 1) - 32),
              b + 24 + 16 * i, f);
    }
  }
};

}  // namespace
}  // namespace onepass::cpu::avx512
ONEPASS_AVX512_END

namespace onepass::cpu {

RowKernels iq4_row_kernels(DType w, Isa isa) {
  return pick_row_kernels(w, isa,
                          {block_rows<DType::iq4_nl, avx512::IQ4_NL, avx2::FmtIQ4_NL>(),
                           block_rows<DType::iq4_xs, avx512::IQ4_XS, avx2::FmtIQ4_XS>()});
}

}  // namespace onepass::cpu
#endif  // ONEPASS_CPU_X86
