// Row kernels of the k-quant formats q4_k, q5_k and q6_k (256-value super-blocks) for AVX2
// and AVX-512.
//
// AVX2 decoders hand out the integer values of each run of 32 with its scales, which
// ScaledBlocks applies after the dot product. The AVX-512 q4_k decoder hands out the final
// weights through a 16-entry table per run; q5_k and q6_k use the AVX2 kernels on AVX-512
// machines too (see kquant_row_kernels).
#include "rows.h"
#include "simd.h"

#if ONEPASS_CPU_X86
ONEPASS_AVX2_BEGIN
namespace onepass::cpu::avx2 {
namespace {

// 8 packed bytes (lo = bytes 0..3, hi = bytes 4..7) as 8 floats.
inline __m256 packed_u8_to_f32(uint32_t lo, uint32_t hi) {
  const __m128i bytes = _mm_set_epi32(0, 0, static_cast<int>(hi), static_cast<int>(lo));
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
}

// The 8 scales d·sc and 8 offsets -(dmin·mn) of a q4_k/q5_k block as floats, computed
// together: the packed 6-bit fields (kquant_scale_min) are unpacked four at a time in
// 32-bit words, then converted and scaled as one vector. Products round exactly as the
// scalar decoder's.
inline void kquant_scales(const uint8_t* b, float* scale, float* offset) {
  uint32_t w[3];
  std::memcpy(w, b + 4, 12);
  const uint32_t sc_lo = w[0] & 0x3f3f3f3fu;
  const uint32_t mn_lo = w[1] & 0x3f3f3f3fu;
  const uint32_t sc_hi = (w[2] & 0x0f0f0f0fu) | (((w[0] >> 6) & 0x03030303u) << 4);
  const uint32_t mn_hi = ((w[2] >> 4) & 0x0f0f0f0fu) | (((w[1] >> 6) & 0x03030303u) << 4);
  _mm256_storeu_ps(
      scale, _mm256_mul_ps(_mm256_set1_ps(simd::load_half(b)), packed_u8_to_f32(sc_lo, sc_hi)));
  const __m256 neg_dmin = _mm256_set1_ps(-simd::load_half(b + 2));
  _mm256_storeu_ps(offset, _mm256_mul_ps(neg_dmin, packed_u8_to_f32(mn_lo, mn_hi)));
}

// q4_k and q5_k: 8 runs of 32 with their own scale and (subtracted) min.
template <bool kFifthBit>
struct FmtKAsym {
  static constexpr int kElems = 256;
  static constexpr int kBytes = kFifthBit ? 176 : 144;
  static constexpr Combine kCombine = Combine::scale_offset;
  template <typename F>
  static void decode(const uint8_t* b, F&& f) {
    alignas(32) float scale[8];
    alignas(32) float offset[8];
    kquant_scales(b, scale, offset);
    const uint8_t* qs = b + (kFifthBit ? 48 : 16);
    const __m256i mask = _mm256_set1_epi8(0xF);
    __m256i high = _mm256_setzero_si256();
    if constexpr (kFifthBit) high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
    for (int p = 0; p < 4; ++p) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * p));
      for (int h = 0; h < 2; ++h) {
        const int sub = 2 * p + h;
        __m256i q = _mm256_and_si256(h == 0 ? raw : _mm256_srli_epi16(raw, 4), mask);
        if constexpr (kFifthBit) {
          // Bit `sub` of each qh byte becomes bit 4 of the value.
          const __m256i bit = _mm256_and_si256(_mm256_srli_epi16(high, sub), _mm256_set1_epi8(1));
          q = _mm256_or_si256(q, _mm256_slli_epi16(bit, 4));
        }
        __m256 v[4];
        bytes_to_f32<false>(q, v);
        f(sub, v, scale[sub], offset[sub]);
      }
    }
  }
};

struct FmtQ6_K {
  static constexpr int kElems = 256;
  static constexpr int kBytes = 210;
  static constexpr Combine kCombine = Combine::two_scales;
  template <typename F>
  static void decode(const uint8_t* b, F&& f) {
    // The 16 scales d·sc as floats, converted together.
    alignas(32) float scale[16];
    const __m256 d = _mm256_set1_ps(simd::load_half(b + 208));
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192));
    _mm256_storeu_ps(scale, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
    _mm256_storeu_ps(
        scale + 8,
        _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m256i m2 = _mm256_set1_epi8(3);
    const __m256i bias = _mm256_set1_epi8(32);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b + 64 * h;
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h));
      for (int s = 0; s < 4; ++s) {
        const __m256i low_src = (s & 1) ? ql1 : ql0;
        const __m256i low = _mm256_and_si256(s < 2 ? low_src : _mm256_srli_epi16(low_src, 4), m4);
        const __m256i top = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * s), m2);
        const __m256i q = _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(top, 4)), bias);
        __m256 v[4];
        bytes_to_f32<true>(q, v);
        const int sub16 = 8 * h + 2 * s;
        f(4 * h + s, v, scale[sub16], scale[sub16 + 1]);
      }
    }
  }
};

}  // namespace
}  // namespace onepass::cpu::avx2
ONEPASS_AVX2_END

ONEPASS_AVX512_BEGIN
namespace onepass::cpu::avx512 {
namespace {

struct Q4_K {
  static constexpr int kElems = 256;
  static constexpr int kBytes = 144;
  template <int, typename F>
  static void decode(const uint8_t* b, F&& f) {
    alignas(32) float scale[8];
    alignas(32) float offset[8];
    avx2::kquant_scales(b, scale, offset);
    const uint8_t* qs = b + 16;
    // Run `sub`: weights (d * sc) * q - dmin * mn through a table of the 16 values.
    auto run = [&](auto set, int sub, __m512i q0, __m512i q1) {
      const __m512 table =
          _mm512_fmadd_ps(_mm512_set1_ps(scale[sub]), iota16(0.0f), _mm512_set1_ps(offset[sub]));
      const __m512 w[2] = {_mm512_permutexvar_ps(q0, table), _mm512_permutexvar_ps(q1, table)};
      f(set, sub, w);
    };
    for (int p = 0; p < 4; ++p) {
      const __m512i q0 = bytes_u32(qs + 32 * p);
      const __m512i q1 = bytes_u32(qs + 32 * p + 16);
      run(Set<0>{}, 2 * p, q0, q1);
      run(Set<1>{}, 2 * p + 1, _mm512_srli_epi32(q0, 4), _mm512_srli_epi32(q1, 4));
    }
  }
};

}  // namespace
}  // namespace onepass::cpu::avx512
ONEPASS_AVX512_END
namespace onepass::cpu {

RowKernels kquant_row_kernels(DType w, Isa isa) {
  // q5_k and q6_k spend their time assembling values from bit fields, which the 256-bit
  // code spreads over three ports on Intel cores against two for 512-bit code: the AVX2
  // kernels are as fast on Zen 4 and faster on Sapphire Rapids, so both sets use them.
  const RowKernels q5_k = avx2::scaled_block_kernels<avx2::FmtKAsym<true>>();
  const RowKernels q6_k = avx2::scaled_block_kernels<avx2::FmtQ6_K>();
  return pick_row_kernels(w, isa,
                          {
                              {DType::q4_k, avx512::weight_block_kernels<avx512::Q4_K>(),
                               avx2::scaled_block_kernels<avx2::FmtKAsym<false>>()},
                              {DType::q5_k, q5_k, q5_k},
                              {DType::q6_k, q6_k, q6_k},
                          });
}

}  // namespace onepass::cpu
#endif  // ONEPASS_CPU_X86
