// q4_0, q4_1, q5_0 and q5_1 weight rows times one row of x on Isa::avx512_vnni, with x
// rounded to 16-bit integers (XInt16's integers and group scales) and split into bytes,
// x = 256 · h + l (XInt16Bytes), so that the weights' 4- or 5-bit values multiply x with
// vpdpbusd as they are, four bytes per 32-bit lane, where the 16-bit products
// (block32_int16.cpp) first widen every value to a word.
//
// Four consecutive blocks of a row fill one vector (one byte permute, vpermt2b, hence VBMI
// on top of avx512_vnni), block b in the 32-bit lanes j with j % 4 = b: one int -> f32
// conversion and one FMA cover the four blocks, and their scales are four f16 repeated
// over the 128-bit lanes, gathered in general registers and converted in one 128-bit
// instruction. Per four blocks and row: the permute, two nibble operations, four vpdpbusd,
// one vpdpwssd joining the high and low byte sums, the scales' conversion and broadcast,
// the products' conversion and FMA; the 16-bit kernel spends about five vector instructions
// per block. The 5-bit formats add their fifth bits to the nibbles: per four blocks, two
// byte permutes put each value's qh byte beside it, two byte tests pick its bit into a
// mask, two masked byte additions add 16.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "onepass/core/error.h"
#include "rows.h"
#include "simd.h"

#if ONEPASS_CPU_X86
ONEPASS_AVX512_VNNI_VBMI_BEGIN
namespace onepass::cpu::avx512_vnni {
namespace {

// Block formats: bytes per block, where its 16 bytes of nibbles start (byte i: value i
// low, value i + 16 high), where its 32 bits of fifth bits start (bit j: value j; -1: none),
// the offset of its values in units of -8 (q4_0: q - 8, q5_0: q - 16; 0 with an additive
// m, an f16 after the f16 d, when kOffset). tail(quad): the quad's bytes past its first 64.
struct Q4_0 {
  static constexpr int64_t kBytes = 18;
  static constexpr int64_t kNibbles = 2;
  static constexpr int64_t kFifth = -1;
  static constexpr int kEights = 1;
  static constexpr bool kOffset = false;
  static __m512i tail(const uint8_t* quad) {
    return _mm512_castsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(quad + 64)));
  }
};

struct Q4_1 {
  static constexpr int64_t kBytes = 20;
  static constexpr int64_t kNibbles = 4;
  static constexpr int64_t kFifth = -1;
  static constexpr int kEights = 0;
  static constexpr bool kOffset = true;
  static __m512i tail(const uint8_t* quad) {
    return _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(quad + 64)));
  }
};

struct Q5_0 {
  static constexpr int64_t kBytes = 22;
  static constexpr int64_t kNibbles = 6;
  static constexpr int64_t kFifth = 2;
  static constexpr int kEights = 2;
  static constexpr bool kOffset = false;
  static __m512i tail(const uint8_t* quad) {  // 24 bytes
    return _mm512_castsi256_si512(_mm256_maskz_loadu_epi8(0xFFFFFF, quad + 64));
  }
};

struct Q5_1 {
  static constexpr int64_t kBytes = 24;
  static constexpr int64_t kNibbles = 8;
  static constexpr int64_t kFifth = 4;
  static constexpr int kEights = 0;
  static constexpr bool kOffset = true;
  static __m512i tail(const uint8_t* quad) {
    return _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(quad + 64)));
  }
};

// Byte offsets inside a quad of XInt16Bytes.
constexpr int64_t kLow0 = 0, kLow1 = 64, kHigh0 = 128, kHigh1 = 192, kNibbleOffset = 256, kLaneSum = 320;

// Byte index of vpermt2b over a quad's bytes (the first 64, then the rest): 128-bit lane X
// takes block X's 16 bytes of nibbles.
template <typename Fmt>
constexpr std::array<uint8_t, 64> nibble_bytes() {
  std::array<uint8_t, 64> idx{};
  for (int i = 0; i < 64; ++i) {
    const int lane = i / 4;
    idx[i] = static_cast<uint8_t>(lane % 4 * Fmt::kBytes + Fmt::kNibbles + 4 * (lane / 4) + i % 4);
  }
  return idx;
}

template <typename Fmt>
constexpr std::array<uint8_t, 64> kNibbleBytes = nibble_bytes<Fmt>();

// Byte index of vpermt2b for the 5-bit formats: byte i of the nibble permute holds value
// v = 4 (lane / 4) + i % 4 (+ 16 for the high nibbles) of block lane % 4; this index gives
// it the qh byte with v's fifth bit, byte v / 8, and kFifthBit the bit, v % 8.
template <typename Fmt, int kHigh>
constexpr std::array<uint8_t, 64> fifth_bytes() {
  std::array<uint8_t, 64> idx{};
  for (int i = 0; i < 64; ++i) {
    const int lane = i / 4;
    const int v = 4 * (lane / 4) + i % 4 + 16 * kHigh;
    idx[i] = static_cast<uint8_t>(lane % 4 * Fmt::kBytes + Fmt::kFifth + v / 8);
  }
  return idx;
}

template <typename Fmt, int kHigh>
constexpr std::array<uint8_t, 64> kFifthBytes = fifth_bytes<Fmt, kHigh>();

constexpr std::array<uint8_t, 64> fifth_bit() {
  std::array<uint8_t, 64> bit{};
  for (int i = 0; i < 64; ++i) bit[i] = static_cast<uint8_t>(1 << ((4 * (i / 16) + i % 4) % 8));
  return bit;
}

constexpr std::array<uint8_t, 64> kFifthBit = fifth_bit();

// The f16 at p, p + kBytes, p + 2 kBytes and p + 3 kBytes as f32, repeated over the four
// 128-bit lanes; those of blocks from `present` on read as zero.
template <typename Fmt>
inline __m512 four_halves(const uint8_t* p, int64_t present = 4) {
  auto half = [&](int b) {
    uint16_t v = 0;
    if (b < present) std::memcpy(&v, p + b * Fmt::kBytes, 2);
    return static_cast<uint64_t>(v);
  };
  const uint64_t halves = half(0) | half(1) << 16 | half(2) << 32 | half(3) << 48;
  return _mm512_broadcast_f32x4(_mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(halves))));
}

// How far ahead of the weights being read the rows ask for them: see block32_int16.cpp's
// kPrefetchBytes and kPrefetchL1MaxBytes, which measured the same for these rows.
constexpr int64_t kPrefetchBytes = 4096;
constexpr int64_t kPrefetchL1MaxBytes = 16384;

// R weight rows with one row of x: each quad of x is loaded once for the R rows; per row
// and group of 256 values, the quads' products in one f32 sum, scaled by the group's scale
// into the row's total; q4_1's m · Σx per quad in a second f32 sum. `tail` is the number of
// blocks in a last, partial quad (0: none); its missing blocks read as zero bytes.
//
// Integer bounds per 32-bit lane and quad (8 values of one block, q in 0..31, x in
// [-32767, 32767], h in [-128, 127], l in [0, 255]): Σ q · h within ±31 · 128 · 8 = ±31,744
// (which fits the 16 bits vpdpwssd reads of it); Σ q · l within 31 · 255 · 8 = 63,240;
// -16 · Σ x within ±4,194,176; 256 · Σ q · h + Σ q · l - 16 · Σ x within ±12,384,080 < 2^24,
// so the int32 sum and its f32 conversion are exact.
template <typename Fmt, int R, int kLocality>
void dot_rows_r(const uint8_t* w, int64_t w_row_bytes, const XInt16Bytes& x, float* out) {
  const int64_t blocks = x.k / 32;
  const int64_t full_quads = blocks / 4;
  const int64_t tail = blocks % 4;
  const int64_t quads = full_quads + (tail != 0 ? 1 : 0);
  const int64_t lead = std::max<int64_t>(kPrefetchBytes, R * w_row_bytes);
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  // vgf2p8affineqb's matrix (one per qword) taking bits 4..7 of each byte to bits 0..3.
  const __m512i high_nibble = _mm512_set1_epi64(0x1020408000000000ll);
  const __m512i nibble_index = _mm512_loadu_si512(kNibbleBytes<Fmt>.data());
  const __m512i fifth_low_index = Fmt::kFifth >= 0 ? _mm512_loadu_si512(kFifthBytes<Fmt, 0>.data()) : nibble_index;
  const __m512i fifth_high_index = Fmt::kFifth >= 0 ? _mm512_loadu_si512(kFifthBytes<Fmt, 1>.data()) : nibble_index;
  const __m512i fifth_bit = _mm512_loadu_si512(kFifthBit.data());
  const __m512i sixteen = _mm512_set1_epi8(16);
  const __m512i shift8 = _mm512_set1_epi32(256);
  // A partial quad's bytes: in the first 64 (head) and past them (rest, 5-bit formats).
  const int64_t tail_bytes = tail * Fmt::kBytes;
  const __mmask64 tail_mask = tail_bytes >= 64 ? ~0ull : (1ull << tail_bytes) - 1;
  const __mmask64 rest_mask = tail_bytes > 64 ? (1ull << (tail_bytes - 64)) - 1 : 0;
  __m512 acc[R], offsets[R];
  for (int r = 0; r < R; ++r) acc[r] = offsets[r] = _mm512_setzero_ps();
  for (int64_t q0 = 0, g = 0; q0 < quads; q0 += kXInt16Group / kXInt16BytesQuad, ++g) {
    const int64_t q1 = std::min(quads, q0 + kXInt16Group / kXInt16BytesQuad);
    __m512 part[R];
    for (int r = 0; r < R; ++r) part[r] = _mm512_setzero_ps();
    auto quad = [&](int64_t qd, auto partial_constant) {
      constexpr bool partial = decltype(partial_constant)::value;
      for (int64_t o = 0; o < R * 4 * Fmt::kBytes; o += 64) {
        __builtin_prefetch(w + lead + qd * R * 4 * Fmt::kBytes + o, 0, kLocality);
      }
      const uint8_t* xq = x.quads + qd * x.quad_bytes;
      const __m512i low0 = _mm512_load_si512(xq + kLow0);
      const __m512i low1 = _mm512_load_si512(xq + kLow1);
      const __m512i high0 = _mm512_load_si512(xq + kHigh0);
      const __m512i high1 = _mm512_load_si512(xq + kHigh1);
      for (int r = 0; r < R; ++r) {
        const uint8_t* wq = w + r * w_row_bytes + qd * 4 * Fmt::kBytes;
        // In a partial quad the bytes past its blocks read as zero (so do their d and m).
        const __m512i head = partial ? _mm512_maskz_loadu_epi8(tail_mask, wq) : _mm512_loadu_si512(wq);
        const __m512i rest = partial ? _mm512_maskz_loadu_epi8(rest_mask, wq + 64) : Fmt::tail(wq);
        const __m512i raw = _mm512_permutex2var_epi8(head, nibble_index, rest);
        __m512i q_low = _mm512_and_si512(raw, nibble);  // values 0..15
        __m512i q_high = _mm512_gf2p8affine_epi64_epi8(raw, high_nibble, 0);
        if constexpr (Fmt::kFifth >= 0) {
          const __mmask64 fifth_low = _mm512_test_epi8_mask(_mm512_permutex2var_epi8(head, fifth_low_index, rest), fifth_bit);
          const __mmask64 fifth_high = _mm512_test_epi8_mask(_mm512_permutex2var_epi8(head, fifth_high_index, rest), fifth_bit);
          q_low = _mm512_mask_add_epi8(q_low, fifth_low, q_low, sixteen);
          q_high = _mm512_mask_add_epi8(q_high, fifth_high, q_high, sixteen);
        }
        // Σ l · q (l unsigned, q as signed bytes 0..31), from the offset's -8 · Σ x per eight.
        __m512i sum_low = _mm512_setzero_si512();
        if constexpr (Fmt::kEights > 0) {
          const __m512i eights = _mm512_load_si512(xq + kNibbleOffset);
          sum_low = Fmt::kEights == 1 ? eights : _mm512_add_epi32(eights, eights);
        }
        sum_low = _mm512_dpbusd_epi32(sum_low, low0, q_low);
        sum_low = _mm512_dpbusd_epi32(sum_low, low1, q_high);
        // Σ q · h (q unsigned, h signed).
        __m512i sum_high = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q_low, high0);
        sum_high = _mm512_dpbusd_epi32(sum_high, q_high, high1);
        // 256 · Σ q · h + Σ q · l in one instruction: the low word of each lane of sum_high
        // (which fits in 16 bits) times 256, the high word times 0.
        const __m512i products = _mm512_dpwssd_epi32(sum_low, sum_high, shift8);
        // The four blocks' d (and m) as f32 in lane order, gathered as integers (off the
        // vector ports) and converted once.
        const int64_t present = partial ? tail : 4;
        const __m512 d = four_halves<Fmt>(wq, present);
        const __m512 m = Fmt::kOffset ? four_halves<Fmt>(wq + 2, present) : _mm512_setzero_ps();
        part[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(products), d, part[r]);
        if constexpr (Fmt::kOffset) {
          offsets[r] = _mm512_fmadd_ps(m, _mm512_load_ps(reinterpret_cast<const float*>(xq + kLaneSum)), offsets[r]);
        }
      }
    };
    const int64_t full_end = std::min(q1, full_quads);
    for (int64_t qd = q0; qd < full_end; ++qd) quad(qd, std::false_type{});
    if (full_end < q1) quad(full_end, std::true_type{});
    const __m512 scale = _mm512_set1_ps(x.group_scale[g]);
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(part[r], scale, acc[r]);
  }
  for (int r = 0; r < R; ++r) {
    out[r] = Fmt::kOffset ? _mm512_reduce_add_ps(_mm512_add_ps(acc[r], offsets[r])) : _mm512_reduce_add_ps(acc[r]);
  }
}

template <typename Fmt, int kLocality>
void dot_rows_at(const uint8_t* w, int64_t w_row_bytes, int64_t n, const XInt16Bytes& x, float* out) {
  for_weight_row_groups<4>(n, [&]<int kRows>(int64_t r) {
    dot_rows_r<Fmt, kRows, kLocality>(w + r * w_row_bytes, w_row_bytes, x, out + r);
  });
}

// DotWeightRowsBytesFn: four weight rows at a time, the weights asked for ahead in address
// order, into L2 past kPrefetchL1MaxBytes of lead (block32_int16.cpp explains both).
template <typename Fmt>
void dot_weight_rows(const void* rows, int64_t w_row_bytes, int64_t n, const XInt16Bytes& x, float* out) {
  const auto* w = static_cast<const uint8_t*>(rows);
  if (4 * w_row_bytes > kPrefetchL1MaxBytes) return dot_rows_at<Fmt, 2>(w, w_row_bytes, n, x, out);
  dot_rows_at<Fmt, 3>(w, w_row_bytes, n, x, out);
}

// Per 128-bit lane of v (4 values each), the sum of its values, as 4 values.
inline __m128i lane_sums(__m512i v) {
  v = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_BADC));
  v = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_CDAB));
  return _mm512_castsi512_si128(_mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), v));
}

inline __m128 lane_sums(__m512 v) {
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4E));
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0xB1));
  return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), v));
}

// Rounds as block32_int16.cpp's round_row does (per group, step = largest |x| / 32767,
// q = round(x / step), a non-finite scale for a group with a non-finite value), then
// splits the integers into bytes: first block b of a quad in 128-bit lane b, then each
// quad's 32-bit lanes transposed (4 x 4) into the order XInt16Bytes describes.
void round_row(const float* x, int64_t k, uint8_t* quads, int64_t quad_bytes, float* group_scale, bool sums) {
  const int64_t blocks = k / 32;
  if (blocks % 4 != 0) std::memset(quads + blocks / 4 * quad_bytes, 0, static_cast<size_t>(quad_bytes));
  const __m512i byte = _mm512_set1_epi32(0xFF);
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
    for (int64_t j = g0; j < g1; j += 32) {
      const int64_t b = j / 32;
      uint8_t* quad = quads + b / 4 * quad_bytes + 16 * (b % 4);
      const __m512 x0 = _mm512_loadu_ps(x + j), x1 = _mm512_loadu_ps(x + j + 16);
      const __m512i v0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, inverse));
      const __m512i v1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, inverse));
      auto store = [](uint8_t* p, __m128i v) { _mm_store_si128(reinterpret_cast<__m128i*>(p), v); };
      store(quad + kLow0, _mm512_cvtepi32_epi8(_mm512_and_si512(v0, byte)));
      store(quad + kLow1, _mm512_cvtepi32_epi8(_mm512_and_si512(v1, byte)));
      store(quad + kHigh0, _mm512_cvtepi32_epi8(_mm512_srai_epi32(v0, 8)));
      store(quad + kHigh1, _mm512_cvtepi32_epi8(_mm512_srai_epi32(v1, 8)));
      store(quad + kNibbleOffset, _mm_mullo_epi32(lane_sums(_mm512_add_epi32(v0, v1)), _mm_set1_epi32(-8)));
      if (sums) _mm_store_ps(reinterpret_cast<float*>(quad + kLaneSum), lane_sums(_mm512_add_ps(x0, x1)));
    }
  }
  // Lane 4 g + b takes lane 4 b + g: block b's values 4 g .. 4 g + 3.
  const __m512i transpose = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  for (int64_t q = 0; q < (blocks + 3) / 4; ++q) {
    for (int64_t o = 0; o < quad_bytes; o += 64) {
      uint8_t* p = quads + q * quad_bytes + o;
      _mm512_store_si512(p, _mm512_permutexvar_epi32(transpose, _mm512_load_si512(p)));
    }
  }
}

}  // namespace
}  // namespace onepass::cpu::avx512_vnni
ONEPASS_AVX512_VNNI_VBMI_END
#endif  // ONEPASS_CPU_X86

namespace onepass::cpu {

XInt16Bytes round_x_int16_bytes(const float* x, int64_t k, bool lane_sums) {
  check(k % 32 == 0, "cpu", "16-bit x in bytes needs rows of whole 32-value blocks, got k = ", k);
  const int64_t quads = (k + kXInt16BytesQuad - 1) / kXInt16BytesQuad;
  const int64_t groups = (k + kXInt16Group - 1) / kXInt16Group;
  XInt16Bytes r;
  r.k = k;
  r.quad_bytes = lane_sums ? 384 : 320;
  auto* base = reinterpret_cast<uint8_t*>(thread_scratch((quads * r.quad_bytes + 4 * groups + 3) / 4, 1));
#if ONEPASS_CPU_X86
  check(isa_supported(Isa::avx512_vnni) && __builtin_cpu_supports("avx512vbmi"), "cpu",
        "16-bit x in bytes is an avx512_vnni + VBMI layout");
  auto* scales = reinterpret_cast<float*>(base + quads * r.quad_bytes);
  avx512_vnni::round_row(x, k, base, r.quad_bytes, scales, lane_sums);
  r.quads = base;
  r.group_scale = scales;
#else
  (void)x;
  (void)base;
  check(false, "cpu", "16-bit x in bytes is an x86-64 SIMD path");
#endif
  return r;
}

DotWeightRowsBytesFn q4_split_x_dot_weight_rows(DType w, Isa isa) {
#if ONEPASS_CPU_X86
  static const bool vbmi = __builtin_cpu_supports("avx512vbmi");
  if (isa != Isa::avx512_vnni || !vbmi) return nullptr;
  if (w == DType::q4_0) return avx512_vnni::dot_weight_rows<avx512_vnni::Q4_0>;
  if (w == DType::q4_1) return avx512_vnni::dot_weight_rows<avx512_vnni::Q4_1>;
  if (w == DType::q5_0) return avx512_vnni::dot_weight_rows<avx512_vnni::Q5_0>;
  if (w == DType::q5_1) return avx512_vnni::dot_weight_rows<avx512_vnni::Q5_1>;
#else
  (void)w;
  (void)isa;
#endif
  return nullptr;
}

}  // namespace onepass::cpu
