// Decoding of the GGML block formats for the CUDA matrix kernels, written once for the
// host and the device so the bit manipulation is unit-tested on machines without a GPU
// (tests/unit/quant_dot_test.cpp compiles this header with the host compiler).
//
// The unit of work is 32 weights of one row, matched with 32 activations that were
// quantized to int8 with one scale (XGroup). For the 32-value formats a unit is one
// block; for the k-quants it is one of the 8 sub-blocks of a 256-value super-block.
// Dot products of 4 int8 pairs at a time use dp4a; the offsets of the formats (q - 8,
// mins, q - 32) are applied with exact sums of the original activations.
#pragma once

#include <cstdint>
#include <cstring>

#include "onepass/core/dtype.h"
#include "onepass/core/half.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define ONEPASS_HD __host__ __device__ __forceinline__
#else
#define ONEPASS_HD inline
#endif

// Unrolling matters on the device only (and the host compiler warns about the pragma).
#if defined(__CUDA_ARCH__)
#define ONEPASS_UNROLL _Pragma("unroll")
#else
#define ONEPASS_UNROLL
#endif

namespace onepass::cuda::quantdot {

/// 32 activations quantized as x ~ d * q, plus exact sums of the two halves of the
/// original values (for the formats with offsets). The int8 values are held in registers
/// (4 per int), loaded once per unit and shared by every weight row dotted with them.
struct XGroup {
  int q[8];
  float d;
  float sum_lo;  // values 0..15
  float sum_hi;  // values 16..31

  /// From 32 int8 values at q (16-byte aligned): two 16-byte loads on the device.
  ONEPASS_HD static XGroup load(const int8_t* q, float d, float sum_lo, float sum_hi) {
    XGroup g;
#if defined(__CUDA_ARCH__)
    const int4 a = reinterpret_cast<const int4*>(q)[0];
    const int4 b = reinterpret_cast<const int4*>(q)[1];
    g.q[0] = a.x, g.q[1] = a.y, g.q[2] = a.z, g.q[3] = a.w;
    g.q[4] = b.x, g.q[5] = b.y, g.q[6] = b.z, g.q[7] = b.w;
#else
    std::memcpy(g.q, q, sizeof(g.q));
#endif
    g.d = d;
    g.sum_lo = sum_lo;
    g.sum_hi = sum_hi;
    return g;
  }
};

ONEPASS_HD int dp4a(int a, int b, int c) {
#if defined(__CUDA_ARCH__)
  return __dp4a(a, b, c);
#else
  for (int i = 0; i < 4; ++i) {
    c += static_cast<int8_t>(static_cast<uint32_t>(a) >> (8 * i)) *
         static_cast<int8_t>(static_cast<uint32_t>(b) >> (8 * i));
  }
  return c;
#endif
}

ONEPASS_HD uint16_t ld_u16(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint16_t*>(p);
#else
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
#endif
}

ONEPASS_HD float half_bits_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  return f16_to_f32(h);
#endif
}

/// Four bytes from a 2-byte aligned address (every field of every format is).
ONEPASS_HD uint32_t ld_u32_2(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  const auto* h = reinterpret_cast<const uint16_t*>(p);
  return uint32_t{h[0]} | (uint32_t{h[1]} << 16);
#else
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#endif
}

/// N consecutive 4-byte words from a 2-byte aligned address. On the device: N aligned
/// loads (N + 1 when the address is 2 mod 4) joined by funnel shifts, instead of 2 N
/// half-word loads (blocks of 18 and 34 bytes are only 2-byte aligned).
template <int N>
ONEPASS_HD void ld_words_2(const uint8_t* p, uint32_t (&out)[N]) {
#if defined(__CUDA_ARCH__)
  const unsigned misalign = static_cast<unsigned>(reinterpret_cast<uintptr_t>(p) & 2);
  const auto* w = reinterpret_cast<const uint32_t*>(p - misalign);
  uint32_t words[N + 1];
#pragma unroll
  for (int i = 0; i < N; ++i) words[i] = w[i];
  words[N] = misalign != 0 ? w[N] : 0u;  // never past the last byte
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = __funnelshift_r(words[i], words[i + 1], 8 * misalign);
#else
  std::memcpy(out, p, sizeof(out));
#endif
}

/// Scale and min of k-quant sub-block j (q4_k/q5_k), as ops/quant.h documents.
ONEPASS_HD void kquant_scale_min(const uint8_t* s, int j, int& sc, int& mn) {
  if (j < 4) {
    sc = s[j] & 63;
    mn = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

/// Σ q · xq over a 32-value unit of nibbles whose byte j holds values j (low) and j + 16
/// (high), as q4_0 and q4_1 store them: two independent dp4a chains (low and high
/// nibbles), since one chain of eight serialises on dp4a's latency; integer sums are the
/// same in any order.
ONEPASS_HD int nibble_dot(const uint32_t (&w)[4], const XGroup& x) {
  int lo = 0, hi = 0;
ONEPASS_UNROLL
  for (int i = 0; i < 4; ++i) {
    lo = dp4a(static_cast<int>(w[i] & 0x0F0F0F0Fu), x.q[i], lo);
    hi = dp4a(static_cast<int>((w[i] >> 4) & 0x0F0F0F0Fu), x.q[4 + i], hi);
  }
  return lo + hi;
}

template <DType W>
struct Format;

template <>
struct Format<DType::q4_0> {
  static constexpr int kUnits = 1;
  static constexpr int kBlockBytes = 18;
  // w = d (q - 8): d * (xd * sum(q * xq) - 8 * sum(x))
  ONEPASS_HD static float unit_dot(const uint8_t* b, int, const XGroup& x) {
    const float d = half_bits_to_float(ld_u16(b));
    uint32_t w[4];
    ld_words_2(b + 2, w);
    return d * (x.d * static_cast<float>(nibble_dot(w, x)) - 8.0f * (x.sum_lo + x.sum_hi));
  }
  ONEPASS_HD static void dequant(const uint8_t* b, int, float* out) {
    const float d = half_bits_to_float(ld_u16(b));
    for (int j = 0; j < 16; ++j) {
      const int q = b[2 + j];
      out[j] = d * static_cast<float>((q & 0xF) - 8);
      out[j + 16] = d * static_cast<float>((q >> 4) - 8);
    }
  }
};

template <>
struct Format<DType::q4_1> {
  static constexpr int kUnits = 1;
  static constexpr int kBlockBytes = 20;
  // w = d q + m: d * xd * sum(q * xq) + m * sum(x)
  ONEPASS_HD static float unit_dot(const uint8_t* b, int, const XGroup& x) {
    const float d = half_bits_to_float(ld_u16(b));
    const float m = half_bits_to_float(ld_u16(b + 2));
    uint32_t w[4];
    ld_words_2(b + 4, w);
    return d * x.d * static_cast<float>(nibble_dot(w, x)) + m * (x.sum_lo + x.sum_hi);
  }
  ONEPASS_HD static void dequant(const uint8_t* b, int, float* out) {
    const float d = half_bits_to_float(ld_u16(b));
    const float m = half_bits_to_float(ld_u16(b + 2));
    for (int j = 0; j < 16; ++j) {
      const int q = b[4 + j];
      out[j] = d * static_cast<float>(q & 0xF) + m;
      out[j + 16] = d * static_cast<float>(q >> 4) + m;
    }
  }
};

template <>
struct Format<DType::q8_0> {
  static constexpr int kUnits = 1;
  static constexpr int kBlockBytes = 34;
  ONEPASS_HD static float unit_dot(const uint8_t* b, int, const XGroup& x) {
    const float d = half_bits_to_float(ld_u16(b));
    uint32_t w[8];
    ld_words_2(b + 2, w);
    int sum = 0;
ONEPASS_UNROLL
    for (int i = 0; i < 8; ++i) sum = dp4a(static_cast<int>(w[i]), x.q[i], sum);
    return d * x.d * static_cast<float>(sum);
  }
  ONEPASS_HD static void dequant(const uint8_t* b, int, float* out) {
    const float d = half_bits_to_float(ld_u16(b));
    for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
  }
};

template <>
struct Format<DType::q4_k> {
  static constexpr int kUnits = 8;
  static constexpr int kBlockBytes = 144;
  // Sub-block u: w = (d sc) q - (dmin mn), q the nibble (u % 2) of qs[32 (u / 2) + l].
  ONEPASS_HD static float unit_dot(const uint8_t* b, int u, const XGroup& x) {
    const float d = half_bits_to_float(ld_u16(b));
    const float dmin = half_bits_to_float(ld_u16(b + 2));
    int sc, mn;
    kquant_scale_min(b + 4, u, sc, mn);
    const uint8_t* qs = b + 16 + 32 * (u >> 1);
    const int shift = 4 * (u & 1);
    uint32_t w[8];
    ld_words_2(qs, w);
    int sum = 0;
ONEPASS_UNROLL
    for (int i = 0; i < 8; ++i) sum = dp4a(static_cast<int>((w[i] >> shift) & 0x0F0F0F0Fu), x.q[i], sum);
    return (d * static_cast<float>(sc)) * x.d * static_cast<float>(sum) -
           (dmin * static_cast<float>(mn)) * (x.sum_lo + x.sum_hi);
  }
  ONEPASS_HD static void dequant(const uint8_t* b, int u, float* out) {
    const float d = half_bits_to_float(ld_u16(b));
    const float dmin = half_bits_to_float(ld_u16(b + 2));
    int sc, mn;
    kquant_scale_min(b + 4, u, sc, mn);
    const uint8_t* qs = b + 16 + 32 * (u >> 1);
    const int shift = 4 * (u & 1);
    for (int l = 0; l < 32; ++l) {
      out[l] = (d * static_cast<float>(sc)) * static_cast<float>((qs[l] >> shift) & 0xF) - dmin * static_cast<float>(mn);
    }
  }
};

template <>
struct Format<DType::q5_k> {
  static constexpr int kUnits = 8;
  static constexpr int kBlockBytes = 176;
  // As q4_k with a fifth bit: bit u of qh[l].
  ONEPASS_HD static float unit_dot(const uint8_t* b, int u, const XGroup& x) {
    const float d = half_bits_to_float(ld_u16(b));
    const float dmin = half_bits_to_float(ld_u16(b + 2));
    int sc, mn;
    kquant_scale_min(b + 4, u, sc, mn);
    const uint8_t* qh = b + 16;
    const uint8_t* qs = b + 48 + 32 * (u >> 1);
    const int shift = 4 * (u & 1);
    int sum = 0;
ONEPASS_UNROLL
    for (int i = 0; i < 8; ++i) {
      // Half-word loads here: whole-word arrays of qs and qh cost q5_k/q6_k spills.
      const uint32_t lo = (ld_u32_2(qs + 4 * i) >> shift) & 0x0F0F0F0Fu;
      const uint32_t hi = ((ld_u32_2(qh + 4 * i) >> u) & 0x01010101u) << 4;
      sum = dp4a(static_cast<int>(lo | hi), x.q[i], sum);
    }
    return (d * static_cast<float>(sc)) * x.d * static_cast<float>(sum) -
           (dmin * static_cast<float>(mn)) * (x.sum_lo + x.sum_hi);
  }
  ONEPASS_HD static void dequant(const uint8_t* b, int u, float* out) {
    const float d = half_bits_to_float(ld_u16(b));
    const float dmin = half_bits_to_float(ld_u16(b + 2));
    int sc, mn;
    kquant_scale_min(b + 4, u, sc, mn);
    const uint8_t* qh = b + 16;
    const uint8_t* qs = b + 48 + 32 * (u >> 1);
    const int shift = 4 * (u & 1);
    for (int l = 0; l < 32; ++l) {
      const int q = ((qs[l] >> shift) & 0xF) | (((qh[l] >> u) & 1) << 4);
      out[l] = (d * static_cast<float>(sc)) * static_cast<float>(q) - dmin * static_cast<float>(mn);
    }
  }
};

template <>
struct Format<DType::q6_k> {
  static constexpr int kUnits = 8;
  static constexpr int kBlockBytes = 210;
  // Values 32 u + l (u = 4 h + s): low bits in ql[64 h + 32 (s & 1) + l] (nibble s / 2),
  // high 2 bits at bit 2 s of qh[32 h + l]; scales[2 u] for l < 16, scales[2 u + 1] above.
  // w = (d sc) (q - 32).
  ONEPASS_HD static float unit_dot(const uint8_t* b, int u, const XGroup& x) {
    const int h = u >> 2;
    const int s = u & 3;
    const uint8_t* ql = b + 64 * h + 32 * (s & 1);
    const uint8_t* qh = b + 128 + 32 * h;
    const int lo_shift = 4 * (s >> 1);
    int sum_a = 0;
    int sum_b = 0;
ONEPASS_UNROLL
    for (int i = 0; i < 8; ++i) {
      const uint32_t lo = (ld_u32_2(ql + 4 * i) >> lo_shift) & 0x0F0F0F0Fu;
      const uint32_t hi = ((ld_u32_2(qh + 4 * i) >> (2 * s)) & 0x03030303u) << 4;
      if (i < 4) {
        sum_a = dp4a(static_cast<int>(lo | hi), x.q[i], sum_a);
      } else {
        sum_b = dp4a(static_cast<int>(lo | hi), x.q[i], sum_b);
      }
    }
    const float d = half_bits_to_float(ld_u16(b + 208));
    const float sc_a = d * static_cast<float>(static_cast<int8_t>(b[192 + 2 * u]));
    const float sc_b = d * static_cast<float>(static_cast<int8_t>(b[192 + 2 * u + 1]));
    return x.d * (sc_a * static_cast<float>(sum_a) + sc_b * static_cast<float>(sum_b)) -
           32.0f * (sc_a * x.sum_lo + sc_b * x.sum_hi);
  }
  ONEPASS_HD static void dequant(const uint8_t* b, int u, float* out) {
    const int h = u >> 2;
    const int s = u & 3;
    const uint8_t* ql = b + 64 * h + 32 * (s & 1);
    const uint8_t* qh = b + 128 + 32 * h;
    const float d = half_bits_to_float(ld_u16(b + 208));
    for (int l = 0; l < 32; ++l) {
      const int q = ((ql[l] >> (4 * (s >> 1))) & 0xF) | (((qh[l] >> (2 * s)) & 3) << 4);
      const float sc = d * static_cast<float>(static_cast<int8_t>(b[192 + 2 * u + (l >= 16 ? 1 : 0)]));
      out[l] = sc * static_cast<float>(q - 32);
    }
  }
};

/// __byte_perm without its sign-replicating modes: byte k of the result is byte
/// (s >> 4 k) & 7 of the 8 bytes of x (0..3) and y (4..7).
ONEPASS_HD uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const uint64_t bytes = uint64_t{x} | (uint64_t{y} << 32);
  uint32_t out = 0;
  for (int k = 0; k < 4; ++k) out |= static_cast<uint32_t>((bytes >> (8 * ((s >> (4 * k)) & 7))) & 0xFF) << (8 * k);
  return out;
#endif
}

/// The iq4 grid (ops/quant.h kIq4Values) as int8 bytes of four words, entries 0..15.
constexpr uint32_t kIq4Grid[4] = {0xBFAD9881u, 0xF6EADDCFu, 0x26190D01u, 0x71594535u};

/// Four int8 grid values, byte k = kIq4Values[(s >> 4 k) & 15], from two byte selections
/// (entries 0..7 and 8..15) and a third that picks by bit 3 of each index.
ONEPASS_HD int iq4_word(uint32_t s) {
  const uint32_t lo = byte_perm(kIq4Grid[0], kIq4Grid[1], s & 0x7777u);
  const uint32_t hi = byte_perm(kIq4Grid[2], kIq4Grid[3], s & 0x7777u);
  return static_cast<int>(byte_perm(lo, hi, 0x3210u | ((s & 0x8888u) >> 1)));
}

/// The low (shift 0) or high (shift 4) nibbles of the 4 bytes of w as the selector of
/// iq4_word (nibble k of the result = that nibble of byte k).
ONEPASS_HD uint32_t nibble_selector(uint32_t w, int shift) {
  const uint32_t n = (w >> shift) & 0x0F0F0F0Fu;
  return (n & 0xFu) | ((n >> 4) & 0xF0u) | ((n >> 8) & 0xF00u) | ((n >> 12) & 0xF000u);
}

/// Bits 0..3 of b moved to bit 4 of bytes 0..3 (the fifth bits of four 5-bit values).
ONEPASS_HD uint32_t fifth_bits(uint32_t b) {
  return ((b & 1u) | ((b & 2u) << 7) | ((b & 4u) << 14) | ((b & 8u) << 21)) << 4;
}

/// Σ q · xq over a 32-value unit of 5-bit values (q4_0's nibbles plus bit j of qh).
ONEPASS_HD int five_bit_dot(const uint32_t (&w)[4], uint32_t qh, const XGroup& x) {
  int lo = 0, hi = 0;
ONEPASS_UNROLL
  for (int i = 0; i < 4; ++i) {
    lo = dp4a(static_cast<int>((w[i] & 0x0F0F0F0Fu) | fifth_bits(qh >> (4 * i))), x.q[i], lo);
    hi = dp4a(static_cast<int>(((w[i] >> 4) & 0x0F0F0F0Fu) | fifth_bits(qh >> (16 + 4 * i))), x.q[4 + i], hi);
  }
  return lo + hi;
}

/// Σ kIq4Values[q] · xq over a 32-value unit of iq4 nibbles (q4_0's layout).
ONEPASS_HD int iq4_dot(const uint32_t (&w)[4], const XGroup& x) {
  int lo = 0, hi = 0;
ONEPASS_UNROLL
  for (int i = 0; i < 4; ++i) {
    lo = dp4a(iq4_word(nibble_selector(w[i], 0)), x.q[i], lo);
    hi = dp4a(iq4_word(nibble_selector(w[i], 4)), x.q[4 + i], hi);
  }
  return lo + hi;
}

/// The 32 grid values of a unit of iq4 nibbles at q (q4_0's layout) times `scale`.
ONEPASS_HD void iq4_dequant(const uint8_t* q, float scale, float* out) {
  for (int i = 0; i < 4; ++i) {
    const uint32_t w = ld_u32_2(q + 4 * i);
    const auto lo = static_cast<uint32_t>(iq4_word(nibble_selector(w, 0)));
    const auto hi = static_cast<uint32_t>(iq4_word(nibble_selector(w, 4)));
    for (int k = 0; k < 4; ++k) {
      out[4 * i + k] = scale * static_cast<float>(static_cast<int8_t>(lo >> (8 * k)));
      out[16 + 4 * i + k] = scale * static_cast<float>(static_cast<int8_t>(hi >> (8 * k)));
    }
  }
}

template <>
struct Format<DType::q5_0> {
  static constexpr int kUnits = 1;
  static constexpr int kBlockBytes = 22;
  // w = d (q - 16): d * (xd * sum(q * xq) - 16 * sum(x))
  ONEPASS_HD static float unit_dot(const uint8_t* b, int, const XGroup& x) {
    const float d = half_bits_to_float(ld_u16(b));
    uint32_t w[4];
    ld_words_2(b + 6, w);
    return d * (x.d * static_cast<float>(five_bit_dot(w, ld_u32_2(b + 2), x)) - 16.0f * (x.sum_lo + x.sum_hi));
  }
  ONEPASS_HD static void dequant(const uint8_t* b, int, float* out) {
    const float d = half_bits_to_float(ld_u16(b));
    const uint32_t qh = ld_u32_2(b + 2);
    for (int j = 0; j < 16; ++j) {
      const int q = b[6 + j];
      out[j] = d * static_cast<float>(((q & 0xF) | static_cast<int>(((qh >> j) & 1) << 4)) - 16);
      out[j + 16] = d * static_cast<float>(((q >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4)) - 16);
    }
  }
};

template <>
struct Format<DType::q5_1> {
  static constexpr int kUnits = 1;
  static constexpr int kBlockBytes = 24;
  // w = d q + m: d * xd * sum(q * xq) + m * sum(x)
  ONEPASS_HD static float unit_dot(const uint8_t* b, int, const XGroup& x) {
    const float d = half_bits_to_float(ld_u16(b));
    const float m = half_bits_to_float(ld_u16(b + 2));
    uint32_t w[4];
    ld_words_2(b + 8, w);
    return d * x.d * static_cast<float>(five_bit_dot(w, ld_u32_2(b + 4), x)) + m * (x.sum_lo + x.sum_hi);
  }
  ONEPASS_HD static void dequant(const uint8_t* b, int, float* out) {
    const float d = half_bits_to_float(ld_u16(b));
    const float m = half_bits_to_float(ld_u16(b + 2));
    const uint32_t qh = ld_u32_2(b + 4);
    for (int j = 0; j < 16; ++j) {
      const int q = b[8 + j];
      out[j] = d * static_cast<float>((q & 0xF) | (((qh >> j) & 1) << 4)) + m;
      out[j + 16] = d * static_cast<float>((q >> 4) | (((qh >> (j + 16)) & 1) << 4)) + m;
    }
  }
};

template <>
struct Format<DType::iq4_nl> {
  static constexpr int kUnits = 1;
  static constexpr int kBlockBytes = 18;
  // w = d kIq4Values[q]: d * xd * sum(value * xq)
  ONEPASS_HD static float unit_dot(const uint8_t* b, int, const XGroup& x) {
    const float d = half_bits_to_float(ld_u16(b));
    uint32_t w[4];
    ld_words_2(b + 2, w);
    return d * x.d * static_cast<float>(iq4_dot(w, x));
  }
  ONEPASS_HD static void dequant(const uint8_t* b, int, float* out) { iq4_dequant(b + 2, half_bits_to_float(ld_u16(b)), out); }
};

template <>
struct Format<DType::iq4_xs> {
  static constexpr int kUnits = 8;
  static constexpr int kBlockBytes = 136;
  // Sub-block u: w = (d (sc - 32)) kIq4Values[q], sc = nibble u % 2 of byte 4 + u / 2 and
  // bits 2u..2u+1 of the half word at byte 2 (ops/quant.h); nibbles at 8 + 16 u.
  ONEPASS_HD static float scale(const uint8_t* b, int u) {
    const int sc = ((b[4 + (u >> 1)] >> (4 * (u & 1))) & 0xF) | (((ld_u16(b + 2) >> (2 * u)) & 3) << 4);
    return half_bits_to_float(ld_u16(b)) * static_cast<float>(sc - 32);
  }
  ONEPASS_HD static float unit_dot(const uint8_t* b, int u, const XGroup& x) {
    uint32_t w[4];
    ld_words_2(b + 8 + 16 * u, w);
    return scale(b, u) * x.d * static_cast<float>(iq4_dot(w, x));
  }
  ONEPASS_HD static void dequant(const uint8_t* b, int u, float* out) { iq4_dequant(b + 8 + 16 * u, scale(b, u), out); }
};

template <>
struct Format<DType::q2_k> {
  static constexpr int kUnits = 8;
  static constexpr int kBlockBytes = 84;
  // Values 32 u + l (u = 4 g + s): q = bits 2s..2s+1 of qs[32 g + l] (qs at 16); sub-blocks
  // 2u (l < 16) and 2u + 1 with scale byte b[2u], b[2u + 1] (low nibble sc, high mn).
  // w = (d sc) q - (dmin mn).
  ONEPASS_HD static float unit_dot(const uint8_t* b, int u, const XGroup& x) {
    const uint8_t* qs = b + 16 + 32 * (u >> 2);
    const int shift = 2 * (u & 3);
    int sum_a = 0;
    int sum_b = 0;
ONEPASS_UNROLL
    for (int i = 0; i < 8; ++i) {
      const int q = static_cast<int>((ld_u32_2(qs + 4 * i) >> shift) & 0x03030303u);
      if (i < 4) {
        sum_a = dp4a(q, x.q[i], sum_a);
      } else {
        sum_b = dp4a(q, x.q[i], sum_b);
      }
    }
    const float d = half_bits_to_float(ld_u16(b + 80));
    const float dmin = half_bits_to_float(ld_u16(b + 82));
    const uint32_t sc = ld_u16(b + 2 * u);
    const float da = d * static_cast<float>(sc & 0xF), db = d * static_cast<float>((sc >> 8) & 0xF);
    const float ma = dmin * static_cast<float>((sc >> 4) & 0xF), mb = dmin * static_cast<float>(sc >> 12);
    return x.d * (da * static_cast<float>(sum_a) + db * static_cast<float>(sum_b)) - (ma * x.sum_lo + mb * x.sum_hi);
  }
  ONEPASS_HD static void dequant(const uint8_t* b, int u, float* out) {
    const uint8_t* qs = b + 16 + 32 * (u >> 2);
    const int shift = 2 * (u & 3);
    const float d = half_bits_to_float(ld_u16(b + 80));
    const float dmin = half_bits_to_float(ld_u16(b + 82));
    for (int l = 0; l < 32; ++l) {
      const int sc = b[2 * u + (l >= 16 ? 1 : 0)];
      out[l] = (d * static_cast<float>(sc & 0xF)) * static_cast<float>((qs[l] >> shift) & 3) -
               dmin * static_cast<float>(sc >> 4);
    }
  }
};

/// The scale d (sc - 32) of q3_k sub-block i (0..15), as ops/quant.h q3k_scale reads sc.
ONEPASS_HD float q3k_sub_scale(const uint8_t* b, int i) {
  const uint8_t* scales = b + 96;
  const int low = i < 8 ? (scales[i] & 0xF) : (scales[i - 8] >> 4);
  const int high = (scales[8 + (i & 3)] >> (2 * (i >> 2))) & 3;
  return half_bits_to_float(ld_u16(b + 108)) * static_cast<float>((low | (high << 4)) - 32);
}

template <>
struct Format<DType::q3_k> {
  static constexpr int kUnits = 8;
  static constexpr int kBlockBytes = 110;
  // Values 32 u + l (u = 4 g + s): low 2 bits at bits 2s..2s+1 of qs[32 g + l] (qs at 32),
  // bit 2 = bit u of hmask[l]; q = that - 4. Sub-blocks 2u and 2u + 1 as q2_k.
  // w = (d (sc - 32)) q: x.d * (sa * sum(q' xq) + ...) - 4 * (sa * sum_lo + sb * sum_hi).
  ONEPASS_HD static float unit_dot(const uint8_t* b, int u, const XGroup& x) {
    const uint8_t* qs = b + 32 + 32 * (u >> 2);
    const int shift = 2 * (u & 3);
    int sum_a = 0;
    int sum_b = 0;
ONEPASS_UNROLL
    for (int i = 0; i < 8; ++i) {
      const uint32_t low = (ld_u32_2(qs + 4 * i) >> shift) & 0x03030303u;
      const uint32_t high = ((ld_u32_2(b + 4 * i) >> u) & 0x01010101u) << 2;
      if (i < 4) {
        sum_a = dp4a(static_cast<int>(low | high), x.q[i], sum_a);
      } else {
        sum_b = dp4a(static_cast<int>(low | high), x.q[i], sum_b);
      }
    }
    const float sa = q3k_sub_scale(b, 2 * u);
    const float sb = q3k_sub_scale(b, 2 * u + 1);
    return x.d * (sa * static_cast<float>(sum_a) + sb * static_cast<float>(sum_b)) - 4.0f * (sa * x.sum_lo + sb * x.sum_hi);
  }
  ONEPASS_HD static void dequant(const uint8_t* b, int u, float* out) {
    const uint8_t* qs = b + 32 + 32 * (u >> 2);
    const int shift = 2 * (u & 3);
    for (int l = 0; l < 32; ++l) {
      const int q = ((qs[l] >> shift) & 3) - (((b[l] >> u) & 1) ? 0 : 4);
      out[l] = q3k_sub_scale(b, 2 * u + (l >= 16 ? 1 : 0)) * static_cast<float>(q);
    }
  }
};

/// Quantizes 32 activations to int8 with scale amax / 127 (host reference of what the
/// kernels do in shared memory): q = round(x / d).
inline void quantize_group_host(const float* x, int8_t* q, float& d, float& sum_lo, float& sum_hi) {
  float amax = 0.0f;
  sum_lo = 0.0f;
  sum_hi = 0.0f;
  for (int i = 0; i < 32; ++i) {
    amax = amax > (x[i] < 0 ? -x[i] : x[i]) ? amax : (x[i] < 0 ? -x[i] : x[i]);
    (i < 16 ? sum_lo : sum_hi) += x[i];
  }
  d = amax / 127.0f;
  for (int i = 0; i < 32; ++i) {
    const float v = d > 0.0f ? x[i] / d : 0.0f;
    q[i] = static_cast<int8_t>(v < 0 ? -static_cast<int>(-v + 0.5f) : static_cast<int>(v + 0.5f));
  }
}

}  // namespace onepass::cuda::quantdot
