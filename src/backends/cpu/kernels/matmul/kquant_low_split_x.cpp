// q2_k and q3_k weight rows times one row of x on Isa::avx512_vnni, with x rounded to 16-bit
// integers (XInt16's integers and group scales, one group per super-block) and split into
// bytes, x = 256 · h + l (XInt16GroupBytes), so that the 2- and 3-bit weights multiply x as
// bytes with vpdpbusd, four values per 32-bit lane, where the 16-bit products
// (kquant_low_int16.cpp) first widen every weight to a word and multiply it by its scale.
//
// Both formats keep the 2 low bits of value 128 h + 32 j + t (h < 2, j < 4, t < 32) at bits
// 2j, 2j + 1 of byte 32 h + t of their 64 bytes of quants, and q3_k its high bit at bit
// 4 h + j of byte t of its 32 bytes of hmask. XInt16GroupBytes's part j holds exactly the
// values of bit pair 2j: byte 16 i + e of the part is value 32 j + 16 (i % 2) + 128 (i / 2) + e,
// whose quants sit in byte 16 i + e of the 64. So one load of the 64 bytes serves the four
// parts, each taking its bit pair out with one or two byte operations, and the 128-bit lane i
// of a part is its quarter i, one sub-block of 16 values. The scales are kept in
// XInt16GroupBytes's sum order (dword 4 i + j: quarter i of part j).
//
// q3_k, per part and weight row: q + 4 = low bits | high bit << 2 in 0..7 (a word shift, the
// high bit through vgf2p8affineqb, bit j or 4 + j to bit 2, and one vpternlogd); Σ q · h and
// Σ l · q over each lane's 4 values (two vpdpbusd) joined into one lane of two words (Σ l · q
// low, Σ q · h high) and multiplied by the lane's sub-block scale as the words (sc, 256 · sc)
// with one vpdpwssd, the part's scale vector one in-lane dword broadcast (vpshufd); -4 · sc ·
// Σ x per sub-block comes off through the 16 integer sums of x's sub-blocks (vpmulld).
//
// q2_k: sc · q <= 45 fits a byte, so each part's weights are the bytes sc · q, looked up
// (vpshufb) in a table built once per super-block (see Q2K), and the parts add up in two sums,
// Σ w · h and Σ l · w; Σ mn · Σ x through the sub-blocks' sums of x (vpmulld).
//
// Each super-block's integer sums are scaled once in f32 by d (and -dmin) times x's group
// scale.
//
// Integer bounds per 32-bit lane (|x| <= 32767, h in [-128, 127], l in [0, 255]):
//   q3_k: q' = q + 4 in [0, 7]; Σ q' · h over 4 values within ±3,584 and Σ l · q' in
//         [0, 7,140], both exact words (the high word of the joined lane, and the low word
//         of a sum below 2^15 that adds no carry); sc - 32 in [-32, 31], 256 · (sc - 32)
//         within ±8,192, a word. Per part, |sc · Σ q' · x| <= 32 · 4 · 7 · 32767 = 29,359,232;
//         four parts and the lane's share of -4 · sc · Σ x (at most 4 · 32 · 16 · 32767 =
//         67,108,864) stay within ±184,545,792 < 2^31.
//   q2_k: the bytes w = sc · q in [0, 45]; per lane 16 values of a super-block: Σ w · h
//         within ±16 · 45 · 128 = ±92,160, Σ l · w within 16 · 255 · 45 = 183,600, and
//         256 · Σ w · h + Σ l · w within ±23,776,560; mn · Σ x within 15 · 16 · 32767 =
//         7,864,080.
// So no lane overflows; the sums' f32 conversion rounds once per super-block, as the 16-bit
// kernels' does.
//
// The rounding into XInt16GroupBytes (round_x_int16_group_bytes) also makes q4_k's, q5_k's
// and q6_k's orders of it (XInt16GroupOrder::nibbles and values, kquant_split_x.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "onepass/core/error.h"
#include "rows.h"
#include "simd.h"

namespace onepass::cpu {
namespace {

constexpr int64_t kQ2KBytes = 84;
constexpr int64_t kQ3KBytes = 110;

// Byte offsets inside a group of XInt16GroupBytes: part j's l at 128 j, its h at 128 j + 64,
// the sums after the four parts.
constexpr int64_t kPartBytes = 128;
constexpr int64_t kSums = 4 * kPartBytes;
static_assert(kSums + 64 == kXInt16GroupBytes);

}  // namespace
}  // namespace onepass::cpu

#if ONEPASS_CPU_X86
ONEPASS_AVX512_VNNI_BEGIN
namespace onepass::cpu::avx512_vnni {
namespace {

template <int kPart>
using Part = std::integral_constant<int, kPart>;

// Byte p of the sub-blocks' scales in XInt16GroupBytes's sum order: dword 4 i + j is quarter
// i of part j, sub-block 8 (i / 2) + 2 j + i % 2.
inline __m128i sum_order(__m128i sub_block_bytes) {
  return _mm_shuffle_epi8(sub_block_bytes, _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15));
}

// The 16 scale fields (6 bits, 0..63) of a q3_k super-block's 12 packed bytes as bytes in
// sum order: sub-block s has its low 4 bits in the low (s < 8) or high (s >= 8) nibble of
// byte s % 8 and its high 2 bits at bit 2 · (s / 4) of byte 8 + s % 4 (ops::q3k_scale). In
// sum order every 16-bit word holds two sub-blocks of the same s / 4, so one variable word
// shift takes the high bits down.
inline __m128i q3k_scales(const uint8_t* packed) {
  const __m128i v = _mm_maskz_loadu_epi8(0x0FFF, packed);
  const __m128i nibbles = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 0, 2, 4, 6, 1, 3, 5, 7));
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const __m128i low = _mm_blend_epi32(_mm_and_si128(nibbles, low4), _mm_and_si128(_mm_srli_epi16(nibbles, 4), low4), 0b1100);
  const __m128i high = _mm_srlv_epi16(_mm_shuffle_epi8(v, _mm_setr_epi8(8, 10, 8, 10, 9, 11, 9, 11, 8, 10, 8, 10, 9, 11, 9, 11)),
                                      _mm_setr_epi16(0, 2, 0, 2, 4, 6, 4, 6));
  return _mm_or_si128(low, _mm_and_si128(_mm_slli_epi16(high, 4), _mm_set1_epi8(0x30)));
}

// Bits 2j, 2j + 1 of each byte moved to bits `to`, `to` + 1 of the same byte (to <= 2j + 6;
// the other bits are left over, for the caller to mask).
template <int j, int to>
inline __m512i bit_pair_at(__m512i v) {
  if constexpr (2 * j > to) {
    return _mm512_srli_epi16(v, 2 * j - to);
  } else if constexpr (2 * j < to) {
    return _mm512_slli_epi16(v, to - 2 * j);
  } else {
    return v;
  }
}

// vgf2p8affineqb's matrices (one per qword; result bit i is the parity of the byte and
// matrix byte 7 - i): bits 2j, 2j + 1 to bits 0, 1.
template <int j>
inline __m512i low_bits_matrix() {
  return _mm512_set1_epi64(static_cast<long long>((uint64_t{1} << (2 * j)) << 56 | (uint64_t{1} << (2 * j + 1)) << 48));
}

// Bit j (the first 256 bits, values 0..127) or 4 + j (the rest) to bit 2.
template <int j>
inline __m512i high_bit_matrix() {
  const auto at = [](int bit) { return static_cast<long long>((uint64_t{1} << bit) << 40); };
  return _mm512_set_epi64(at(4 + j), at(4 + j), at(4 + j), at(4 + j), at(j), at(j), at(j), at(j));
}

// sum + sc · Σ q · x per lane of part j: q the part's weights as bytes 0..127 (so that they
// multiply h unsigned and l signed), scales the words (sc, 256 · sc) in sum order (q3_k).
template <int j>
inline __m512i part_product(__m512i sum, __m512i q, const uint8_t* xg, __m512i scales) {
  const __m512i high = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, _mm512_load_si512(xg + kPartBytes * j + 64));
  const __m512i joined = _mm512_dpbusd_epi32(_mm512_slli_epi32(high, 16), _mm512_load_si512(xg + kPartBytes * j), q);
  return _mm512_dpwssd_epi32(sum, joined, _mm512_shuffle_epi32(scales, static_cast<_MM_PERM_ENUM>(j * 0x55)));
}

// Dword scales as the words (sc, 256 · sc), sc within ±128.
inline __m512i scale_words(__m512i sc) {
  // (sc & 0xFFFF) | sc << 24: imm 0xEC is (A & C) | B.
  return _mm512_ternarylogic_epi32(sc, _mm512_slli_epi32(sc, 24), _mm512_set1_epi32(0xFFFF), 0xEC);
}

// q3_k: acc + d · x_scale · Σ_j w_j x_j over the super-block at wb.
struct Q3K {
  static constexpr int64_t kBytes = kQ3KBytes;
  static __m512 super_block(const uint8_t* wb, const uint8_t* xg, float x_scale, __m512 acc) {
    const __m512i sc = _mm512_sub_epi32(_mm512_cvtepu8_epi32(q3k_scales(wb + 96)), _mm512_set1_epi32(32));
    const __m512i scales = scale_words(sc);
    const __m512i quants = _mm512_loadu_si512(wb + 32);
    const __m512i hmask = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb)));
    // The weights are q + 4: 4 · sc · Σ x per sub-block comes off at the end.
    const __m512i offset = _mm512_slli_epi32(_mm512_mullo_epi32(sc, _mm512_load_si512(xg + kSums)), 2);
    const __m512i three = _mm512_set1_epi8(3);
    __m512i sum = _mm512_setzero_si512();
    auto part = [&](auto j_constant) {
      constexpr int j = decltype(j_constant)::value;
      // (low bits & 3) | high bit: imm 0xEC is (A & C) | B.
      const __m512i low = bit_pair_at<j, 0>(quants);
      const __m512i high = _mm512_gf2p8affine_epi64_epi8(hmask, high_bit_matrix<j>(), 0);
      const __m512i q = _mm512_ternarylogic_epi32(low, high, three, 0xEC);
      sum = part_product<j>(sum, q, xg, scales);
    };
    part(Part<0>{});
    part(Part<1>{});
    part(Part<2>{});
    part(Part<3>{});
    sum = _mm512_sub_epi32(sum, offset);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(half_at(wb + 108) * x_scale), acc);
  }
};

// q2_k: acc + x_scale · Σ_j (d · sc · q_j - dmin · mn) x_j over the super-block at wb. As
// sc · q <= 45 fits a byte, each part's weights are sc · q as bytes, looked up (vpshufb) in
// a table whose 128-bit lane i holds at byte 4 j + q the value sc · q of quarter i of part
// j's sub-block (the part's q come out of vgf2p8affineqb with 4 j added): the products need
// no scale words, and the parts add up in two sums per super-block, Σ w · h and Σ l · w.
struct Q2K {
  static constexpr int64_t kBytes = kQ2KBytes;
  static __m512 super_block(const uint8_t* wb, const uint8_t* xg, float x_scale, __m512 acc) {
    const __m512i packed = _mm512_cvtepu8_epi32(sum_order(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb))));
    // sc times the bytes (0, 1, 2, 3) of each dword: 3 · 15 < 256, so no byte carries.
    const __m512i table = _mm512_mullo_epi32(_mm512_and_si512(packed, _mm512_set1_epi32(0xF)), _mm512_set1_epi32(0x03020100));
    const __m512i mins = _mm512_mullo_epi32(_mm512_srli_epi32(packed, 4), _mm512_load_si512(xg + kSums));
    const __m512i quants = _mm512_loadu_si512(wb + 16);
    __m512i high = _mm512_setzero_si512(), low = _mm512_setzero_si512();
    auto part = [&](auto j_constant) {
      constexpr int j = decltype(j_constant)::value;
      const __m512i w = _mm512_shuffle_epi8(table, _mm512_gf2p8affine_epi64_epi8(quants, low_bits_matrix<j>(), 4 * j));
      high = _mm512_dpbusd_epi32(high, w, _mm512_load_si512(xg + kPartBytes * j + 64));
      low = _mm512_dpbusd_epi32(low, _mm512_load_si512(xg + kPartBytes * j), w);
    };
    part(Part<0>{});
    part(Part<1>{});
    part(Part<2>{});
    part(Part<3>{});
    const __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(high, 8), low);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(half_at(wb + 80) * x_scale), acc);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_set1_ps(-half_at(wb + 82) * x_scale), acc);
  }
};

// How far ahead of the weights being read the rows ask for them (see block32_int16.cpp's
// dot_weight_rows_r).
constexpr int64_t kPrefetchBytes = 4096;

// R weight rows with one row of x, super-block by super-block; a row's value does not
// depend on R.
template <typename Fmt, int R>
void dot_rows_r(const uint8_t* w, int64_t w_row_bytes, const XInt16GroupBytes& x, float* out) {
  const int64_t blocks = x.k / 256;
  const int64_t lead = std::max<int64_t>(kPrefetchBytes, R * w_row_bytes);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t o = 0; o < R * Fmt::kBytes; o += 64) __builtin_prefetch(w + lead + b * R * Fmt::kBytes + o, 0, 2);
    const uint8_t* xg = x.groups + b * kXInt16GroupBytes;
    const float scale = x.group_scale[b];
    for (int r = 0; r < R; ++r) acc[r] = Fmt::super_block(w + r * w_row_bytes + b * Fmt::kBytes, xg, scale, acc[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}

// DotWeightRowsGroupBytesFn: four weight rows at a time.
template <typename Fmt>
void dot_weight_rows(const void* rows, int64_t w_row_bytes, int64_t n, const XInt16GroupBytes& x, float* out) {
  const auto* w = static_cast<const uint8_t*>(rows);
  for_weight_row_groups<4>(n, [&]<int kRows>(int64_t r) {
    dot_rows_r<Fmt, kRows>(w + r * w_row_bytes, w_row_bytes, x, out + r);
  });
}

// Rounds as block32_int16.cpp's round_row does (per group, step = largest |x| / 32767,
// q = round(x / step), a non-finite scale for a group with a non-finite value), then splits
// the integers into XInt16GroupBytes's parts in `order`, with its sums.
void round_row(const float* x, int64_t k, uint8_t* groups, float* group_scale, XInt16GroupOrder order) {
  const __m512i byte = _mm512_set1_epi32(0xFF);
  const bool nibbles = order == XInt16GroupOrder::nibbles;
  const bool values = order == XInt16GroupOrder::values;
  const int64_t group_bytes = x_int16_group_bytes(order);
  const int64_t part_bytes = values ? kPartBytes + 64 : kPartBytes;
  for (int64_t g0 = 0, g = 0; g0 < k; g0 += kXInt16Group, ++g) {
    __m512 amax = _mm512_setzero_ps();
    __m512 non_finite = _mm512_setzero_ps();  // x * 0 is NaN exactly for infinite or NaN x
    for (int64_t j = g0; j < g0 + kXInt16Group; j += 16) {
      const __m512 v = _mm512_loadu_ps(x + j);
      amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
      non_finite = _mm512_add_ps(non_finite, _mm512_mul_ps(v, _mm512_setzero_ps()));
    }
    const bool finite = _mm512_reduce_add_ps(non_finite) == 0.0f;
    const float largest = _mm512_reduce_max_ps(amax);
    group_scale[g] = finite ? largest / 32767.0f : NAN;
    const __m512 inverse = _mm512_set1_ps(finite && largest > 0.0f ? 32767.0f / largest : 0.0f);
    uint8_t* group = groups + g * group_bytes;
    alignas(64) int32_t sums[16];
    for (int j = 0; j < 4; ++j) {
      for (int i = 0; i < 4; ++i) {
        // Quarter i of part j.
        const int64_t first = values    ? 64 * j + 16 * i
                              : nibbles ? 64 * i + 32 * (j % 2) + 16 * (j / 2)
                                        : 32 * j + 16 * (i % 2) + 128 * (i / 2);
        const __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + g0 + first), inverse));
        uint8_t* part = group + part_bytes * j + 16 * i;
        _mm_store_si128(reinterpret_cast<__m128i*>(part), _mm512_cvtepi32_epi8(_mm512_and_si512(v, byte)));
        _mm_store_si128(reinterpret_cast<__m128i*>(part + 64), _mm512_cvtepi32_epi8(_mm512_srai_epi32(v, 8)));
        if (order == XInt16GroupOrder::bit_pairs) sums[4 * i + j] = _mm512_reduce_add_epi32(v);
      }
      if (values) {
        // -32 · Σ h per 32-bit lane: the bytes' sums (vpdpbusd with ones) times -32.
        uint8_t* part = group + part_bytes * j;
        const __m512i h_sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1),
                                                   _mm512_load_si512(part + 64));
        _mm512_store_si512(part + kPartBytes, _mm512_mullo_epi32(h_sums, _mm512_set1_epi32(-32)));
      }
    }
    if (values) continue;
    if (nibbles) {
      // The sub-blocks' f32 sums, as round_x_int16's block sums.
      alignas(64) float block_sums[16] = {};
      for (int s = 0; s < 8; ++s) {
        const float* xs = x + g0 + 32 * s;
        block_sums[s] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_loadu_ps(xs), _mm512_loadu_ps(xs + 16)));
      }
      std::memcpy(group + kSums, block_sums, sizeof(block_sums));
    } else {
      std::memcpy(group + kSums, sums, sizeof(sums));
    }
  }
}

}  // namespace
}  // namespace onepass::cpu::avx512_vnni
ONEPASS_AVX512_VNNI_END
#endif  // ONEPASS_CPU_X86

namespace onepass::cpu {

XInt16GroupBytes round_x_int16_group_bytes(const float* x, int64_t k, XInt16GroupOrder order) {
  check(k % kXInt16Group == 0, "cpu", "16-bit x in group bytes needs rows of whole 256-value groups, got k = ", k);
  const int64_t groups = k / kXInt16Group;
  XInt16GroupBytes r;
  r.k = k;
  const int64_t group_bytes = x_int16_group_bytes(order);
  auto* base = reinterpret_cast<uint8_t*>(thread_scratch((groups * group_bytes + 4 * groups + 3) / 4, 1));
#if ONEPASS_CPU_X86
  check(isa_supported(Isa::avx512_vnni), "cpu", "16-bit x in group bytes is an avx512_vnni layout");
  auto* scales = reinterpret_cast<float*>(base + groups * group_bytes);
  avx512_vnni::round_row(x, k, base, scales, order);
  r.groups = base;
  r.group_scale = scales;
#else
  (void)x;
  (void)base;
  (void)order;
  check(false, "cpu", "16-bit x in group bytes is an x86-64 SIMD path");
#endif
  return r;
}

DotWeightRowsGroupBytesFn kquant_low_split_x_dot_weight_rows(DType w, Isa isa) {
#if ONEPASS_CPU_X86
  if (isa != Isa::avx512_vnni) return nullptr;
  if (w == DType::q2_k) return avx512_vnni::dot_weight_rows<avx512_vnni::Q2K>;
  if (w == DType::q3_k) return avx512_vnni::dot_weight_rows<avx512_vnni::Q3K>;
#else
  (void)w;
  (void)isa;
#endif
  return nullptr;
}

}  // namespace onepass::cpu
