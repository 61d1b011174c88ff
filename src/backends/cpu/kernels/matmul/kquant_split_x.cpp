// q4_k and q5_k weight rows times one row of x on Isa::avx512_vnni, with x rounded to 16-bit
// integers (XInt16's integers and group scales, one group per super-block) and split into
// bytes, x = 256 · h + l, in XInt16GroupOrder::nibbles (XInt16GroupBytes), so that the 4- or
// 5-bit quants multiply x as bytes with vpdpbusd, four values per 32-bit lane, where the
// 16-bit products (kquant_int16.cpp) first widen every quant to a word and multiply it by its
// scale.
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
  __m256 mins[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm512_setzero_ps();
    mins[r] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t o = 0; o < R * Fmt::kBytes; o += 64) __builtin_prefetch(w + lead + b * R * Fmt::kBytes + o, 0, 2);
    const uint8_t* xg = x.groups + b * kXInt16GroupBytes;
    const float scale = x.group_scale[b];
    for (int r = 0; r < R; ++r) Fmt::super_block(w + r * w_row_bytes + b * Fmt::kBytes, xg, scale, acc[r], mins[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(acc[r]) + simd::hsum(mins[r]);
}

// DotWeightRowsGroupBytesFn: two weight rows at a time. Two streams of weights read from
// memory faster than four (bench_quant_cpu's cold q4_k and q5_k rows, 1 and 2 threads),
// and the products keep pace with either.
template <typename Fmt>
void dot_weight_rows(const void* rows, int64_t w_row_bytes, int64_t n, const XInt16GroupBytes& x, float* out) {
  const auto* w = static_cast<const uint8_t*>(rows);
  int64_t r = 0;
  for (; r + 2 <= n; r += 2) dot_rows_r<Fmt, 2>(w + r * w_row_bytes, w_row_bytes, x, out + r);
  for (; r < n; ++r) dot_rows_r<Fmt, 1>(w + r * w_row_bytes, w_row_bytes, x, out + r);
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
#else
  (void)w;
  (void)isa;
#endif
  return nullptr;
}

}  // namespace onepass::cpu
