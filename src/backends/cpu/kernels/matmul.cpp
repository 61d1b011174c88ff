// CPU kernels: mv_<W>_f32 and mm_<W>_f32 (dense and GGML block formats), and the row
// building blocks declared in quant_blocks.h, in portable, AVX2 and AVX-512 versions.
//
// Activations stay f32 throughout (no quantisation of x), so results differ from a float64
// reference only by f32 rounding and accumulation order.
#include "onepass/ops/matmul.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "../cpu_kernels.h"
#include "../cpu_launch.h"
#include "float_types.h"
#include "onepass/core/error.h"
#include "onepass/ops/quant.h"
#include "quant_blocks.h"
#include "simd_x86.h"

namespace onepass::cpu {
namespace {

// ---------------------------------------------------------------------------------------
// Portable versions: decode into a small f32 buffer, then dot with 8 independent lanes
// (which the compiler vectorises for the baseline ISA).
// ---------------------------------------------------------------------------------------

template <typename Block>
void decode_blocks(const uint8_t* w, int64_t first_value, int64_t count, int block_elems,
                   float* dst) {
  for (int64_t v = 0; v < count; v += block_elems) {
    Block block;  // copied: rows need not be aligned for Block
    std::memcpy(&block, w + (first_value + v) / block_elems * static_cast<int64_t>(sizeof(Block)),
                sizeof(Block));
    dequantize_block(block, dst + v);
  }
}

// Values [first, first + count) of a weight row as f32; for block formats both are whole
// blocks.
template <DType W>
void decode_range(const void* row, int64_t first, int64_t count, float* dst) {
  const auto* w = static_cast<const uint8_t*>(row);
  if constexpr (W == DType::f32) {
    std::memcpy(dst, w + first * 4, static_cast<size_t>(count) * 4);
  } else if constexpr (W == DType::f16 || W == DType::bf16) {
    for (int64_t j = 0; j < count; ++j) {
      uint16_t bits;
      std::memcpy(&bits, w + (first + j) * 2, 2);
      dst[j] = Elem<W>::load(bits);
    }
  } else if constexpr (W == DType::q4_0) {
    decode_blocks<BlockQ4_0>(w, first, count, 32, dst);
  } else if constexpr (W == DType::q4_1) {
    decode_blocks<BlockQ4_1>(w, first, count, 32, dst);
  } else if constexpr (W == DType::q8_0) {
    decode_blocks<BlockQ8_0>(w, first, count, 32, dst);
  } else if constexpr (W == DType::q4_k) {
    decode_blocks<BlockQ4_K>(w, first, count, 256, dst);
  } else if constexpr (W == DType::q5_k) {
    decode_blocks<BlockQ5_K>(w, first, count, 256, dst);
  } else {
    static_assert(W == DType::q6_k);
    decode_blocks<BlockQ6_K>(w, first, count, 256, dst);
  }
}

template <DType W>
void portable_decode(const void* row, int64_t k, float* dst) {
  decode_range<W>(row, 0, k, dst);
}

template <DType W>
void portable_dot(const void* row, const float* x, int64_t x_stride, int64_t m, int64_t k,
                  float* out, int64_t out_stride) {
  constexpr int64_t kRows = ops::kMatmulMvMaxRows;
  if (m > kRows) {  // any m works; the op passes at most kRows
    portable_dot<W>(row, x + kRows * x_stride, x_stride, m - kRows, k, out + kRows * out_stride,
                    out_stride);
    m = kRows;
  }
  constexpr int64_t kChunk = 256;  // a multiple of every block size
  float acc[kRows][8] = {};
  float tail[kRows] = {};
  float w[kChunk];
  for (int64_t c = 0; c < k; c += kChunk) {
    const int64_t len = std::min(kChunk, k - c);
    decode_range<W>(row, c, len, w);
    const int64_t vec = len / 8 * 8;
    for (int64_t i = 0; i < m; ++i) {
      const float* xr = x + i * x_stride + c;
      for (int64_t j = 0; j < vec; j += 8) {
        for (int l = 0; l < 8; ++l) acc[i][l] += xr[j + l] * w[j + l];
      }
      for (int64_t j = vec; j < len; ++j) tail[i] += xr[j] * w[j];
    }
  }
  for (int64_t i = 0; i < m; ++i) {
    const float* a = acc[i];
    out[i * out_stride] =
        ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7])) + tail[i];
  }
}

void portable_gemm(const float* const* x_rows, int64_t m, const float* w, int64_t w_stride,
                   int64_t n, int64_t k, float* const* out_rows) {
  const int64_t vec = k / 8 * 8;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const float* xr = x_rows[i];
      const float* wr = w + j * w_stride;
      float acc[8] = {};
      for (int64_t c = 0; c < vec; c += 8) {
        for (int l = 0; l < 8; ++l) acc[l] += xr[c + l] * wr[c + l];
      }
      float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
      for (int64_t c = vec; c < k; ++c) sum += xr[c] * wr[c];
      out_rows[i][j] = sum;
    }
  }
}

template <DType W>
constexpr RowKernels portable_row_kernels() {
  return {portable_dot<W>, portable_decode<W>};
}

inline float half_at(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return kHalfToFloat[bits];
}

// ---------------------------------------------------------------------------------------
// AVX2 + FMA + F16C versions. Everything in this region is compiled for those extensions
// and only called after isa_supported() has checked the CPU.
// ---------------------------------------------------------------------------------------
#if ONEPASS_CPU_X86
ONEPASS_AVX2_BEGIN

namespace avx2 {

using simd::hsum;
using simd::load_half;

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

// How a format's sub-block of 32 decoded values v[0..3] turns into weights.
enum class Combine {
  scale,         // w = s0 * v
  scale_offset,  // w = s0 * v + s1
  two_scales,    // w = s0 * v for v[0..1], s1 * v for v[2..3] (two 16-value sub-blocks)
};

// Each format decodes one block and calls f(sub, v, s0, s1) for each run of 32 values
// (sub = index of the run within the block).
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

// The 8 scales d·sc and 8 offsets -(dmin·mn) of a q4_k/q5_k block as floats, computed
// together: the packed 6-bit fields (kquant_scale_min) are unpacked four at a time in
// 32-bit words, then converted and scaled as one vector. Products round exactly as the
// scalar decoder's.
inline __m256 packed_u8_to_f32(uint32_t lo, uint32_t hi) {
  const __m128i bytes = _mm_set_epi32(0, 0, static_cast<int>(hi), static_cast<int>(lo));
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
}

inline void kquant_scales(const uint8_t* b, float* scale, float* offset) {
  uint32_t w[3];
  std::memcpy(w, b + 4, 12);
  const uint32_t sc_lo = w[0] & 0x3f3f3f3fu;
  const uint32_t mn_lo = w[1] & 0x3f3f3f3fu;
  const uint32_t sc_hi = (w[2] & 0x0f0f0f0fu) | (((w[0] >> 6) & 0x03030303u) << 4);
  const uint32_t mn_hi = ((w[2] >> 4) & 0x0f0f0f0fu) | (((w[1] >> 6) & 0x03030303u) << 4);
  _mm256_storeu_ps(scale,
                   _mm256_mul_ps(_mm256_set1_ps(load_half(b)), packed_u8_to_f32(sc_lo, sc_hi)));
  const __m256 neg_dmin = _mm256_set1_ps(-load_half(b + 2));
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
    const __m256 d = _mm256_set1_ps(load_half(b + 208));
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

// Dot products of one block-format row with M rows of x. Per run of 32 values and row i:
// p = Σ x·v (4 FMAs), then acc_a[i] += s0·p and acc_b[i] += s1·Σx (or s1·p' for the
// second half of a two-scale run): two accumulators per row keep the loop-carried chains
// one FMA long.
template <typename Fmt, int M>
void dot_blocks(const uint8_t* w, const float* x, int64_t x_stride, int64_t k, float* out,
                int64_t out_stride) {
  __m256 acc_a[M];
  __m256 acc_b[M];
  for (int i = 0; i < M; ++i) {
    acc_a[i] = _mm256_setzero_ps();
    acc_b[i] = _mm256_setzero_ps();
  }
  const int64_t blocks = k / Fmt::kElems;
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const float* xb = x + blk * Fmt::kElems;
    Fmt::decode(w + blk * Fmt::kBytes, [&](int sub, const __m256* v, float s0, float s1) {
      const __m256 scale0 = _mm256_set1_ps(s0);
      const __m256 scale1 = _mm256_set1_ps(s1);
      for (int i = 0; i < M; ++i) {
        const float* xr = xb + i * x_stride + 32 * sub;
        const __m256 x0 = _mm256_loadu_ps(xr);
        const __m256 x1 = _mm256_loadu_ps(xr + 8);
        const __m256 x2 = _mm256_loadu_ps(xr + 16);
        const __m256 x3 = _mm256_loadu_ps(xr + 24);
        if constexpr (Fmt::kCombine == Combine::two_scales) {
          const __m256 p0 = _mm256_fmadd_ps(x1, v[1], _mm256_mul_ps(x0, v[0]));
          const __m256 p1 = _mm256_fmadd_ps(x3, v[3], _mm256_mul_ps(x2, v[2]));
          acc_a[i] = _mm256_fmadd_ps(scale0, p0, acc_a[i]);
          acc_b[i] = _mm256_fmadd_ps(scale1, p1, acc_b[i]);
        } else {
          const __m256 p = _mm256_fmadd_ps(
              x3, v[3],
              _mm256_fmadd_ps(x2, v[2], _mm256_fmadd_ps(x1, v[1], _mm256_mul_ps(x0, v[0]))));
          acc_a[i] = _mm256_fmadd_ps(scale0, p, acc_a[i]);
          if constexpr (Fmt::kCombine == Combine::scale_offset) {
            const __m256 sx = _mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3));
            acc_b[i] = _mm256_fmadd_ps(scale1, sx, acc_b[i]);
          }
        }
      }
    });
  }
  for (int i = 0; i < M; ++i) out[i * out_stride] = hsum(_mm256_add_ps(acc_a[i], acc_b[i]));
}

template <typename Fmt>
void decode_blocks_avx2(const void* row, int64_t k, float* dst) {
  const auto* w = static_cast<const uint8_t*>(row);
  for (int64_t blk = 0; blk < k / Fmt::kElems; ++blk) {
    float* o = dst + blk * Fmt::kElems;
    Fmt::decode(w + blk * Fmt::kBytes, [&](int sub, const __m256* v, float s0, float s1) {
      const __m256 scale0 = _mm256_set1_ps(s0);
      const __m256 scale1 = _mm256_set1_ps(s1);
      for (int j = 0; j < 4; ++j) {
        __m256 value;
        if constexpr (Fmt::kCombine == Combine::scale) {
          value = _mm256_mul_ps(scale0, v[j]);
        } else if constexpr (Fmt::kCombine == Combine::scale_offset) {
          value = _mm256_add_ps(_mm256_mul_ps(scale0, v[j]), scale1);
        } else {
          value = _mm256_mul_ps(j < 2 ? scale0 : scale1, v[j]);
        }
        _mm256_storeu_ps(o + 32 * sub + 8 * j, value);
      }
    });
  }
}

// 8 dense weights at w[j..j+8) as f32.
template <DType W>
inline __m256 load_dense(const uint8_t* w, int64_t j) {
  if constexpr (W == DType::f32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(w) + j);
  } else if constexpr (W == DType::f16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * j)));
  } else {
    const __m256i wide =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * j)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
}

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

template <DType W, int M>
void dot_dense(const uint8_t* w, const float* x, int64_t x_stride, int64_t k, float* out,
               int64_t out_stride) {
  __m256 acc_a[M];
  __m256 acc_b[M];
  for (int i = 0; i < M; ++i) {
    acc_a[i] = _mm256_setzero_ps();
    acc_b[i] = _mm256_setzero_ps();
  }
  int64_t j = 0;
  for (; j + 16 <= k; j += 16) {
    const __m256 v0 = load_dense<W>(w, j);
    const __m256 v1 = load_dense<W>(w, j + 8);
    for (int i = 0; i < M; ++i) {
      const float* xr = x + i * x_stride + j;
      acc_a[i] = _mm256_fmadd_ps(_mm256_loadu_ps(xr), v0, acc_a[i]);
      acc_b[i] = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 8), v1, acc_b[i]);
    }
  }
  if (j + 8 <= k) {
    const __m256 v0 = load_dense<W>(w, j);
    for (int i = 0; i < M; ++i)
      acc_a[i] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i * x_stride + j), v0, acc_a[i]);
    j += 8;
  }
  for (int i = 0; i < M; ++i) {
    float sum = hsum(_mm256_add_ps(acc_a[i], acc_b[i]));
    for (int64_t t = j; t < k; ++t) sum += x[i * x_stride + t] * load_dense_one<W>(w, t);
    out[i * out_stride] = sum;
  }
}

template <DType W>
void decode_dense_avx2(const void* row, int64_t k, float* dst) {
  const auto* w = static_cast<const uint8_t*>(row);
  int64_t j = 0;
  for (; j + 8 <= k; j += 8) _mm256_storeu_ps(dst + j, load_dense<W>(w, j));
  for (; j < k; ++j) dst[j] = load_dense_one<W>(w, j);
}

template <typename Fmt>
struct BlockRows {
  template <int M>
  static void dot(const uint8_t* w, const float* x, int64_t xs, int64_t k, float* out, int64_t os) {
    dot_blocks<Fmt, M>(w, x, xs, k, out, os);
  }
};

template <DType W>
struct DenseRows {
  template <int M>
  static void dot(const uint8_t* w, const float* x, int64_t xs, int64_t k, float* out, int64_t os) {
    dot_dense<W, M>(w, x, xs, k, out, os);
  }
};

// Up to 4 rows of x share one decode of the weight row; more rows take a second pass
// (more accumulators would not fit in the 16 vector registers).
template <typename Rows>
void dot_rows(const void* row, const float* x, int64_t x_stride, int64_t m, int64_t k, float* out,
              int64_t out_stride) {
  const auto* w = static_cast<const uint8_t*>(row);
  while (m > 0) {
    const int64_t take = std::min<int64_t>(m, 4);
    switch (take) {
      case 1:
        Rows::template dot<1>(w, x, x_stride, k, out, out_stride);
        break;
      case 2:
        Rows::template dot<2>(w, x, x_stride, k, out, out_stride);
        break;
      case 3:
        Rows::template dot<3>(w, x, x_stride, k, out, out_stride);
        break;
      default:
        Rows::template dot<4>(w, x, x_stride, k, out, out_stride);
        break;
    }
    m -= take;
    x += take * x_stride;
    out += take * out_stride;
  }
}

// One output element: a single accumulator over k in steps of 8, then the horizontal sum,
// then the scalar tail, whichever tile shape computed it.
template <int MR, int NR>
inline void gemm_tile(const float* const* x_rows, const float* w, int64_t w_stride, int64_t k,
                      float* const* out_rows, int64_t n0) {
  __m256 acc[MR][NR];
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  const int64_t vec = k / 8 * 8;
  for (int64_t c = 0; c < vec; c += 8) {
    __m256 wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = _mm256_loadu_ps(w + (n0 + j) * w_stride + c);
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_loadu_ps(x_rows[i] + c);
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      const float* wr = w + (n0 + j) * w_stride;
      float sum = hsum(acc[i][j]);
      for (int64_t c = vec; c < k; ++c) sum += x_rows[i][c] * wr[c];
      out_rows[i][n0 + j] = sum;
    }
  }
}

void gemm(const float* const* x_rows, int64_t m, const float* w, int64_t w_stride, int64_t n,
          int64_t k, float* const* out_rows) {
  // 2 x 4 accumulators + 4 weight vectors + one x vector fit the 16 registers.
  constexpr int kMr = 2;
  constexpr int kNr = 4;
  int64_t i = 0;
  for (; i + kMr <= m; i += kMr) {
    int64_t j = 0;
    for (; j + kNr <= n; j += kNr) gemm_tile<kMr, kNr>(x_rows + i, w, w_stride, k, out_rows + i, j);
    for (; j < n; ++j) gemm_tile<kMr, 1>(x_rows + i, w, w_stride, k, out_rows + i, j);
  }
  for (; i < m; ++i) {
    int64_t j = 0;
    for (; j + kNr <= n; j += kNr) gemm_tile<1, kNr>(x_rows + i, w, w_stride, k, out_rows + i, j);
    for (; j < n; ++j) gemm_tile<1, 1>(x_rows + i, w, w_stride, k, out_rows + i, j);
  }
}

template <DType W>
RowKernels row_kernels_for() {
  if constexpr (W == DType::f32 || W == DType::f16 || W == DType::bf16) {
    return {dot_rows<DenseRows<W>>, decode_dense_avx2<W>};
  } else if constexpr (W == DType::q4_0) {
    return {dot_rows<BlockRows<FmtQ4_0>>, decode_blocks_avx2<FmtQ4_0>};
  } else if constexpr (W == DType::q4_1) {
    return {dot_rows<BlockRows<FmtQ4_1>>, decode_blocks_avx2<FmtQ4_1>};
  } else if constexpr (W == DType::q8_0) {
    return {dot_rows<BlockRows<FmtQ8_0>>, decode_blocks_avx2<FmtQ8_0>};
  } else if constexpr (W == DType::q4_k) {
    return {dot_rows<BlockRows<FmtKAsym<false>>>, decode_blocks_avx2<FmtKAsym<false>>};
  } else if constexpr (W == DType::q5_k) {
    return {dot_rows<BlockRows<FmtKAsym<true>>>, decode_blocks_avx2<FmtKAsym<true>>};
  } else {
    return {dot_rows<BlockRows<FmtQ6_K>>, decode_blocks_avx2<FmtQ6_K>};
  }
}

}  // namespace avx2

ONEPASS_AVX2_END

// ---------------------------------------------------------------------------------------
// AVX-512F versions. The 4-bit formats decode through a 16-entry table of the block's
// weight values (vpermps picks an entry by the low 4 bits of each lane); q8_0 converts
// integers to floats. Each decoder hands out the final f32 weights, 32 at a time, so the
// dot products are plain FMAs.
// ---------------------------------------------------------------------------------------
ONEPASS_AVX512_BEGIN

namespace avx512 {

using simd::load_half;

// Accumulator set of a run: runs alternate between two sets so that consecutive runs do
// not wait on each other's FMA.
template <int kSet>
using Set = std::integral_constant<int, kSet>;

inline __m512 iota16(float first) {
  return _mm512_add_ps(_mm512_set1_ps(first),
                       _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}

inline __m512i bytes_u32(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Each Fmt::decode<kSet>(block, f) calls f(Set<s>, run, w0, w1) for every run of 32
// values: w0 = weights 32 run + 0..15, w1 = 32 run + 16..31.
struct Q4_0 {
  static constexpr int kElems = 32;
  static constexpr int kBytes = 18;
  template <int kSet, typename F>
  static void decode(const uint8_t* b, F&& f) {
    const __m512 table = _mm512_mul_ps(_mm512_set1_ps(half_at(b)), iota16(-8.0f));  // d * (q - 8)
    const __m512i idx = bytes_u32(b + 2);
    f(Set<kSet>{}, 0, _mm512_permutexvar_ps(idx, table),
      _mm512_permutexvar_ps(_mm512_srli_epi32(idx, 4), table));
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
    f(Set<kSet>{}, 0, _mm512_permutexvar_ps(idx, table),
      _mm512_permutexvar_ps(_mm512_srli_epi32(idx, 4), table));
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
    f(Set<kSet>{}, 0, values(0), values(16));
  }
};

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
      f(set, sub, _mm512_permutexvar_ps(q0, table), _mm512_permutexvar_ps(q1, table));
    };
    for (int p = 0; p < 4; ++p) {
      const __m512i q0 = bytes_u32(qs + 32 * p);
      const __m512i q1 = bytes_u32(qs + 32 * p + 16);
      run(Set<0>{}, 2 * p, q0, q1);
      run(Set<1>{}, 2 * p + 1, _mm512_srli_epi32(q0, 4), _mm512_srli_epi32(q1, 4));
    }
  }
};

// Dot products of one block-format row with M rows of x; two accumulators per row and
// set (up to 2 rows use both sets, more rows have enough independent chains with one).
template <typename Fmt, int M>
void dot_blocks(const uint8_t* w, const float* x, int64_t x_stride, int64_t k, float* out,
                int64_t out_stride) {
  constexpr int kSets = M <= 2 ? 2 : 1;
  __m512 acc[M][2 * kSets];
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < 2 * kSets; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  const int64_t blocks = k / Fmt::kElems;
  auto body = [&](const float* xb) {
    return [&, xb](auto set, int sub, __m512 w0, __m512 w1) {
      constexpr int a = 2 * (decltype(set)::value % kSets);
      for (int i = 0; i < M; ++i) {
        const float* xr = xb + i * x_stride + 32 * sub;
        acc[i][a] = _mm512_fmadd_ps(_mm512_loadu_ps(xr), w0, acc[i][a]);
        acc[i][a + 1] = _mm512_fmadd_ps(_mm512_loadu_ps(xr + 16), w1, acc[i][a + 1]);
      }
    };
  };
  int64_t blk = 0;
  for (; blk + 2 <= blocks; blk += 2) {
    Fmt::template decode<0>(w + blk * Fmt::kBytes, body(x + blk * Fmt::kElems));
    Fmt::template decode<1>(w + (blk + 1) * Fmt::kBytes, body(x + (blk + 1) * Fmt::kElems));
  }
  if (blk < blocks) Fmt::template decode<0>(w + blk * Fmt::kBytes, body(x + blk * Fmt::kElems));
  for (int i = 0; i < M; ++i) {
    __m512 sum = _mm512_add_ps(acc[i][0], acc[i][1]);
    if constexpr (kSets == 2) sum = _mm512_add_ps(sum, _mm512_add_ps(acc[i][2], acc[i][3]));
    out[i * out_stride] = _mm512_reduce_add_ps(sum);
  }
}

template <typename Fmt>
void decode_blocks(const void* row, int64_t k, float* dst) {
  const auto* w = static_cast<const uint8_t*>(row);
  for (int64_t blk = 0; blk < k / Fmt::kElems; ++blk) {
    float* o = dst + blk * Fmt::kElems;
    Fmt::template decode<0>(w + blk * Fmt::kBytes, [&](auto, int sub, __m512 w0, __m512 w1) {
      _mm512_storeu_ps(o + 32 * sub, w0);
      _mm512_storeu_ps(o + 32 * sub + 16, w1);
    });
  }
}

template <DType W>
inline __m512 load_dense(const uint8_t* w, int64_t j) {
  if constexpr (W == DType::f32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(w) + j);
  } else if constexpr (W == DType::f16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2 * j)));
  } else {
    const __m512i wide =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2 * j)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
}

template <DType W, int M>
void dot_dense(const uint8_t* w, const float* x, int64_t x_stride, int64_t k, float* out,
               int64_t out_stride) {
  __m512 acc_a[M];
  __m512 acc_b[M];
  for (int i = 0; i < M; ++i) {
    acc_a[i] = _mm512_setzero_ps();
    acc_b[i] = _mm512_setzero_ps();
  }
  int64_t j = 0;
  for (; j + 32 <= k; j += 32) {
    const __m512 v0 = load_dense<W>(w, j);
    const __m512 v1 = load_dense<W>(w, j + 16);
    for (int i = 0; i < M; ++i) {
      const float* xr = x + i * x_stride + j;
      acc_a[i] = _mm512_fmadd_ps(_mm512_loadu_ps(xr), v0, acc_a[i]);
      acc_b[i] = _mm512_fmadd_ps(_mm512_loadu_ps(xr + 16), v1, acc_b[i]);
    }
  }
  if (j + 16 <= k) {
    const __m512 v0 = load_dense<W>(w, j);
    for (int i = 0; i < M; ++i)
      acc_a[i] = _mm512_fmadd_ps(_mm512_loadu_ps(x + i * x_stride + j), v0, acc_a[i]);
    j += 16;
  }
  for (int i = 0; i < M; ++i) {
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc_a[i], acc_b[i]));
    for (int64_t t = j; t < k; ++t) sum += x[i * x_stride + t] * avx2::load_dense_one<W>(w, t);
    out[i * out_stride] = sum;
  }
}

template <DType W>
void decode_dense(const void* row, int64_t k, float* dst) {
  const auto* w = static_cast<const uint8_t*>(row);
  int64_t j = 0;
  for (; j + 16 <= k; j += 16) _mm512_storeu_ps(dst + j, load_dense<W>(w, j));
  for (; j < k; ++j) dst[j] = avx2::load_dense_one<W>(w, j);
}

// Up to 8 rows of x per decode of the weight row: the 32 vector registers hold their
// accumulators.
template <typename Dot>
void dot_rows(const void* row, const float* x, int64_t x_stride, int64_t m, int64_t k, float* out,
              int64_t out_stride) {
  const auto* w = static_cast<const uint8_t*>(row);
  while (m > 0) {
    const int64_t take = std::min<int64_t>(m, 8);
    switch (take) {
      case 1:
        Dot::template dot<1>(w, x, x_stride, k, out, out_stride);
        break;
      case 2:
        Dot::template dot<2>(w, x, x_stride, k, out, out_stride);
        break;
      case 3:
        Dot::template dot<3>(w, x, x_stride, k, out, out_stride);
        break;
      case 4:
        Dot::template dot<4>(w, x, x_stride, k, out, out_stride);
        break;
      case 5:
        Dot::template dot<5>(w, x, x_stride, k, out, out_stride);
        break;
      case 6:
        Dot::template dot<6>(w, x, x_stride, k, out, out_stride);
        break;
      case 7:
        Dot::template dot<7>(w, x, x_stride, k, out, out_stride);
        break;
      default:
        Dot::template dot<8>(w, x, x_stride, k, out, out_stride);
        break;
    }
    m -= take;
    x += take * x_stride;
    out += take * out_stride;
  }
}

template <typename Fmt>
struct BlockRows {
  template <int M>
  static void dot(const uint8_t* w, const float* x, int64_t xs, int64_t k, float* out, int64_t os) {
    dot_blocks<Fmt, M>(w, x, xs, k, out, os);
  }
};

template <DType W>
struct DenseRows {
  template <int M>
  static void dot(const uint8_t* w, const float* x, int64_t xs, int64_t k, float* out, int64_t os) {
    dot_dense<W, M>(w, x, xs, k, out, os);
  }
};

template <DType W>
RowKernels row_kernels_for() {
  if constexpr (W == DType::f32 || W == DType::f16 || W == DType::bf16) {
    return {dot_rows<DenseRows<W>>, decode_dense<W>};
  } else if constexpr (W == DType::q4_0) {
    return {dot_rows<BlockRows<Q4_0>>, decode_blocks<Q4_0>};
  } else if constexpr (W == DType::q4_1) {
    return {dot_rows<BlockRows<Q4_1>>, decode_blocks<Q4_1>};
  } else if constexpr (W == DType::q8_0) {
    return {dot_rows<BlockRows<Q8_0>>, decode_blocks<Q8_0>};
  } else if constexpr (W == DType::q4_k) {
    return {dot_rows<BlockRows<Q4_K>>, decode_blocks<Q4_K>};
  } else {
    // q5_k and q6_k spend their time assembling values from bit fields, which the 256-bit
    // code spreads over three ports on Intel cores against two for 512-bit code: the AVX2
    // kernels are as fast on Zen 4 and faster on Sapphire Rapids.
    static_assert(W == DType::q5_k || W == DType::q6_k);
    return avx2::row_kernels_for<W>();
  }
}

}  // namespace avx512

ONEPASS_AVX512_END
#endif  // ONEPASS_CPU_X86

// ---------------------------------------------------------------------------------------
// Tables and the kernels.
// ---------------------------------------------------------------------------------------

using KernelTable = std::array<RowKernels, kDTypeCount>;

template <Isa kIsa>
KernelTable make_table() {
  KernelTable table{};
  auto add = [&]<DType W>() {
#if ONEPASS_CPU_X86
    if constexpr (kIsa == Isa::avx2) {
      table[static_cast<size_t>(W)] = avx2::row_kernels_for<W>();
      return;
    }
    if constexpr (kIsa == Isa::avx512) {
      table[static_cast<size_t>(W)] = avx512::row_kernels_for<W>();
      return;
    }
#endif
    table[static_cast<size_t>(W)] = portable_row_kernels<W>();
  };
  add.template operator()<DType::f32>();
  add.template operator()<DType::f16>();
  add.template operator()<DType::bf16>();
  add.template operator()<DType::q4_0>();
  add.template operator()<DType::q4_1>();
  add.template operator()<DType::q8_0>();
  add.template operator()<DType::q4_k>();
  add.template operator()<DType::q5_k>();
  add.template operator()<DType::q6_k>();
  return table;
}

template <DType W>
void mv_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  const auto& a = *static_cast<const ops::MatmulArgs*>(raw);
  const DotRowsFn dot = row_kernels(W, active_isa()).dot;
  const auto* w = static_cast<const uint8_t*>(a.w);
  for (uint64_t b = first; b < end; ++b) {
    const int64_t n0 = static_cast<int64_t>(b) * kCpuMvRowsPerBlock;
    const int64_t n1 = std::min(a.n, n0 + kCpuMvRowsPerBlock);
    for (int64_t n = n0; n < n1; ++n) {
      dot(w + n * a.w_row_bytes, a.x, a.x_stride, a.m, a.k, a.out + n, a.out_stride);
    }
  }
}

template <DType W>
void mm_kernel(const void* raw, const LaunchDims& dims, uint64_t first, uint64_t end) {
  const auto& a = *static_cast<const ops::MatmulArgs*>(raw);
  const Isa isa = active_isa();
  const DecodeRowFn decode = row_kernels(W, isa).decode;
  const auto* w = static_cast<const uint8_t*>(a.w);
  const float* x_rows[kCpuMmColsPerBlock];
  float* out_rows[kCpuMmColsPerBlock];
  for (uint64_t b = first; b < end; ++b) {
    const int64_t n0 = static_cast<int64_t>(b % dims.grid.x) * kCpuMmRowsPerBlock;
    const int64_t m0 = static_cast<int64_t>(b / dims.grid.x) * kCpuMmColsPerBlock;
    const int64_t n_count = std::min(a.n - n0, kCpuMmRowsPerBlock);
    const int64_t m_count = std::min(a.m - m0, kCpuMmColsPerBlock);
    if (n_count <= 0 || m_count <= 0) continue;
    const float* tile;
    int64_t tile_stride;
    if (W == DType::f32 && a.w_row_bytes % 4 == 0) {
      tile = reinterpret_cast<const float*>(w + n0 * a.w_row_bytes);
      tile_stride = a.w_row_bytes / 4;
    } else {
      float* buffer = thread_scratch(n_count * a.k);
      for (int64_t j = 0; j < n_count; ++j)
        decode(w + (n0 + j) * a.w_row_bytes, a.k, buffer + j * a.k);
      tile = buffer;
      tile_stride = a.k;
    }
    for (int64_t i = 0; i < m_count; ++i) {
      x_rows[i] = a.x + (m0 + i) * a.x_stride;
      out_rows[i] = a.out + (m0 + i) * a.out_stride + n0;
    }
    gemm_rows_f32(x_rows, m_count, tile, tile_stride, n_count, a.k, out_rows, isa);
  }
}

}  // namespace

// Filled during static initialisation, before any kernel can run.
const float* const kHalfToFloat = [] {
  static std::array<float, 65536> table;
  for (uint32_t h = 0; h < table.size(); ++h) table[h] = f16_to_f32(static_cast<uint16_t>(h));
  return table.data();
}();

bool isa_supported(Isa isa) {
#if ONEPASS_CPU_X86
  static const bool avx2 = [] {
    __builtin_cpu_init();
#if defined(__clang__)
    // Clang cannot ask for F16C; every CPU with AVX2 and FMA has it.
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
#endif
  }();
  static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f");
  return isa == Isa::portable || (isa == Isa::avx2 && avx2) || (isa == Isa::avx512 && avx512);
#else
  return isa == Isa::portable;
#endif
}

Isa best_isa() {
  static const Isa isa = isa_supported(Isa::avx512) ? Isa::avx512
                         : isa_supported(Isa::avx2) ? Isa::avx2
                                                    : Isa::portable;
  return isa;
}

namespace {

Isa initial_isa() {
  Isa isa = best_isa();
  if (const char* cap = std::getenv("ONEPASS_CPU_ISA")) {
    const std::string_view v(cap);
    const Isa wanted = v == "portable" ? Isa::portable : v == "avx2" ? Isa::avx2 : Isa::avx512;
    check(v == "portable" || v == "avx2" || v == "avx512", "cpu",
          "ONEPASS_CPU_ISA must be portable, avx2 or avx512, got '", v, "'");
    isa = std::min(isa, wanted);
  }
  return isa;
}

std::atomic<Isa>& isa_in_use() {
  static std::atomic<Isa> isa{initial_isa()};
  return isa;
}

}  // namespace

Isa active_isa() {
  return isa_in_use().load(std::memory_order_relaxed);
}

void set_active_isa(Isa isa) {
  // Only between runs: blocks of one dispatch must all take the same path.
  check(isa_supported(isa), "cpu", "this CPU cannot run the requested instruction set");
  isa_in_use().store(isa, std::memory_order_relaxed);
}

const RowKernels& row_kernels(DType weight_type, Isa isa) {
  static const KernelTable tables[] = {make_table<Isa::portable>(), make_table<Isa::avx2>(),
                                       make_table<Isa::avx512>()};
  check(isa_supported(isa), "cpu", "row kernels for an instruction set this CPU lacks");
  const RowKernels& k = tables[static_cast<size_t>(isa)][static_cast<size_t>(weight_type)];
  check(k.dot != nullptr, "cpu", "no matmul row kernels for weight type ", dtype_name(weight_type));
  return k;
}

void gemm_rows_f32(const float* const* x_rows, int64_t m, const float* w, int64_t w_stride,
                   int64_t n, int64_t k, float* const* out_rows, Isa isa) {
#if ONEPASS_CPU_X86
  // The AVX2 GEMM serves AVX-512 machines too (the mm path is not where decode time goes).
  if (isa != Isa::portable) return avx2::gemm(x_rows, m, w, w_stride, n, k, out_rows);
#endif
  (void)isa;
  portable_gemm(x_rows, m, w, w_stride, n, k, out_rows);
}

float* thread_scratch(int64_t count) {
  thread_local std::vector<float> buffer;
  if (static_cast<int64_t>(buffer.size()) < count) buffer.resize(static_cast<size_t>(count));
  return buffer.data();
}

void register_matmul_kernels(KernelRegistry& registry) {
  auto add = [&]<DType W>() {
    const std::string w(dtype_name(W));
    registry.add(make_cpu_kernel<ops::MatmulArgs>("mv_" + w + "_f32", mv_kernel<W>));
    registry.add(make_cpu_kernel<ops::MatmulArgs>("mm_" + w + "_f32", mm_kernel<W>));
  };
  add.template operator()<DType::f32>();
  add.template operator()<DType::f16>();
  add.template operator()<DType::bf16>();
  add.template operator()<DType::q4_0>();
  add.template operator()<DType::q4_1>();
  add.template operator()<DType::q8_0>();
  add.template operator()<DType::q4_k>();
  add.template operator()<DType::q5_k>();
  add.template operator()<DType::q6_k>();
}

}  // namespace onepass::cpu
