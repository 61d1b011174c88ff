// Row kernels of the low-bit k-quants q2_k and q3_k (256-value super-blocks of 16
// sub-blocks of 16 values) for AVX2 and AVX-512.
//
// Their sub-blocks are 16 values with a scale each (and for q2_k a min), so a run of 32
// values has two of each: both instruction sets use WeightBlocks, whose decoders hand out
// the final weights (8 or 16 values of one sub-block per vector, one multiply or FMA each).
#include "onepass/ops/quant.h"
#include "rows.h"
#include "simd.h"

#if ONEPASS_CPU_X86
ONEPASS_AVX2_BEGIN
namespace onepass::cpu::avx2 {
namespace {

// The 16 scales d * sc of a q3_k block.
inline void q3k_scales(const uint8_t* b, float* scale) {
  const float d = half_at(b + 108);
  for (int i = 0; i < 16; ++i) scale[i] = d * static_cast<float>(ops::q3k_scale(b + 96, i) - 32);
}

// The 16 scales d * sc and negated mins -(dmin * mn) of a q2_k block.
inline void q2k_scales(const uint8_t* b, float* scale, float* offset) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
  const __m128i mask = _mm_set1_epi8(0xF);
  const __m128i sc = _mm_and_si128(packed, mask);
  const __m128i mn = _mm_and_si128(_mm_srli_epi16(packed, 4), mask);
  const __m256 d = _mm256_set1_ps(half_at(b + 80));
  const __m256 neg_dmin = _mm256_set1_ps(-half_at(b + 82));
  _mm256_storeu_ps(scale, _mm256_mul_ps(d, u8_to_f32(sc)));
  _mm256_storeu_ps(scale + 8, _mm256_mul_ps(d, u8_to_f32(_mm_srli_si128(sc, 8))));
  _mm256_storeu_ps(offset, _mm256_mul_ps(neg_dmin, u8_to_f32(mn)));
  _mm256_storeu_ps(offset + 8, _mm256_mul_ps(neg_dmin, u8_to_f32(_mm_srli_si128(mn, 8))));
}

struct Q2_K {
  static constexpr int kElems = 256;
  static constexpr int kBytes = 84;
  template <int, typename F>
  static void decode(const uint8_t* b, F&& f) {
    alignas(32) float scale[16];
    alignas(32) float offset[16];
    q2k_scales(b, scale, offset);
    const __m256i m2 = _mm256_set1_epi8(3);
    for (int g = 0; g < 2; ++g) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 32 * g));
      for (int s = 0; s < 4; ++s) {
        __m256 v[4];
        bytes_to_f32<false>(_mm256_and_si256(_mm256_srli_epi16(raw, 2 * s), m2), v);
        const int sub = 8 * g + 2 * s;  // the 16-value sub-block of v[0] and v[1]
        __m256 w[4];
        for (int j = 0; j < 4; ++j) {
          w[j] = _mm256_fmadd_ps(_mm256_set1_ps(scale[sub + j / 2]), v[j],
                                 _mm256_set1_ps(offset[sub + j / 2]));
        }
        if (s % 2 == 0) {
          f(Set<0>{}, 4 * g + s, w);
        } else {
          f(Set<1>{}, 4 * g + s, w);
        }
      }
    }
  }
};

struct Q3_K {
  static constexpr int kElems = 256;
  static constexpr int kBytes = 110;
  template <int, typename F>
  static void decode(const uint8_t* b, F&& f) {
    alignas(32) float scale[16];
    q3k_scales(b, scale);
    const __m256i m2 = _mm256_set1_epi8(3);
    const __m256i one = _mm256_set1_epi8(1);
    const __m256i four = _mm256_set1_epi8(4);
    const __m256i hmask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
    for (int g = 0; g < 2; ++g) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 32 + 32 * g));
      for (int s = 0; s < 4; ++s) {
        // q = low 2 bits | hmask bit << 2, minus 4: in [-4, 3].
        const __m256i low = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * s), m2);
        const __m256i high = _mm256_and_si256(_mm256_srli_epi16(hmask, 4 * g + s), one);
        const __m256i q = _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(high, 2)), four);
        __m256 v[4];
        bytes_to_f32<true>(q, v);
        const int sub = 8 * g + 2 * s;
        __m256 w[4];
        for (int j = 0; j < 4; ++j) w[j] = _mm256_mul_ps(_mm256_set1_ps(scale[sub + j / 2]), v[j]);
        if (s % 2 == 0) {
          f(Set<0>{}, 4 * g + s, w);
        } else {
          f(Set<1>{}, 4 * g + s, w);
        }
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

struct Q2_K {
  static constexpr int kElems = 256;
  static constexpr int kBytes = 84;
  template <int, typename F>
  static void decode(const uint8_t* b, F&& f) {
    alignas(32) float scale[16];
    alignas(32) float offset[16];
    avx2::q2k_scales(b, scale, offset);
    const __m512i m2 = _mm512_set1_epi32(3);
    for (int g = 0; g < 2; ++g) {
      const __m512i q0 = bytes_u32(b + 16 + 32 * g);
      const __m512i q1 = bytes_u32(b + 32 + 32 * g);
      for (int s = 0; s < 4; ++s) {
        const int sub = 8 * g + 2 * s;
        auto weights = [&](__m512i q, int i) {
          const __m512 v = _mm512_cvtepi32_ps(_mm512_and_epi32(_mm512_srli_epi32(q, 2 * s), m2));
          return _mm512_fmadd_ps(_mm512_set1_ps(scale[i]), v, _mm512_set1_ps(offset[i]));
        };
        const __m512 w[2] = {weights(q0, sub), weights(q1, sub + 1)};
        if (s % 2 == 0) {
          f(Set<0>{}, 4 * g + s, w);
        } else {
          f(Set<1>{}, 4 * g + s, w);
        }
      }
    }
  }
};

struct Q3_K {
  static constexpr int kElems = 256;
  static constexpr int kBytes = 110;
  template <int, typename F>
  static void decode(const uint8_t* b, F&& f) {
    alignas(32) float scale[16];
    avx2::q3k_scales(b, scale);
    const __m512i m2 = _mm512_set1_epi32(3);
    const __m512i one = _mm512_set1_epi32(1);
    const __m512i four = _mm512_set1_epi32(4);
    const __m512i h0 = bytes_u32(b);
    const __m512i h1 = bytes_u32(b + 16);
    for (int g = 0; g < 2; ++g) {
      const __m512i q0 = bytes_u32(b + 32 + 32 * g);
      const __m512i q1 = bytes_u32(b + 48 + 32 * g);
      for (int s = 0; s < 4; ++s) {
        const int sub = 8 * g + 2 * s;
        const int bit = 4 * g + s;
        auto weights = [&](__m512i q, __m512i h, int i) {
          const __m512i low = _mm512_and_epi32(_mm512_srli_epi32(q, 2 * s), m2);
          const __m512i high =
              _mm512_slli_epi32(_mm512_and_epi32(_mm512_srli_epi32(h, bit), one), 2);
          const __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_or_epi32(low, high), four));
          return _mm512_mul_ps(_mm512_set1_ps(scale[i]), v);
        };
        const __m512 w[2] = {weights(q0, h0, sub), weights(q1, h1, sub + 1)};
        if (s % 2 == 0) {
          f(Set<0>{}, 4 * g + s, w);
        } else {
          f(Set<1>{}, 4 * g + s, w);
        }
      }
    }
  }
};

}  // namespace
}  // namespace onepass::cpu::avx512
ONEPASS_AVX512_END

namespace onepass::cpu {

RowKernels kquant_low_row_kernels(DType w, Isa isa) {
  return pick_row_kernels(w, isa,
                          {
                              {DType::q2_k, avx512::weight_block_kernels<avx512::Q2_K>(),
                               avx2::weight_block_kernels<avx2::Q2_K>()},
                              {DType::q3_k, avx512::weight_block_kernels<avx512::Q3_K>(),
                               avx2::weight_block_kernels<avx2::Q3_K>()},
                          });
}

}  // namespace onepass::cpu
#endif  // ONEPASS_CPU_X86
