// q4_k, q5_k and q6_k weight rows times one row of x on Isa::avx512_vnni, with x rounded to
// 16-bit integers (XInt16's integers and group scales, one group per super-block) and split
// into bytes, x = 256 · h + l, in XInt16GroupOrder::nibbles (q4_k, q5_k) or values (q6_k)
// (XInt16GroupBytes), so that the 4- to 6-bit quants multiply x as bytes with vpdpbusd, four
// values per 32-bit lane, where the 16-bit products (kquant_int16.cpp) first widen every quant
// to a word and multiply it by its scale.
//
// A super-block's 128 bytes of quants are four runs of 32 bytes; byte t of run i holds value
// t of sub-block 2i (low nibble) and of 2i + 1 (high nibble), q5_k's fifth bit of value t of
// sub-block s being bit s of qh byte t. Two 64-byte loads and two 128-bit lane shuffles give
// w0 (bytes 0..15 of run i in 128-bit lane i) and w1 (bytes 16..31); their nibbles are
// XInt16GroupBytes's parts 0 and 1 (w0) and 2 and 3 (w1). So in parts 0 and 2 (the low
// nibbles) lane i is sub-block 2i, and in parts 1 and 3 sub-block 2i + 1: per nibble, the two
// parts' Σ q · h and Σ l · q (four vpdpbusd) share 32-bit lanes, joined into one lane of two
// words (Σ l · q low, Σ q · h high) and multiplied by the lane's sub-block scale as the words
// (sc, 256 · sc) with one vpdpwssd. The scale words come from the 8 scale bytes with one
// in-lane byte shuffle per nibble. The mins take -dmin · mn times x's f32 sums of the
// sub-blocks, as the 16-bit kernels do.
//
// Each super-block's integer sum is scaled once in f32 by d times x's group scale.
//
// Integer bounds per 32-bit lane and super-block (|x| <= 32767, h in [-128, 127], l in
// [0, 255], sc in [0, 63]; a nibble's lane sums 8 values, 4 from each of its two parts):
//   q4_k: q in [0, 15]: Σ q · h within ±8 · 15 · 128 = ±15,360 (a word), Σ l · q in
//         [0, 30,600] (below 2^15, so it adds no carry and reads as a non-negative word);
//         sc · (256 · Σ q · h + Σ l · q) within ±63 · 3,962,760 = ±249,653,880 per nibble.
//   q5_k: q in [0, 31]: Σ q · h within ±31,744 (a word); Σ l · q over 8 values may pass
//         2^15, so each part's Σ l · q (at most 4 · 255 · 31 = 31,620) is its own word;
//         sc · (256 · Σ q · h + Σ l · q) within ±63 · 8,189,704 = ±515,951,352 per nibble.
// Two nibbles stay within ±1,031,902,704 < 2^31, so no lane overflows; the sums' f32
// conversion rounds once per super-block, as the 16-bit kernels' does.
//
// q6_k (x in XInt16GroupOrder::values): weight j = d · sc[j / 16] · (q_j - 32), q_j 6 bits
// (4 low bits in ql, 2 high bits in qh), sc a signed byte per 16 values. Per half of 128
// values, one 64-byte load of ql holds in its 128-bit lane i the low bits of sub-blocks i
// (low nibbles) and 4 + i (high nibbles) of the half, and the half's 32 qh bytes read twice
// over (both 256-bit halves) hold their high bits: bit pair 0 / 1 in lanes 0, 1 / 2, 3 for
// the low nibbles, 2 / 3 for the high ones, each moved to bits 4, 5 with one vgf2p8affineqb.
// So part j of x (values 64 j .. 64 j + 63) meets the quants q (bytes 0..63) of sub-block
// 4 j + i in lane i. Per part: Σ q · h (q unsigned, h signed) added to x's -32 · Σ h gives
// Σ (q - 32) · h, and Σ l · (q - 32) (l unsigned, q - 32 signed, so of either sign) is put
// beside it as the low word of the lane (a bitwise join: an addition would borrow from the
// high word), multiplied by the sub-block's words (sc, 256 · sc) with one vpdpwssd, as q4_k's
// nibbles are; the 16 scale dwords go to their lanes with one vpermd per part.
//
// q6_k's integer bounds per 32-bit lane (q in [0, 63], |q - 32| <= 32, sc in [-128, 127]):
// Σ (q - 32) · h within ±4 · 32 · 128 = ±16,384 and Σ l · (q - 32) within ±4 · 255 · 32 =
// ±32,640, both exact words; a lane sums 4 values of each of the 4 parts, so its total is
// at most 16 · 4096 · 32767 = 2,147,418,112 < 2^31 in magnitude, exact, as in the 16-bit
// kernel (kquant_int16.cpp).
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "rows.h"
#include "simd.h"

#if ONEPASS_CPU_X86
ONEPASS_AVX512_VNNI_BEGIN
namespace onepass::cpu::avx512_vnni {
namespace {

// Byte offsets inside a group of XInt16GroupBytes: part j's l at 128 j, its h at 128 j + 64,
// the sums after the four parts.
constexpr int64_t kPartBytes = 128;
constexpr int64_t kSums = 4 * kPartBytes;
static_assert(kSums + 64 == kXInt16GroupBytes);

// The 8 scales sc and mins mn (6 bits each) of a q4_k / q5_k super-block at b as bytes:
// sc[0..3], mn[0..3], sc[4..7], mn[4..7]. The 12 packed bytes (ops::kquant_scale_min) are
// unpacked in two 64-bit words in general registers, off the vector ports.
inline __m128i scales_and_mins(const uint8_t* b) {
  uint64_t low;
  uint32_t top;
  std::memcpy(&low, b + 4, 8);
  std::memcpy(&top, b + 12, 4);
  const uint64_t first = low & 0x3f3f3f3f3f3f3f3fu;
  const uint64_t nibbles = (top | uint64_t{top >> 4} << 32) & 0x0f0f0f0f0f0f0f0fu;
  const uint64_t second = nibbles | ((low >> 6) & 0x0303030303030303u) << 4;
  return _mm_set_epi64x(static_cast<long long>(second), static_cast<long long>(first));
}

// Byte of sub-block s's scale, and of its min, in scales_and_mins.
constexpr int scale_byte(int s) { return s < 4 ? s : 4 + s; }

// vpshufb's index (per 128-bit lane i) putting sub-block 2i + n's scale byte at bytes 0 and 3
// of every dword and zero elsewhere: the words (sc, 256 · sc).
template <int n>
inline __m512i scale_word_index() {
  const auto lane = [](int i) {
    const auto at = static_cast<uint32_t>(scale_byte(2 * i + n));
    return static_cast<int>(at | 0x8080u << 8 | at << 24);
  };
  return _mm512_setr_epi32(lane(0), lane(0), lane(0), lane(0), lane(1), lane(1), lane(1), lane(1), lane(2), lane(2),
                           lane(2), lane(2), lane(3), lane(3), lane(3), lane(3));
}

// vgf2p8affineqb's matrix (one per qword; result bit i is the parity of the byte and matrix
// byte 7 - i) taking bits 4..7 of each byte to bits 0..3.
inline __m512i high_nibble_matrix() {
  return _mm512_set1_epi64(0x1020408000000000ll);
}

// The matrix taking bit s of each byte to bit 4 (q5_k's fifth bit), s = 2i + n in 128-bit
// lane i.
template <int n>
inline __m512i fifth_bit_matrix() {
  const auto at = [](int s) { return static_cast<long long>((uint64_t{1} << s) << 24); };
  return _mm512_setr_epi64(at(n), at(n), at(2 + n), at(2 + n), at(4 + n), at(4 + n), at(6 + n), at(6 + n));
}

// q4_k (kFifthBit false) and q5_k: acc + x_scale · Σ_j d · sc · q_j x_j and mins +
// (-dmin · mn) · (x's sub-block sums) over the super-block at wb.
template <bool kFifthBit>
struct KQuant {
  static constexpr int64_t kBytes = kFifthBit ? 176 : 144;
  static constexpr int64_t kGroupBytes = kXInt16GroupBytes;
  static constexpr int64_t kPrefetchBytes = 4096;
  static void super_block(const uint8_t* wb, const uint8_t* xg, float x_scale, __m512& acc, __m256& mins) {
    const uint8_t* qs = wb + (kFifthBit ? 48 : 16);
    const __m512i v0 = _mm512_loadu_si512(qs);
    const __m512i v1 = _mm512_loadu_si512(qs + 64);
    // Lane i: bytes 0..15 (w0) or 16..31 (w1) of run i.
    const __m512i w0 = _mm512_shuffle_i64x2(v0, v1, _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i w1 = _mm512_shuffle_i64x2(v0, v1, _MM_SHUFFLE(3, 1, 3, 1));
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    __m512i q[4] = {_mm512_and_si512(w0, low4), _mm512_gf2p8affine_epi64_epi8(w0, high_nibble_matrix(), 0),
                    _mm512_and_si512(w1, low4), _mm512_gf2p8affine_epi64_epi8(w1, high_nibble_matrix(), 0)};
    if constexpr (kFifthBit) {
      // Bytes 0..15 (for w0) and 16..31 (for w1) of qh in every lane.
      const __m512i qh0 = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 16)));
      const __m512i qh1 = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 32)));
      q[0] = _mm512_or_si512(q[0], _mm512_gf2p8affine_epi64_epi8(qh0, fifth_bit_matrix<0>(), 0));
      q[1] = _mm512_or_si512(q[1], _mm512_gf2p8affine_epi64_epi8(qh0, fifth_bit_matrix<1>(), 0));
      q[2] = _mm512_or_si512(q[2], _mm512_gf2p8affine_epi64_epi8(qh1, fifth_bit_matrix<0>(), 0));
      q[3] = _mm512_or_si512(q[3], _mm512_gf2p8affine_epi64_epi8(qh1, fifth_bit_matrix<1>(), 0));
    }
    const __m128i scm = scales_and_mins(wb);
    const __m512i scm4 = _mm512_broadcast_i32x4(scm);
    __m512i sum = _mm512_setzero_si512();
    auto nibble = [&](auto n_constant) {
      constexpr int n = decltype(n_constant)::value;
      const __m512i scales = _mm512_shuffle_epi8(scm4, scale_word_index<n>());
      const uint8_t* xa = xg + kPartBytes * n;        // part n (w0)
      const uint8_t* xb = xg + kPartBytes * (2 + n);  // part 2 + n (w1)
      __m512i high = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[n], _mm512_load_si512(xa + 64));
      high = _mm512_dpbusd_epi32(high, q[2 + n], _mm512_load_si512(xb + 64));
      __m512i joined = _mm512_dpbusd_epi32(_mm512_slli_epi32(high, 16), _mm512_load_si512(xa), q[n]);
      if constexpr (kFifthBit) {
        sum = _mm512_dpwssd_epi32(sum, joined, scales);
        // A lone word: its high word 0 takes 256 · sc times 0.
        joined = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_load_si512(xb), q[2 + n]);
      } else {
        joined = _mm512_dpbusd_epi32(joined, _mm512_load_si512(xb), q[2 + n]);
      }
      sum = _mm512_dpwssd_epi32(sum, joined, scales);
    };
    nibble(std::integral_constant<int, 0>{});
    nibble(std::integral_constant<int, 1>{});
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(half_at(wb) * x_scale), acc);
    // As kquant_int16.cpp's kasym_mins, so that the mins round as there.
    const __m256i mn = _mm256_cvtepu8_epi32(_mm_shuffle_epi32(scm, _MM_SHUFFLE(3, 3, 3, 1)));
    const __m256 m = _mm256_mul_ps(_mm256_cvtepi32_ps(mn),
                                   _mm256_set1_ps(-half_at(wb + 2)));
    mins = _mm256_fmadd_ps(m, _mm256_load_ps(reinterpret_cast<const float*>(xg + kSums)), mins);
  }
};

// q6_k: acc + x_scale · Σ_j d · sc · (q_j - 32) x_j over the super-block at wb (210 bytes:
// ql[128], qh[64], 16 signed scales, d); x's group in XInt16GroupOrder::values.
struct Q6K {
  static constexpr int64_t kBytes = 210;
  static constexpr int64_t kGroupBytes = kXInt16ValuesGroupBytes;
  static constexpr int64_t kPart = kGroupBytes / 4;  // a part's l, h and sums
  static_assert(kPart == kPartBytes + 64);
  // Two rows of 8 super-blocks (k = 2048) read from memory at 23 GB/s with 8 KiB, 16 GB/s
  // with 4 KiB (bench_quant_cpu --threads 1 --shape 2048x2048, cold).
  static constexpr int64_t kPrefetchBytes = 8192;

  // vgf2p8affineqb's matrix moving bit pair s (2s, 2s + 1) of each byte to bits 4, 5, with
  // s = 2n in 128-bit lanes 0, 1 and 2n + 1 in lanes 2, 3 (n = 0 for the low nibbles'
  // values, 1 for the high ones').
  template <int n>
  static __m512i top_bits_matrix() {
    const auto pair = [](int s) {
      return static_cast<long long>((uint64_t{1} << (2 * s)) << 24 | (uint64_t{1} << (2 * s + 1)) << 16);
    };
    return _mm512_setr_epi64(pair(2 * n), pair(2 * n), pair(2 * n), pair(2 * n), pair(2 * n + 1), pair(2 * n + 1),
                             pair(2 * n + 1), pair(2 * n + 1));
  }

  // vpermd's index putting scale dword 4 j + i in every dword of lane i.
  template <int j>
  static __m512i part_scale_index() {
    return _mm512_setr_epi32(4 * j, 4 * j, 4 * j, 4 * j, 4 * j + 1, 4 * j + 1, 4 * j + 1, 4 * j + 1, 4 * j + 2,
                             4 * j + 2, 4 * j + 2, 4 * j + 2, 4 * j + 3, 4 * j + 3, 4 * j + 3, 4 * j + 3);
  }

  static void super_block(const uint8_t* wb, const uint8_t* xg, float x_scale, __m512& acc, __m256&) {
    const __m512i word_mask = _mm512_set1_epi32(0xFFFF);
    const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 192)));
    // The words (sc, 256 · sc): (sc & 0xFFFF) | sc << 24, imm 0xEC is (A & C) | B.
    const __m512i scales = _mm512_ternarylogic_epi32(sc, _mm512_slli_epi32(sc, 24), word_mask, 0xEC);
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i bias = _mm512_set1_epi8(32);
    __m512i sum = _mm512_setzero_si512();
    auto part = [&](auto j_constant, __m512i q) {
      constexpr int j = decltype(j_constant)::value;
      const uint8_t* xp = xg + kPart * j;
      const __m512i high = _mm512_dpbusd_epi32(_mm512_load_si512(xp + kPartBytes), q, _mm512_load_si512(xp + 64));
      const __m512i low = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_load_si512(xp), _mm512_sub_epi8(q, bias));
      // The words (low, high) of each lane: high << 16 | (low & 0xFFFF), imm 0xF8 is A | (B & C).
      // (Adding the signed low to high << 16 would borrow from the high word.)
      const __m512i joined = _mm512_ternarylogic_epi32(_mm512_slli_epi32(high, 16), low, word_mask, 0xF8);
      sum = _mm512_dpwssd_epi32(sum, joined, _mm512_permutexvar_epi32(part_scale_index<j>(), scales));
    };
    auto half = [&](auto h_constant) {
      constexpr int h = decltype(h_constant)::value;
      const __m512i low = _mm512_loadu_si512(wb + 64 * h);
      const __m512i top =
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 128 + 32 * h)));
      // (A & B) | C: imm 0xEA.
      part(std::integral_constant<int, 2 * h>{},
           _mm512_ternarylogic_epi32(low, low4, _mm512_gf2p8affine_epi64_epi8(top, top_bits_matrix<0>(), 0), 0xEA));
      part(std::integral_constant<int, 2 * h + 1>{},
           _mm512_ternarylogic_epi32(_mm512_srli_epi16(low, 4), low4,
                                     _mm512_gf2p8affine_epi64_epi8(top, top_bits_matrix<1>(), 0), 0xEA));
    };
    half(std::integral_constant<int, 0>{});
    half(std::integral_constant<int, 1>{});
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(half_at(wb + 208) * x_scale), acc);
  }
};

// R weight rows with one row of x, super-block by super-block, each format asking for its
// weights Fmt::kPrefetchBytes ahead of those being read (see block32_int16.cpp's
// dot_weight_rows_r); a row's value does not depend on R.
template <typename Fmt, int R>
void dot_rows_r(const uint8_t* w, int64_t w_row_bytes, const XInt16GroupBytes& x, float* out) {
  const int64_t blocks = x.k / 256;
  const int64_t lead = std::max<int64_t>(Fmt::kPrefetchBytes, R * w_row_bytes);
  __m512 acc[R];
  __m256 mins[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm512_setzero_ps();
    mins[r] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t o = 0; o < R * Fmt::kBytes; o += 64) __builtin_prefetch(w + lead + b * R * Fmt::kBytes + o, 0, 2);
    const uint8_t* xg = x.groups + b * Fmt::kGroupBytes;
    const float scale = x.group_scale[b];
    for (int r = 0; r < R; ++r) Fmt::super_block(w + r * w_row_bytes + b * Fmt::kBytes, xg, scale, acc[r], mins[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(acc[r]) + simd::hsum(mins[r]);
}

// DotWeightRowsGroupBytesFn: two weight rows at a time. Two streams of weights read from
// memory faster than four (bench_quant_cpu's cold q4_k and q5_k rows, 1 and 2 threads),
// and the products keep pace with either (q6_k's too).
template <typename Fmt>
void dot_weight_rows(const void* rows, int64_t w_row_bytes, int64_t n, const XInt16GroupBytes& x, float* out) {
  const auto* w = static_cast<const uint8_t*>(rows);
  for_weight_row_groups<2>(n, [&]<int kRows>(int64_t r) {
    dot_rows_r<Fmt, kRows>(w + r * w_row_bytes, w_row_bytes, x, out + r);
  });
}

}  // namespace
}  // namespace onepass::cpu::avx512_vnni
ONEPASS_AVX512_VNNI_END
#endif  // ONEPASS_CPU_X86

namespace onepass::cpu {

DotWeightRowsGroupBytesFn kquant_split_x_dot_weight_rows(DType w, Isa isa) {
#if ONEPASS_CPU_X86
  if (isa != Isa::avx512_vnni) return nullptr;
  if (w == DType::q4_k) return avx512_vnni::dot_weight_rows<avx512_vnni::KQuant<false>>;
  if (w == DType::q5_k) return avx512_vnni::dot_weight_rows<avx512_vnni::KQuant<true>>;
  if (w == DType::q6_k) return avx512_vnni::dot_weight_rows<avx512_vnni::Q6K>;
#else
  (void)w;
  (void)isa;
#endif
  return nullptr;
}

}  // namespace onepass::cpu
