// CPU kernels: mv_affine_* and mm_affine_* (MLX affine quantized matmul), one
// instantiation per (bits, group size, scale type).
#include "../../kernel_names.h"
#include "onepass/ops/affine.h"

#include <algorithm>
#include <cstring>

#include "../cpu_kernels.h"
#include "../cpu_launch.h"
#include "float_types.h"
#include "onepass/ops/matmul.h"
#include "quant_blocks.h"
#include "simd_x86.h"

namespace onepass::cpu {
namespace {

template <uint32_t kBits, uint32_t kGroup, DType S>
struct Affine {
  static constexpr uint32_t kPerWord = 32 / kBits;
  static constexpr uint32_t kMask = (1u << kBits) - 1u;
  static constexpr int64_t kWordsPerGroup = kGroup / kPerWord;

  static float param(const void* base, int64_t index) {
    uint16_t bits;
    std::memcpy(&bits, static_cast<const uint8_t*>(base) + 2 * index, 2);
    if constexpr (S == DType::f16) return kHalfToFloat[bits];  // no branches on subnormals
    return Elem<S>::load(bits);
  }

  // Row n's packed words, scales and biases.
  struct Row {
    const uint32_t* w;
    const void* scales;
    const void* biases;
  };
  static Row row(const ops::AffineMatmulArgs& a, int64_t n) {
    return {a.w + n * a.w_stride, static_cast<const uint8_t*>(a.scales) + 2 * n * a.scale_stride,
            static_cast<const uint8_t*>(a.biases) + 2 * n * a.bias_stride};
  }

  static void decode_group(const uint32_t* w, float scale, float bias, float* dst) {
    for (uint32_t j = 0; j < kGroup; ++j) {
      const uint32_t q = (w[j / kPerWord] >> (kBits * (j % kPerWord))) & kMask;
      dst[j] = scale * static_cast<float>(q) + bias;
    }
  }

  static void decode_row(const Row& r, int64_t k, float* dst) {
    for (int64_t g = 0; g < k / kGroup; ++g) {
      decode_group(r.w + g * kWordsPerGroup, param(r.scales, g), param(r.biases, g),
                   dst + g * kGroup);
    }
  }

  // out[i * out_stride] = x_i · w_row for i < m (portable: decode a group, 8-lane dots).
  static void dot_portable(const Row& r, const float* x, int64_t x_stride, int64_t m, int64_t k,
                           float* out, int64_t out_stride) {
    constexpr int64_t kRows = ops::kMatmulMvMaxRows;
    if (m > kRows) {  // any m works; the op passes at most kRows
      dot_portable(r, x + kRows * x_stride, x_stride, m - kRows, k, out + kRows * out_stride,
                   out_stride);
      m = kRows;
    }
    float acc[kRows][8] = {};
    float w[kGroup];
    for (int64_t g = 0; g < k / kGroup; ++g) {
      decode_group(r.w + g * kWordsPerGroup, param(r.scales, g), param(r.biases, g), w);
      for (int64_t i = 0; i < m; ++i) {
        const float* xr = x + i * x_stride + g * kGroup;
        for (uint32_t j = 0; j < kGroup; j += 8) {
          for (int l = 0; l < 8; ++l) acc[i][l] += xr[j + l] * w[j + l];
        }
      }
    }
    for (int64_t i = 0; i < m; ++i) {
      const float* s = acc[i];
      out[i * out_stride] = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    }
  }
};

#if ONEPASS_CPU_X86
ONEPASS_AVX2_BEGIN
namespace avx2 {

// Each 8 weights are decoded once to f32 (w = scale * q + bias in one FMA) and multiplied
// into M rows of x; kAcc accumulators per row keep the FMA chains short when M is small.
template <uint32_t kBits, uint32_t kGroup, DType S, int M>
void dot(const typename Affine<kBits, kGroup, S>::Row& r, const float* x, int64_t x_stride,
         int64_t k, float* out, int64_t out_stride) {
  using A = Affine<kBits, kGroup, S>;
  constexpr int kAcc = M == 1 ? 4 : (M == 2 ? 2 : 1);
  constexpr int kVecs = static_cast<int>(kGroup / 8);
  __m256 acc[M][kAcc];
  for (int i = 0; i < M; ++i) {
    for (int u = 0; u < kAcc; ++u) acc[i][u] = _mm256_setzero_ps();
  }
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  const __m256i mask = _mm256_set1_epi32(static_cast<int>(A::kMask));
  for (int64_t g = 0; g < k / kGroup; ++g) {
    const __m256 scale = _mm256_set1_ps(A::param(r.scales, g));
    const __m256 bias = _mm256_set1_ps(A::param(r.biases, g));
    const uint32_t* wg = r.w + g * A::kWordsPerGroup;
    const float* xg = x + g * kGroup;
    for (int v = 0; v < kVecs; v += kAcc) {
      for (int u = 0; u < kAcc; ++u) {
        __m256i q;
        if constexpr (kBits == 4) {
          q = _mm256_and_si256(
              _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(wg[v + u])), shifts), mask);
        } else {
          q = _mm256_cvtepu8_epi32(
              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(wg + 2 * (v + u))));
        }
        const __m256 wv = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), scale, bias);
        for (int i = 0; i < M; ++i) {
          acc[i][u] =
              _mm256_fmadd_ps(_mm256_loadu_ps(xg + i * x_stride + 8 * (v + u)), wv, acc[i][u]);
        }
      }
    }
  }
  for (int i = 0; i < M; ++i) {
    __m256 sum = acc[i][0];
    for (int u = 1; u < kAcc; ++u) sum = _mm256_add_ps(sum, acc[i][u]);
    out[i * out_stride] = simd::hsum(sum);
  }
}

template <uint32_t kBits, uint32_t kGroup, DType S>
void dot_rows(const typename Affine<kBits, kGroup, S>::Row& r, const float* x, int64_t x_stride,
              int64_t m, int64_t k, float* out, int64_t out_stride) {
  while (m > 0) {
    const int64_t take = std::min<int64_t>(m, 4);
    switch (take) {
      case 1:
        dot<kBits, kGroup, S, 1>(r, x, x_stride, k, out, out_stride);
        break;
      case 2:
        dot<kBits, kGroup, S, 2>(r, x, x_stride, k, out, out_stride);
        break;
      case 3:
        dot<kBits, kGroup, S, 3>(r, x, x_stride, k, out, out_stride);
        break;
      default:
        dot<kBits, kGroup, S, 4>(r, x, x_stride, k, out, out_stride);
        break;
    }
    m -= take;
    x += take * x_stride;
    out += take * out_stride;
  }
}

}  // namespace avx2
ONEPASS_AVX2_END

ONEPASS_AVX512_BEGIN
namespace avx512 {

// 16 weights at a time: 4-bit values go through a table of the group's 16 weight values
// (scale * q + bias, indexed by the low 4 bits of each lane), 8-bit ones are converted.
template <uint32_t kBits, uint32_t kGroup, DType S, int M>
void dot(const typename Affine<kBits, kGroup, S>::Row& r, const float* x, int64_t x_stride,
         int64_t k, float* out, int64_t out_stride) {
  using A = Affine<kBits, kGroup, S>;
  constexpr int kVecs = static_cast<int>(kGroup / 16);
  constexpr int kWanted = M == 1 ? 4 : (M == 2 ? 2 : 1);
  constexpr int kAcc = kWanted < kVecs ? kWanted : kVecs;
  static_assert(kVecs % kAcc == 0);
  __m512 acc[M][kAcc];
  for (int i = 0; i < M; ++i) {
    for (int u = 0; u < kAcc; ++u) acc[i][u] = _mm512_setzero_ps();
  }
  const __m512i word_of_lane = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const __m512i shifts =
      _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t g = 0; g < k / kGroup; ++g) {
    const __m512 scale = _mm512_set1_ps(A::param(r.scales, g));
    const __m512 bias = _mm512_set1_ps(A::param(r.biases, g));
    const __m512 table = _mm512_fmadd_ps(iota, scale, bias);
    const uint32_t* wg = r.w + g * A::kWordsPerGroup;
    const float* xg = x + g * kGroup;
    for (int v = 0; v < kVecs; v += kAcc) {
      for (int u = 0; u < kAcc; ++u) {
        __m512 wv;
        if constexpr (kBits == 4) {
          const __m128i two = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(wg + 2 * (v + u)));
          const __m512i words = _mm512_permutexvar_epi32(word_of_lane, _mm512_zextsi128_si512(two));
          wv = _mm512_permutexvar_ps(_mm512_srlv_epi32(words, shifts), table);
        } else {
          const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wg + 4 * (v + u)));
          wv = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes)), scale, bias);
        }
        for (int i = 0; i < M; ++i) {
          acc[i][u] =
              _mm512_fmadd_ps(_mm512_loadu_ps(xg + i * x_stride + 16 * (v + u)), wv, acc[i][u]);
        }
      }
    }
  }
  for (int i = 0; i < M; ++i) {
    __m512 sum = acc[i][0];
    for (int u = 1; u < kAcc; ++u) sum = _mm512_add_ps(sum, acc[i][u]);
    out[i * out_stride] = _mm512_reduce_add_ps(sum);
  }
}

template <uint32_t kBits, uint32_t kGroup, DType S>
void dot_rows(const typename Affine<kBits, kGroup, S>::Row& r, const float* x, int64_t x_stride,
              int64_t m, int64_t k, float* out, int64_t out_stride) {
  while (m > 0) {
    const int64_t take = std::min<int64_t>(m, 4);
    switch (take) {
      case 1:
        dot<kBits, kGroup, S, 1>(r, x, x_stride, k, out, out_stride);
        break;
      case 2:
        dot<kBits, kGroup, S, 2>(r, x, x_stride, k, out, out_stride);
        break;
      case 3:
        dot<kBits, kGroup, S, 3>(r, x, x_stride, k, out, out_stride);
        break;
      default:
        dot<kBits, kGroup, S, 4>(r, x, x_stride, k, out, out_stride);
        break;
    }
    m -= take;
    x += take * x_stride;
    out += take * out_stride;
  }
}

}  // namespace avx512
ONEPASS_AVX512_END
#endif

template <uint32_t kBits, uint32_t kGroup, DType S>
void mv_affine(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  using A = Affine<kBits, kGroup, S>;
  const auto& a = *static_cast<const ops::AffineMatmulArgs*>(raw);
  const Isa isa = active_isa();
  for (uint64_t b = first; b < end; ++b) {
    const int64_t n0 = static_cast<int64_t>(b) * kCpuMvRowsPerBlock;
    const int64_t n1 = std::min(a.n, n0 + kCpuMvRowsPerBlock);
    for (int64_t n = n0; n < n1; ++n) {
      const typename A::Row r = A::row(a, n);
#if ONEPASS_CPU_X86
      if (isa >= Isa::avx512) {
        avx512::dot_rows<kBits, kGroup, S>(r, a.x, a.x_stride, a.m, a.k, a.out + n, a.out_stride);
        continue;
      }
      if (isa == Isa::avx2) {
        avx2::dot_rows<kBits, kGroup, S>(r, a.x, a.x_stride, a.m, a.k, a.out + n, a.out_stride);
        continue;
      }
#endif
      A::dot_portable(r, a.x, a.x_stride, a.m, a.k, a.out + n, a.out_stride);
    }
  }
}

template <uint32_t kBits, uint32_t kGroup, DType S>
void mm_affine(const void* raw, const LaunchDims& dims, uint64_t first, uint64_t end) {
  using A = Affine<kBits, kGroup, S>;
  const auto& a = *static_cast<const ops::AffineMatmulArgs*>(raw);
  const Isa isa = active_isa();
  const float* x_rows[kCpuMmColsPerBlock];
  float* out_rows[kCpuMmColsPerBlock];
  for (uint64_t b = first; b < end; ++b) {
    const int64_t n0 = static_cast<int64_t>(b % dims.grid.x) * kCpuMmRowsPerBlock;
    const int64_t m0 = static_cast<int64_t>(b / dims.grid.x) * kCpuMmColsPerBlock;
    const int64_t n_count = std::min(a.n - n0, kCpuMmRowsPerBlock);
    const int64_t m_count = std::min(a.m - m0, kCpuMmColsPerBlock);
    if (n_count <= 0 || m_count <= 0) continue;
    float* tile = thread_scratch(n_count * a.k);
    for (int64_t j = 0; j < n_count; ++j) A::decode_row(A::row(a, n0 + j), a.k, tile + j * a.k);
    for (int64_t i = 0; i < m_count; ++i) {
      x_rows[i] = a.x + (m0 + i) * a.x_stride;
      out_rows[i] = a.out + (m0 + i) * a.out_stride + n0;
    }
    gemm_rows_f32(x_rows, m_count, tile, a.k, n_count, a.k, out_rows, isa);
  }
}

template <uint32_t kBits, uint32_t kGroup>
void register_group(KernelRegistry& registry) {
  for_each_float_type([&]<DType S>() {
    if constexpr (S != DType::f32) {
      AffineFormat format;
      format.bits = kBits;
      format.group_size = kGroup;
      format.scale_type = S;
      registry.add(make_cpu_kernel<ops::AffineMatmulArgs>(affine_kernel_name(true, format.bits, format.group_size, format.scale_type),
                                                          mv_affine<kBits, kGroup, S>));
      registry.add(make_cpu_kernel<ops::AffineMatmulArgs>(affine_kernel_name(false, format.bits, format.group_size, format.scale_type),
                                                          mm_affine<kBits, kGroup, S>));
    }
  });
}

}  // namespace

void register_affine_kernels(KernelRegistry& registry) {
  register_group<4, 32>(registry);
  register_group<4, 64>(registry);
  register_group<4, 128>(registry);
  register_group<8, 32>(registry);
  register_group<8, 64>(registry);
  register_group<8, 128>(registry);
}

}  // namespace onepass::cpu
