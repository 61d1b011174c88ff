// Integer row kernels of the 32-value block formats q4_0, q4_1, q5_0, q5_1, q8_0 and iq4_nl
// for x rounded to 16-bit integers per group of 256 values (XInt16), and the rounding
// itself: weights as their 16-bit integer values, the block's exact integer sum scaled once
// in f32.
//
// Isa::avx512_vnni: one vpdpwssd per 32-value block. Decoding a 4-bit block this way takes
// three instructions (a broadcast load, a GF(2) affine byte transform that both extracts the
// nibbles and sign-extends q - 8, a widening move) where the f32 path builds a 16-entry table
// and picks from it twice; the f32 FMAs per block go from two to one. q5_0 and q5_1 add the
// fifth bits with one byte addition masked by the block's 32-bit qh; iq4_nl maps its nibbles
// to the grid (kIq4Values) with one byte shuffle. With one row of x, the formats but q8_0 go
// through four weight rows at a time (dot_weight_rows).
//
// Isa::avx2: two vpmaddwd per block (16 values each) and one f32 FMA, where the f32 path
// converts the block's 32 values to f32 and multiplies them in four FMAs per row of x. With
// one row of x, all six formats go through four weight rows at a time (dot_weight_rows).
//
// No 32-bit lane overflows: a lane of a block's integer sum (2 products per lane with
// vpdpwssd from zero, 4 with avx2's two vpmaddwd added) adds at most 4 products of a weight
// integer, at most 128 in magnitude (q8_0; 127 for iq4_nl's grid, 31 for q5_1, 16 for q5_0,
// 15 for q4_1, 8 for q4_0), and an x integer (|x| <= 32767): below 4 · 128 · 32767 < 2^24.
//
// The x error this adds is at most 2^-16 of its group's largest |x| per value, about 250
// times below the 8-bit blocks llama.cpp uses.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "onepass/core/error.h"
#include "onepass/ops/quant.h"
#include "rows.h"
#include "simd.h"

namespace onepass::cpu {
namespace {

// Bytes of one row of rounded x: k int16 values, then the group scales and block sums
// (f32), rounded up to whole cache lines so that every row's values start 64-byte aligned.
int64_t x_row_bytes(int64_t k) {
  const int64_t groups = (k + kXInt16Group - 1) / kXInt16Group;
  const int64_t bytes = 2 * k + 4 * (groups + k / 32);
  return (bytes + 63) / 64 * 64;
}

// How far ahead of the weights being read dot_weight_rows_r asks for them (bytes along each
// row and the rows that follow it): the R rows are read side by side, R streams a few
// hundred bytes long each for the small products, which the hardware prefetchers do not
// pick up as they do one long stream.
constexpr int64_t kPrefetchBytes = 4096;

// Past this many bytes ahead (four q4_0 rows of 8192 values, four q8_0 rows of 4096) the
// weights are asked into L2 rather than L1: a lead that long, with x (2 bytes per value,
// 16 KiB for 8192 values), is more than L1 holds, and x would be pushed out before its next
// use. Measured on 2048 x 8192 q4_0 with 2 threads: the L2 hint streams the weights from
// DRAM 1.5 times as fast; on rows of 2048 values the L1 hint is faster.
constexpr int64_t kPrefetchL1MaxBytes = 16384;

}  // namespace
}  // namespace onepass::cpu

#if ONEPASS_CPU_X86
ONEPASS_AVX512_VNNI_BEGIN
namespace onepass::cpu::avx512_vnni {
namespace {

// The GF(2) matrix of vgf2p8affineqb (one per qword) whose output bit i is input bit
// `shift` + min(i, 3): the nibble at `shift` moved to bits 0..3, its top bit copied into
// bits 4..7. With the constant 0xF8 (flipping bits 3..7) that is q - 8 as a signed byte;
// with `sign` false bits 4..7 stay zero and the constant is 0 (q itself).
constexpr long long nibble_matrix(int shift, bool sign) {
  unsigned long long m = 0;
  for (int i = 0; i < (sign ? 8 : 4); ++i) {
    m |= (1ull << (shift + std::min(i, 3))) << (8 * (7 - i));
  }
  return static_cast<long long>(m);
}

// 32 weights of a 4-bit block (16 bytes at q, byte j: value j low, value j + 16 high) as
// 16-bit integers in value order: q - 8 when kSigned, else q.
template <bool kSigned>
inline __m512i nibble_values(const uint8_t* q) {
  const __m256i raw =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  const __m256i matrix = _mm256_setr_epi64x(nibble_matrix(0, kSigned), nibble_matrix(0, kSigned),
                                            nibble_matrix(4, kSigned), nibble_matrix(4, kSigned));
  return _mm512_cvtepi8_epi16(_mm256_gf2p8affine_epi64_epi8(raw, matrix, kSigned ? 0xF8 : 0));
}

// The 32 nibbles of 16 bytes at q (as nibble_values) as bytes in value order.
inline __m256i nibble_values_u8(const uint8_t* q) {
  const __m256i raw =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  const __m256i matrix = _mm256_setr_epi64x(nibble_matrix(0, false), nibble_matrix(0, false),
                                            nibble_matrix(4, false), nibble_matrix(4, false));
  return _mm256_gf2p8affine_epi64_epi8(raw, matrix, 0);
}

// Block formats: the block's 32 integer values, its scale d and (kOffset) its additive m:
// weight j = d * values[j] (+ m).
struct Q4_0 {
  static constexpr int64_t kBytes = 18;
  static constexpr bool kOffset = false;
  static __m512i values(const uint8_t* b) { return nibble_values<true>(b + 2); }
  static float offset(const uint8_t*) { return 0.0f; }
};

struct Q4_1 {
  static constexpr int64_t kBytes = 20;
  static constexpr bool kOffset = true;
  static __m512i values(const uint8_t* b) { return nibble_values<false>(b + 4); }
  static float offset(const uint8_t* b) { return half_at(b + 2); }
};

struct Q8_0 {
  static constexpr int64_t kBytes = 34;
  static constexpr bool kOffset = false;
  static __m512i values(const uint8_t* b) {
    return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)));
  }
  static float offset(const uint8_t*) { return 0.0f; }
};

// 32 weights of a 5-bit block (qh: 32 bits, bit j the fifth bit of value j; qs: 16 bytes of
// nibbles as q4_0's) as 16-bit integers in value order: q - 16 when kSigned, else q. The
// transform's constant 0xF0 sets bits 4..7 of the nibble n, which gives n - 16 as a signed
// byte; adding 16 where the fifth bit is set gives q - 16.
template <bool kSigned>
inline __m512i five_bit_values(const uint8_t* qh, const uint8_t* qs) {
  uint32_t fifth;
  std::memcpy(&fifth, qh, 4);
  const __m256i raw =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  const __m256i matrix = _mm256_setr_epi64x(nibble_matrix(0, false), nibble_matrix(0, false),
                                            nibble_matrix(4, false), nibble_matrix(4, false));
  const __m256i low = _mm256_gf2p8affine_epi64_epi8(raw, matrix, kSigned ? 0xF0 : 0);
  const __m256i q = _mm256_mask_add_epi8(low, fifth, low, _mm256_set1_epi8(16));
  return kSigned ? _mm512_cvtepi8_epi16(q) : _mm512_cvtepu8_epi16(q);
}

struct Q5_0 {
  static constexpr int64_t kBytes = 22;
  static constexpr bool kOffset = false;
  static __m512i values(const uint8_t* b) { return five_bit_values<true>(b + 2, b + 6); }
  static float offset(const uint8_t*) { return 0.0f; }
};

struct Q5_1 {
  static constexpr int64_t kBytes = 24;
  static constexpr bool kOffset = true;
  static __m512i values(const uint8_t* b) { return five_bit_values<false>(b + 4, b + 8); }
  static float offset(const uint8_t* b) { return half_at(b + 2); }
};

// iq4_nl: the nibbles (as q4_0's) pick their grid value kIq4Values[q] in one byte shuffle.
struct IQ4_NL {
  static constexpr int64_t kBytes = 18;
  static constexpr bool kOffset = false;
  static __m512i values(const uint8_t* b) {
    const __m256i grid =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ops::kIq4Values)));
    return _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(grid, nibble_values_u8(b + 2)));
  }
  static float offset(const uint8_t*) { return 0.0f; }
};

// Per row of x and group of 8 blocks: Σ_block d · (Σ values · q) in f32 lanes (blocks
// take turns over four partial sums for one row of x, two for two rows, so consecutive
// blocks do not wait on each other's FMA), then · the group's scale into the row's sum;
// the additive terms m · Σx per block in four scalar chains.
template <typename Fmt, int M>
void dot_group(const uint8_t* w, const XInt16& x, float* out, int64_t out_stride) {
  constexpr int kSets = M == 1 ? 4 : M == 2 ? 2 : 1;
  const int64_t blocks = x.k / 32;
  __m512 acc[M];
  float offsets[M][4] = {};
  for (int i = 0; i < M; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t g0 = 0; g0 < blocks; g0 += kXInt16Group / 32) {
    const int64_t g1 = std::min(blocks, g0 + kXInt16Group / 32);
    __m512 part[M][kSets];
    for (int i = 0; i < M; ++i) {
      for (int s = 0; s < kSets; ++s) part[i][s] = _mm512_setzero_ps();
    }
    auto block = [&](int64_t b, auto set_constant) {
      constexpr int set = decltype(set_constant)::value % kSets;
      const uint8_t* wb = w + b * Fmt::kBytes;
      const __m512i v = Fmt::values(wb);
      const __m512 d = _mm512_set1_ps(half_at(wb));
      for (int i = 0; i < M; ++i) {
        const __m512i xq = _mm512_load_si512(x.q + i * x.k + 32 * b);
        const __m512i p = _mm512_dpwssd_epi32(_mm512_setzero_si512(), v, xq);
        part[i][set] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), d, part[i][set]);
      }
      if constexpr (Fmt::kOffset) {
        const float m = Fmt::offset(wb);
        for (int i = 0; i < M; ++i) offsets[i][set] += m * x.block_sum[i * blocks + b];
      }
    };
    int64_t b = g0;
    for (; b + 4 <= g1; b += 4) {
      block(b, std::integral_constant<int, 0>{});
      block(b + 1, std::integral_constant<int, 1>{});
      block(b + 2, std::integral_constant<int, 2>{});
      block(b + 3, std::integral_constant<int, 3>{});
    }
    if (b < g1) block(b, std::integral_constant<int, 0>{});
    if (b + 1 < g1) block(b + 1, std::integral_constant<int, 1>{});
    if (b + 2 < g1) block(b + 2, std::integral_constant<int, 2>{});
    for (int i = 0; i < M; ++i) {
      __m512 sum = part[i][0];
      for (int s = 1; s < kSets; ++s) sum = _mm512_add_ps(sum, part[i][s]);
      const __m512 scale = _mm512_set1_ps(x.group_scale[i * x.groups + g0 / (kXInt16Group / 32)]);
      acc[i] = _mm512_fmadd_ps(sum, scale, acc[i]);
    }
  }
  for (int i = 0; i < M; ++i) {
    out[i * out_stride] = _mm512_reduce_add_ps(acc[i]) +
                          ((offsets[i][0] + offsets[i][1]) + (offsets[i][2] + offsets[i][3]));
  }
}

// R weight rows with one row of x: each block of x is loaded once for the R rows, and
// each row's blocks go into one f32 sum (the R rows are the independent chains), scaled
// per group into the row's total; the additive terms m · Σx per block in one scalar chain
// per row. A row's value does not depend on R. Against one row at a time (dot_group), the
// reduction and the end of each row's dependency chain are shared by R rows: for rows of a
// few hundred values they cost as much as the row's blocks.
template <typename Fmt, int R, int kLocality>
void dot_weight_rows_r(const uint8_t* w, int64_t w_row_bytes, const XInt16& x, float* out) {
  const int64_t blocks = x.k / 32;
  // Weights are asked for in address order, `lead` bytes ahead: the next R rows (which the
  // next call reads) while these are read, and at least kPrefetchBytes ahead; into L1 with
  // kLocality 3, into L2 with 2 (__builtin_prefetch's scale: prefetcht0, prefetcht1).
  const int64_t lead = std::max<int64_t>(kPrefetchBytes, R * w_row_bytes);
  __m512 acc[R];
  float offsets[R] = {};
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t g0 = 0, g = 0; g0 < blocks; g0 += kXInt16Group / 32, ++g) {
    const int64_t g1 = std::min(blocks, g0 + kXInt16Group / 32);
    __m512 part[R];
    for (int r = 0; r < R; ++r) part[r] = _mm512_setzero_ps();
    for (int64_t b = g0; b < g1; ++b) {
      for (int64_t o = 0; o < R * Fmt::kBytes; o += 64) {
        __builtin_prefetch(w + lead + b * R * Fmt::kBytes + o, 0, kLocality);
      }
      const __m512i xq = _mm512_load_si512(x.q + 32 * b);
      for (int r = 0; r < R; ++r) {
        const uint8_t* wb = w + r * w_row_bytes + b * Fmt::kBytes;
        const __m512i p = _mm512_dpwssd_epi32(_mm512_setzero_si512(), Fmt::values(wb), xq);
        part[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_set1_ps(half_at(wb)), part[r]);
        if constexpr (Fmt::kOffset) offsets[r] += Fmt::offset(wb) * x.block_sum[b];
      }
    }
    const __m512 scale = _mm512_set1_ps(x.group_scale[g]);
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(part[r], scale, acc[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(acc[r]) + offsets[r];
}

// DotWeightRowsInt16Fn: four weight rows at a time, the weights asked for ahead in
// address order (four rows read side by side are four short streams, which the hardware
// prefetchers do not follow as they follow one).
template <typename Fmt, int kLocality>
void dot_weight_rows_at(const uint8_t* w, int64_t w_row_bytes, int64_t n, const XInt16& x, float* out) {
  for_weight_row_groups<4>(n, [&]<int kRows>(int64_t r) {
    dot_weight_rows_r<Fmt, kRows, kLocality>(w + r * w_row_bytes, w_row_bytes, x, out + r);
  });
}

template <typename Fmt>
void dot_weight_rows(const void* rows, int64_t w_row_bytes, int64_t n, const XInt16& x, float* out) {
  const auto* w = static_cast<const uint8_t*>(rows);
  if (4 * w_row_bytes > kPrefetchL1MaxBytes) return dot_weight_rows_at<Fmt, 2>(w, w_row_bytes, n, x, out);
  dot_weight_rows_at<Fmt, 3>(w, w_row_bytes, n, x, out);
}

// DotWeightRowsInt16Fn for q8_0, which reads twice the bytes per value of the 4-bit formats:
// rows of up to 2048 values one at a time (dot_group), which keeps it at the memory's pace;
// longer rows four at a time as dot_weight_rows does, the weights asked into L2 ahead of
// use, so that x stays in L1.
template <typename Fmt>
void dot_long_weight_rows(const void* rows, int64_t w_row_bytes, int64_t n, const XInt16& x, float* out) {
  const auto* w = static_cast<const uint8_t*>(rows);
  if (4 * w_row_bytes > kPrefetchL1MaxBytes) return dot_weight_rows_at<Fmt, 2>(w, w_row_bytes, n, x, out);
  for (int64_t r = 0; r < n; ++r) dot_group<Fmt, 1>(w + r * w_row_bytes, x, out + r, 1);
}

template <typename Fmt, int M>
void dot_take(int64_t take, const uint8_t* w, const XInt16& x, float* out, int64_t out_stride) {
  if constexpr (M > 1) {
    if (take < M) return dot_take<Fmt, M - 1>(take, w, x, out, out_stride);
  }
  dot_group<Fmt, M>(w, x, out, out_stride);
}

// DotRowsInt16Fn: groups of up to 8 rows of x share one decode of each weight block.
template <typename Fmt>
void dot_rows(const void* row, const XInt16& x, int64_t m, float* out, int64_t out_stride) {
  constexpr int64_t kMaxRows = 8;
  const auto* w = static_cast<const uint8_t*>(row);
  for (int64_t i = 0; i < m; i += kMaxRows) {
    dot_take<Fmt, kMaxRows>(std::min(m - i, kMaxRows), w, x.rows_from(i), out + i * out_stride, out_stride);
  }
}

// q5_0 for the integer GEMM's decoder: q - 16 with q's fifth bit (bit j of the 32-bit qh
// for value j) added to the nibble as 16 under a mask.
struct Q5_0Decode {
  static constexpr int64_t kBytes = 22;
  static __m512i values(const uint8_t* b) {
    uint32_t qh;
    std::memcpy(&qh, b + 2, 4);
    const __m512i sixteen = _mm512_set1_epi16(16);
    const __m512i q = nibble_values<false>(b + 6);
    return _mm512_sub_epi16(_mm512_mask_add_epi16(q, static_cast<__mmask32>(qh), q, sixteen), sixteen);
  }
  static float offset(const uint8_t*) { return 0.0f; }
};

// DecodeRowInt16Fn of the integer GEMM: each block's integer values, its d and its m.
template <typename Fmt>
void decode_int16(const void* row, int64_t k, int16_t* values, float* scales, float* offsets) {
  const auto* w = static_cast<const uint8_t*>(row);
  for (int64_t b = 0; b < k / 32; ++b) {
    const uint8_t* wb = w + b * Fmt::kBytes;
    _mm512_storeu_si512(values + 32 * b, Fmt::values(wb));
    scales[b] = half_at(wb);
    offsets[b] = Fmt::offset(wb);
  }
}

// Rounds one row of k values: per group, step = largest |x| / 32767 and q = round(x / step).
// A group with a non-finite value gets a non-finite scale, so the products stay non-finite
// as the f32 path's would.
void round_row(const float* x, int64_t k, int16_t* q, float* group_scale, float* block_sum, XInt16Order order) {
  // Word j (< 32) of a run of 64 values: its value 2j; word 32 + j: value 2j + 1.
  alignas(64) static constexpr int16_t kEvenOdd[64] = {
      0,  2,  4,  6,  8,  10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36, 38, 40, 42,
      44, 46, 48, 50, 52, 54, 56, 58, 60, 62, 1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21, 23,
      25, 27, 29, 31, 33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
  for (int64_t g0 = 0, g = 0; g0 < k; g0 += kXInt16Group, ++g) {
    const int64_t g1 = std::min(k, g0 + kXInt16Group);
    __m512 amax = _mm512_setzero_ps();
    __m512 non_finite = _mm512_setzero_ps();  // x * 0 is NaN exactly for infinite or NaN x
    for (int64_t j = g0; j < g1; j += 16) {
      const __m512 v = _mm512_loadu_ps(x + j);
      amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
      non_finite = _mm512_add_ps(non_finite, _mm512_mul_ps(v, _mm512_setzero_ps()));
    }
    const bool finite = _mm512_reduce_add_ps(non_finite) == 0.0f;
    const float largest = _mm512_reduce_max_ps(amax);
    group_scale[g] = finite ? largest / 32767.0f : NAN;
    const __m512 inverse = _mm512_set1_ps(finite && largest > 0.0f ? 32767.0f / largest : 0.0f);
    auto words = [&](int64_t j) {  // values j .. j + 31 as words
      const __m512i r0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + j), inverse));
      const __m512i r1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + j + 16), inverse));
      return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtsepi32_epi16(r0)), _mm512_cvtsepi32_epi16(r1), 1);
    };
    if (order == XInt16Order::even_odd) {
      const __m512i even = _mm512_load_si512(kEvenOdd);
      const __m512i odd = _mm512_load_si512(kEvenOdd + 32);
      for (int64_t j = g0; j < g1; j += 64) {
        const __m512i a = words(j), b = words(j + 32);
        _mm512_store_si512(q + j, _mm512_permutex2var_epi16(a, even, b));
        _mm512_store_si512(q + j + 32, _mm512_permutex2var_epi16(a, odd, b));
      }
    } else {
      for (int64_t j = g0; j < g1; j += 32) _mm512_store_si512(q + j, words(j));
    }
    if (block_sum != nullptr) {
      for (int64_t j = g0; j < g1; j += 32) {
        block_sum[j / 32] = _mm512_reduce_add_ps(
            _mm512_add_ps(_mm512_loadu_ps(x + j), _mm512_loadu_ps(x + j + 16)));
      }
    }
  }
}

}  // namespace
}  // namespace onepass::cpu::avx512_vnni
ONEPASS_AVX512_VNNI_END
#endif  // ONEPASS_CPU_X86

#if ONEPASS_CPU_X86
ONEPASS_AVX2_BEGIN
namespace onepass::cpu::avx2 {
namespace {

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Block formats: the block's 32 integer values as two vectors of 16 words (values 0..15,
// 16..31), its scale d and (kOffset) its additive m: weight j = d * values[j] (+ m).
struct Q4_0 {
  static constexpr int64_t kBytes = 18;
  static constexpr bool kOffset = false;
  static void values(const uint8_t* b, __m256i& v0, __m256i& v1) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
    const __m128i low4 = _mm_set1_epi8(0x0F);
    const __m128i eight = _mm_set1_epi8(8);
    v0 = _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_and_si128(raw, low4), eight));
    v1 = _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), low4), eight));
  }
  static float offset(const uint8_t*) { return 0.0f; }
};

struct Q4_1 {
  static constexpr int64_t kBytes = 20;
  static constexpr bool kOffset = true;
  static void values(const uint8_t* b, __m256i& v0, __m256i& v1) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4));
    const __m128i low4 = _mm_set1_epi8(0x0F);
    v0 = _mm256_cvtepu8_epi16(_mm_and_si128(raw, low4));
    v1 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), low4));
  }
  static float offset(const uint8_t* b) { return half_at(b + 2); }
};

struct Q8_0 {
  static constexpr int64_t kBytes = 34;
  static constexpr bool kOffset = false;
  static void values(const uint8_t* b, __m256i& v0, __m256i& v1) {
    v0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)));
    v1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 18)));
  }
  static float offset(const uint8_t*) { return 0.0f; }
};

// The 32 values q = nibble | fifth bit << 4 of a 5-bit block (qh: 32 bits, bit j the fifth
// bit of value j; qs: nibbles as q4_0's) as bytes in value order.
inline __m256i five_bit_bytes(const uint8_t* qh, const uint8_t* qs) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  // Byte j of `spread` is byte j / 8 of bits; testing bit j % 8 of it gives value j's bit.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
  const __m256i fifth =
      _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select), _mm256_set1_epi8(0x10));
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const __m256i nibbles = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), low4), _mm_and_si128(raw, low4));
  return _mm256_or_si256(nibbles, fifth);
}

struct Q5_0 {
  static constexpr int64_t kBytes = 22;
  static constexpr bool kOffset = false;
  static void values(const uint8_t* b, __m256i& v0, __m256i& v1) {
    const __m256i q = _mm256_sub_epi8(five_bit_bytes(b + 2, b + 6), _mm256_set1_epi8(16));
    v0 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q));
    v1 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1));
  }
  static float offset(const uint8_t*) { return 0.0f; }
};

struct Q5_1 {
  static constexpr int64_t kBytes = 24;
  static constexpr bool kOffset = true;
  static void values(const uint8_t* b, __m256i& v0, __m256i& v1) {
    const __m256i q = five_bit_bytes(b + 4, b + 8);
    v0 = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(q));
    v1 = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(q, 1));
  }
  static float offset(const uint8_t* b) { return half_at(b + 2); }
};

// iq4_nl: each nibble picks its grid value kIq4Values[q] in one byte shuffle per 16 values.
struct IQ4_NL {
  static constexpr int64_t kBytes = 18;
  static constexpr bool kOffset = false;
  static void values(const uint8_t* b, __m256i& v0, __m256i& v1) {
    const __m128i grid = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ops::kIq4Values));
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
    const __m128i low4 = _mm_set1_epi8(0x0F);
    v0 = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(grid, _mm_and_si128(raw, low4)));
    v1 = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(grid, _mm_and_si128(_mm_srli_epi16(raw, 4), low4)));
  }
  static float offset(const uint8_t*) { return 0.0f; }
};

// Per row of x and group of 8 blocks: Σ_block d · (Σ values · q) in f32 lanes (blocks take
// turns over four partial sums for one row of x, two for two rows), then · the group's scale
// into the row's sum; the additive terms m · Σx per block in four scalar chains. A block's
// integer sum has at most 4 products per lane (below 4 · 255 · 32767).
template <typename Fmt, int M>
void int16_dot_group(const uint8_t* w, const XInt16& x, float* out, int64_t out_stride) {
  constexpr int kSets = M == 1 ? 4 : M == 2 ? 2 : 1;
  const int64_t blocks = x.k / 32;
  __m256 acc[M];
  float offsets[M][4] = {};
  for (int i = 0; i < M; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t g0 = 0; g0 < blocks; g0 += kXInt16Group / 32) {
    const int64_t g1 = std::min(blocks, g0 + kXInt16Group / 32);
    __m256 part[M][kSets];
    for (int i = 0; i < M; ++i) {
      for (int s = 0; s < kSets; ++s) part[i][s] = _mm256_setzero_ps();
    }
    auto block = [&](int64_t b, auto set_constant) {
      constexpr int set = decltype(set_constant)::value % kSets;
      const uint8_t* wb = w + b * Fmt::kBytes;
      __m256i v0, v1;
      Fmt::values(wb, v0, v1);
      const __m256 d = _mm256_set1_ps(half_at(wb));
      for (int i = 0; i < M; ++i) {
        const int16_t* xb = x.q + i * x.k + 32 * b;
        const __m256i p =
            _mm256_add_epi32(_mm256_madd_epi16(v0, _mm256_load_si256(reinterpret_cast<const __m256i*>(xb))),
                             _mm256_madd_epi16(v1, _mm256_load_si256(reinterpret_cast<const __m256i*>(xb + 16))));
        part[i][set] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d, part[i][set]);
      }
      if constexpr (Fmt::kOffset) {
        const float m = Fmt::offset(wb);
        for (int i = 0; i < M; ++i) offsets[i][set] += m * x.block_sum[i * blocks + b];
      }
    };
    int64_t b = g0;
    for (; b + 4 <= g1; b += 4) {
      block(b, std::integral_constant<int, 0>{});
      block(b + 1, std::integral_constant<int, 1>{});
      block(b + 2, std::integral_constant<int, 2>{});
      block(b + 3, std::integral_constant<int, 3>{});
    }
    if (b < g1) block(b, std::integral_constant<int, 0>{});
    if (b + 1 < g1) block(b + 1, std::integral_constant<int, 1>{});
    if (b + 2 < g1) block(b + 2, std::integral_constant<int, 2>{});
    for (int i = 0; i < M; ++i) {
      __m256 sum = part[i][0];
      for (int s = 1; s < kSets; ++s) sum = _mm256_add_ps(sum, part[i][s]);
      const __m256 scale = _mm256_set1_ps(x.group_scale[i * x.groups + g0 / (kXInt16Group / 32)]);
      acc[i] = _mm256_fmadd_ps(sum, scale, acc[i]);
    }
  }
  for (int i = 0; i < M; ++i) {
    out[i * out_stride] =
        simd::hsum(acc[i]) + ((offsets[i][0] + offsets[i][1]) + (offsets[i][2] + offsets[i][3]));
  }
}

// DotRowsInt16Fn: groups of up to 4 rows of x share one decode of each weight block.
template <typename Fmt>
void int16_dot_rows(const void* row, const XInt16& x, int64_t m, float* out, int64_t out_stride) {
  const auto* w = static_cast<const uint8_t*>(row);
  for_row_groups<4>(x, m, out, out_stride, [&]<int M>(const XInt16& rows, float* o) {
    int16_dot_group<Fmt, M>(w, rows, o, out_stride);
  });
}

// Rounds one row of k values as avx512_vnni::round_row does (the same integers and scales;
// block sums may differ in the last bit, summed in another order).
void round_row(const float* x, int64_t k, int16_t* q, float* group_scale, float* block_sum) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (int64_t g0 = 0, g = 0; g0 < k; g0 += kXInt16Group, ++g) {
    const int64_t g1 = std::min(k, g0 + kXInt16Group);
    __m256 amax = _mm256_setzero_ps();
    __m256 non_finite = _mm256_setzero_ps();  // x * 0 is NaN exactly for infinite or NaN x
    for (int64_t j = g0; j < g1; j += 8) {
      const __m256 v = _mm256_loadu_ps(x + j);
      amax = _mm256_max_ps(amax, _mm256_and_ps(v, magnitude));
      non_finite = _mm256_add_ps(non_finite, _mm256_mul_ps(v, _mm256_setzero_ps()));
    }
    const bool finite = simd::hsum(non_finite) == 0.0f;
    const float largest = hmax(amax);
    group_scale[g] = finite ? largest / 32767.0f : NAN;
    const __m256 inverse = _mm256_set1_ps(finite && largest > 0.0f ? 32767.0f / largest : 0.0f);
    for (int64_t j = g0; j < g1; j += 16) {
      const __m256i r0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j), inverse));
      const __m256i r1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8), inverse));
      // packs works per 128-bit lane: 0..3, 8..11, 4..7, 12..15 back into order.
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packs_epi32(r0, r1), 0xD8);
      _mm256_store_si256(reinterpret_cast<__m256i*>(q + j), packed);
    }
    if (block_sum != nullptr) {
      for (int64_t j = g0; j < g1; j += 32) {
        const __m256 a = _mm256_add_ps(_mm256_loadu_ps(x + j), _mm256_loadu_ps(x + j + 8));
        const __m256 b = _mm256_add_ps(_mm256_loadu_ps(x + j + 16), _mm256_loadu_ps(x + j + 24));
        block_sum[j / 32] = simd::hsum(_mm256_add_ps(a, b));
      }
    }
  }
}

// As avx512_vnni::dot_weight_rows_r with vpmaddwd: R weight rows with one row of x, each
// block of x loaded once for the R rows, each row's blocks in one f32 sum (the R rows are
// the independent chains), the weights asked for ahead in address order. A row's value does
// not depend on R.
template <typename Fmt, int R, int kLocality>
void dot_weight_rows_r(const uint8_t* w, int64_t w_row_bytes, const XInt16& x, float* out) {
  const int64_t blocks = x.k / 32;
  const int64_t lead = std::max<int64_t>(kPrefetchBytes, R * w_row_bytes);
  __m256 acc[R];
  float offsets[R] = {};
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t g0 = 0, g = 0; g0 < blocks; g0 += kXInt16Group / 32, ++g) {
    const int64_t g1 = std::min(blocks, g0 + kXInt16Group / 32);
    __m256 part[R];
    for (int r = 0; r < R; ++r) part[r] = _mm256_setzero_ps();
    for (int64_t b = g0; b < g1; ++b) {
      for (int64_t o = 0; o < R * Fmt::kBytes; o += 64) {
        __builtin_prefetch(w + lead + b * R * Fmt::kBytes + o, 0, kLocality);
      }
      const __m256i x0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(x.q + 32 * b));
      const __m256i x1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(x.q + 32 * b + 16));
      for (int r = 0; r < R; ++r) {
        const uint8_t* wb = w + r * w_row_bytes + b * Fmt::kBytes;
        __m256i v0, v1;
        Fmt::values(wb, v0, v1);
        const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(v0, x0), _mm256_madd_epi16(v1, x1));
        part[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(half_at(wb)), part[r]);
        // One fused multiply-add whatever R (the compiler may pair the rows' scalar chains).
        if constexpr (Fmt::kOffset) offsets[r] = std::fma(Fmt::offset(wb), x.block_sum[b], offsets[r]);
      }
    }
    const __m256 scale = _mm256_set1_ps(x.group_scale[g]);
    for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(part[r], scale, acc[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = simd::hsum(acc[r]) + offsets[r];
}

template <typename Fmt, int kLocality>
void dot_weight_rows_at(const uint8_t* w, int64_t w_row_bytes, int64_t n, const XInt16& x, float* out) {
  for_weight_row_groups<4>(n, [&]<int kRows>(int64_t r) {
    dot_weight_rows_r<Fmt, kRows, kLocality>(w + r * w_row_bytes, w_row_bytes, x, out + r);
  });
}

// DotWeightRowsInt16Fn: four weight rows at a time.
template <typename Fmt>
void dot_weight_rows(const void* rows, int64_t w_row_bytes, int64_t n, const XInt16& x, float* out) {
  const auto* w = static_cast<const uint8_t*>(rows);
  if (4 * w_row_bytes > kPrefetchL1MaxBytes) return dot_weight_rows_at<Fmt, 2>(w, w_row_bytes, n, x, out);
  dot_weight_rows_at<Fmt, 3>(w, w_row_bytes, n, x, out);
}

// DecodeRowInt16Fn of the integer GEMM on avx2: each block's integer values, its d and its m.
template <typename Fmt>
void decode_int16(const void* row, int64_t k, int16_t* values, float* scales, float* offsets) {
  const auto* w = static_cast<const uint8_t*>(row);
  for (int64_t b = 0; b < k / 32; ++b) {
    const uint8_t* wb = w + b * Fmt::kBytes;
    __m256i v0, v1;
    Fmt::values(wb, v0, v1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(values + 32 * b), v0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(values + 32 * b + 16), v1);
    scales[b] = half_at(wb);
    offsets[b] = Fmt::offset(wb);
  }
}

}  // namespace
}  // namespace onepass::cpu::avx2
ONEPASS_AVX2_END
#endif  // ONEPASS_CPU_X86

namespace onepass::cpu {

XInt16 round_x_int16(const float* x, int64_t x_stride, int64_t m, int64_t k, bool block_sums, XInt16Order order,
                     Isa isa, int slot) {
  isa = vector_isa(isa);
  check(k % 32 == 0, "cpu", "16-bit x needs rows of whole 32-value blocks, got k = ", k);
  check(order == XInt16Order::values || (k % 64 == 0 && isa == Isa::avx512_vnni), "cpu",
        "16-bit x in even / odd order is an avx512_vnni layout of rows of whole 64-value runs, got k = ", k);
  const int64_t row_bytes = x_row_bytes(k);
  auto* base = reinterpret_cast<uint8_t*>(thread_scratch((m * row_bytes + 3) / 4, slot));
  // All q rows first (contiguous, stride k), then all scales, then all block sums.
  XInt16 r;
  r.k = k;
  r.groups = (k + kXInt16Group - 1) / kXInt16Group;
  auto* q = reinterpret_cast<int16_t*>(base);
  auto* scales = reinterpret_cast<float*>(base + (2 * m * k + 63) / 64 * 64);
  float* sums = block_sums ? scales + m * r.groups : nullptr;
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * x_stride;
#if ONEPASS_CPU_X86
    float* row_sums = sums != nullptr ? sums + i * (k / 32) : nullptr;
    if (isa == Isa::avx512_vnni) {
      avx512_vnni::round_row(row, k, q + i * k, scales + i * r.groups, row_sums, order);
    } else {
      check(isa == Isa::avx2 || isa == Isa::avx512, "cpu", "16-bit x needs an x86-64 SIMD instruction set");
      avx2::round_row(row, k, q + i * k, scales + i * r.groups, row_sums);
    }
#else
    (void)row;
    (void)isa;
    check(false, "cpu", "16-bit x is an x86-64 SIMD path");
#endif
  }
  r.q = q;
  r.group_scale = scales;
  r.block_sum = sums;
  return r;
}

DotRowsInt16Fn block32_int16_dot(DType w, Isa isa) {
#if ONEPASS_CPU_X86
  if (isa == Isa::avx512_vnni) {
    switch (w) {
      case DType::q4_0:
        return avx512_vnni::dot_rows<avx512_vnni::Q4_0>;
      case DType::q4_1:
        return avx512_vnni::dot_rows<avx512_vnni::Q4_1>;
      case DType::q8_0:
        return avx512_vnni::dot_rows<avx512_vnni::Q8_0>;
      case DType::q5_0:
        return avx512_vnni::dot_rows<avx512_vnni::Q5_0>;
      case DType::q5_1:
        return avx512_vnni::dot_rows<avx512_vnni::Q5_1>;
      case DType::iq4_nl:
        return avx512_vnni::dot_rows<avx512_vnni::IQ4_NL>;
      default:
        break;
    }
  } else if (isa == Isa::avx2 || isa == Isa::avx512) {
    switch (w) {
      case DType::q4_0:
        return avx2::int16_dot_rows<avx2::Q4_0>;
      case DType::q4_1:
        return avx2::int16_dot_rows<avx2::Q4_1>;
      case DType::q8_0:
        return avx2::int16_dot_rows<avx2::Q8_0>;
      case DType::q5_0:
        return avx2::int16_dot_rows<avx2::Q5_0>;
      case DType::q5_1:
        return avx2::int16_dot_rows<avx2::Q5_1>;
      case DType::iq4_nl:
        return avx2::int16_dot_rows<avx2::IQ4_NL>;
      default:
        break;
    }
  }
#else
  (void)w;
  (void)isa;
#endif
  return nullptr;
}

DotWeightRowsInt16Fn block32_int16_dot_weight_rows(DType w, Isa isa) {
#if ONEPASS_CPU_X86
  if (isa == Isa::avx2 || isa == Isa::avx512) {
    switch (w) {
      case DType::q4_0:
        return avx2::dot_weight_rows<avx2::Q4_0>;
      case DType::q4_1:
        return avx2::dot_weight_rows<avx2::Q4_1>;
      case DType::q8_0:
        return avx2::dot_weight_rows<avx2::Q8_0>;
      case DType::q5_0:
        return avx2::dot_weight_rows<avx2::Q5_0>;
      case DType::q5_1:
        return avx2::dot_weight_rows<avx2::Q5_1>;
      case DType::iq4_nl:
        return avx2::dot_weight_rows<avx2::IQ4_NL>;
      default:
        return nullptr;
    }
  }
  if (isa != Isa::avx512_vnni) return nullptr;
  switch (w) {
    case DType::q4_0:
      return avx512_vnni::dot_weight_rows<avx512_vnni::Q4_0>;
    case DType::q4_1:
      return avx512_vnni::dot_weight_rows<avx512_vnni::Q4_1>;
    case DType::q8_0:
      return avx512_vnni::dot_long_weight_rows<avx512_vnni::Q8_0>;
    case DType::q5_0:
      return avx512_vnni::dot_weight_rows<avx512_vnni::Q5_0>;
    case DType::q5_1:
      return avx512_vnni::dot_weight_rows<avx512_vnni::Q5_1>;
    case DType::iq4_nl:
      return avx512_vnni::dot_weight_rows<avx512_vnni::IQ4_NL>;
    default:
      break;
  }
#else
  (void)w;
  (void)isa;
#endif
  return nullptr;
}

DecodeRowInt16Fn block32_int16_decode(DType w, Isa isa) {
#if ONEPASS_CPU_X86
  if (isa == Isa::avx2 || isa == Isa::avx512) {
    switch (w) {
      case DType::q4_0:
        return avx2::decode_int16<avx2::Q4_0>;
      case DType::q4_1:
        return avx2::decode_int16<avx2::Q4_1>;
      case DType::q5_0:
        return avx2::decode_int16<avx2::Q5_0>;
      case DType::q8_0:
        return avx2::decode_int16<avx2::Q8_0>;
      case DType::q5_1:
        return avx2::decode_int16<avx2::Q5_1>;
      case DType::iq4_nl:
        return avx2::decode_int16<avx2::IQ4_NL>;
      default:
        return nullptr;
    }
  }
  if (isa != Isa::avx512_vnni) return nullptr;
  switch (w) {
    case DType::q4_0:
      return avx512_vnni::decode_int16<avx512_vnni::Q4_0>;
    case DType::q4_1:
      return avx512_vnni::decode_int16<avx512_vnni::Q4_1>;
    case DType::q5_0:
      return avx512_vnni::decode_int16<avx512_vnni::Q5_0Decode>;
    case DType::q8_0:
      return avx512_vnni::decode_int16<avx512_vnni::Q8_0>;
    case DType::q5_1:
      return avx512_vnni::decode_int16<avx512_vnni::Q5_1>;
    case DType::iq4_nl:
      return avx512_vnni::decode_int16<avx512_vnni::IQ4_NL>;
    default:
      break;
  }
#else
  (void)w;
  (void)isa;
#endif
  return nullptr;
}

}  // namespace onepass::cpu
