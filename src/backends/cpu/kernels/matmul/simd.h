// SIMD traits of the matmul row kernels: one type per x86 instruction set, giving the
// vector type and the few operations the kernels of simd_rows.inl are written in.
//
// Each set gets its own namespace (avx2, avx512) inside its target region (simd_x86.h),
// and simd_rows.inl is included into both, so the shared templates are compiled once per
// set with that set's target: a template defined outside a region could not use the
// intrinsics, and one defined inside the AVX-512 region would let the compiler put
// AVX-512 instructions into the AVX2 instantiations.
//
// Include this header after every standard header the file needs: a standard template
// first defined inside a target region would take that target.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../float_types.h"
#include "../quant_blocks.h"
#include "../simd_x86.h"
#include "onepass/core/dtype.h"
#include "rows.h"

namespace onepass::cpu {

/// An f16 scale at any address, as f32 (through kHalfToFloat).
inline float half_at(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return kHalfToFloat[bits];
}

/// Dense weight w[j] (f32, f16 or bf16) as f32; the scalar tails of the SIMD kernels.
template <DType W>
inline float load_dense_one(const uint8_t* w, int64_t j) {
  if constexpr (W == DType::f32) {
    float v;
    std::memcpy(&v, w + 4 * j, 4);
    return v;
  } else {
    uint16_t bits;
    std::memcpy(&bits, w + 2 * j, 2);
    return Elem<W>::load(bits);
  }
}

}  // namespace onepass::cpu

#if ONEPASS_CPU_X86
ONEPASS_AVX2_BEGIN
namespace onepass::cpu::avx2 {

struct Avx2 {
  using V = __m256;
  static constexpr int kWidth = 8;
  // Rows of x per decode of a weight row: more share the decode, past 4 spill the 16 registers.
  static constexpr int kMaxRows = 4;

  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float s) { return _mm256_set1_ps(s); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static float hsum(V v) { return simd::hsum(v); }

  // kWidth dense weights at w[j..) as f32.
  template <DType W>
  static V load_dense(const uint8_t* w, int64_t j) {
    if constexpr (W == DType::f32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(w) + j);
    } else if constexpr (W == DType::f16) {
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * j)));
    } else {
      static_assert(W == DType::bf16);
      const __m256i wide =
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * j)));
      return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
    }
  }
};

// 8 signed / unsigned bytes (the low 8 of v) as 8 floats.
inline __m256 i8_to_f32(__m128i v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}
inline __m256 u8_to_f32(__m128i v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
}

// 32 bytes as 4 x 8 floats, in byte order.
template <bool kSigned>
inline void bytes_to_f32(__m256i bytes, __m256* v) {
  const __m128i lo = _mm256_castsi256_si128(bytes);
  const __m128i hi = _mm256_extracti128_si256(bytes, 1);
  if constexpr (kSigned) {
    v[0] = i8_to_f32(lo);
    v[1] = i8_to_f32(_mm_srli_si128(lo, 8));
    v[2] = i8_to_f32(hi);
    v[3] = i8_to_f32(_mm_srli_si128(hi, 8));
  } else {
    v[0] = u8_to_f32(lo);
    v[1] = u8_to_f32(_mm_srli_si128(lo, 8));
    v[2] = u8_to_f32(hi);
    v[3] = u8_to_f32(_mm_srli_si128(hi, 8));
  }
}

#include "simd_rows.inl"

// The row kernels of a block decoder Fmt: one that hands out integer values and scales
// (ScaledBlocks), or one that hands out the final weights (WeightBlocks).
template <typename Fmt>
constexpr RowKernels scaled_block_kernels() {
  return row_kernels_of<Avx2, ScaledBlocks<Avx2, Fmt>>();
}
template <typename Fmt>
constexpr RowKernels weight_block_kernels() {
  return row_kernels_of<Avx2, WeightBlocks<Avx2, Fmt>>();
}

}  // namespace onepass::cpu::avx2
ONEPASS_AVX2_END

ONEPASS_AVX512_BEGIN
namespace onepass::cpu::avx512 {

struct Avx512 {
  using V = __m512;
  static constexpr int kWidth = 16;
  // Rows of x per decode of a weight row: more share the decode, past 8 spill the 32 registers.
  static constexpr int kMaxRows = 8;

  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float s) { return _mm512_set1_ps(s); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static float hsum(V v) { return _mm512_reduce_add_ps(v); }

  template <DType W>
  static V load_dense(const uint8_t* w, int64_t j) {
    if constexpr (W == DType::f32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(w) + j);
    } else if constexpr (W == DType::f16) {
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2 * j)));
    } else {
      static_assert(W == DType::bf16);
      const __m512i wide =
          _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2 * j)));
      return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
    }
  }
};

// 0, 1, ..., 15 plus `first`: the quantized values of a 16-entry decode table.
inline __m512 iota16(float first) {
  return _mm512_add_ps(_mm512_set1_ps(first),
                       _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}

// 16 bytes as 16 unsigned 32-bit lanes.
inline __m512i bytes_u32(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

#include "simd_rows.inl"

// The row kernels of a block decoder Fmt that hands out the final weights (WeightBlocks).
template <typename Fmt>
constexpr RowKernels weight_block_kernels() {
  return row_kernels_of<Avx512, WeightBlocks<Avx512, Fmt>>();
}

}  // namespace onepass::cpu::avx512
ONEPASS_AVX512_END

namespace onepass::cpu {

/// The row kernels of weight type T for a 32-value block format: the AVX-512 decoder Wide
/// hands out the final weights, the AVX2 decoder Narrow integer values and scales.
template <DType T, typename Wide, typename Narrow>
SimdRowKernels block_rows() {
  return {T, avx512::weight_block_kernels<Wide>(), avx2::scaled_block_kernels<Narrow>()};
}

}  // namespace onepass::cpu
#endif  // ONEPASS_CPU_X86
