// The tensor-core operand type of each weight type, and the dequantization of one 32-value
// unit of a GGML block format to 16 packed f16 pairs, in K order. The tensor-core mm
// (gemm_tc.cu, from raw bytes in shared memory) and the operand conversion before a cuBLAS
// GEMM (gemm_blas.cu, from global memory) share them.
//   WUnit<W>::load(b, u, raw)    loads the words of unit u of the block at b;
//   WUnit<W>::decode(raw, u, h)  turns them into the unit's 16 f16 pairs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "onepass/core/dtype.h"
#include "../kernels/quant_dot.cuh"

namespace onepass::cuda::dequant {

__device__ __forceinline__ uint32_t byte_of(const uint32_t* words, int i) { return (words[i >> 2] >> (8 * (i & 3))) & 0xFFu; }

// The operand type of the tensor-core product for weights of type W.
template <DType W>
struct Operand {
  using T = __half;
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};
template <>
struct Operand<DType::bf16> {
  using T = __nv_bfloat16;
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};

__device__ __forceinline__ uint32_t pack_half(float lo, float hi) { return Operand<DType::f16>::pack(lo, hi); }

template <DType W>
struct WUnit;

// The 32-value formats decode in f16 pairs: a 4- or 8-bit code c goes into the low
// mantissa bits of 1024 (0x6400), giving the f16 value 1024 + c exactly; subtracting the
// code's offset is exact too, so the one rounding is that of the final product (or fused
// multiply-add), as when the value is computed in f32 and rounded to f16.
__device__ __forceinline__ __half2 code_pair(uint32_t bytes, uint32_t selector) {
  const uint32_t bits = __byte_perm(bytes, 0x64u, selector);
  return *reinterpret_cast<const __half2*>(&bits);
}
constexpr uint32_t kPairLow = 0x4140;   // bytes 0, 1 of a word, each under 0x64
constexpr uint32_t kPairHigh = 0x4342;  // bytes 2, 3

__device__ __forceinline__ uint32_t h2_bits(__half2 h) { return *reinterpret_cast<const uint32_t*>(&h); }

// The 16 pairs of a 4-bit unit whose byte j holds values j (low nibble) and j + 16 (high
// nibble), as codes 1024 + q mapped to weights by `to_weight`.
template <typename ToWeight>
__device__ __forceinline__ void nibble_unit(const uint32_t (&q)[4], ToWeight to_weight, uint32_t (&h)[16]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t lo = q[i] & 0x0F0F0F0Fu;
    const uint32_t hi = (q[i] >> 4) & 0x0F0F0F0Fu;
    h[2 * i] = h2_bits(to_weight(code_pair(lo, kPairLow)));
    h[2 * i + 1] = h2_bits(to_weight(code_pair(lo, kPairHigh)));
    h[8 + 2 * i] = h2_bits(to_weight(code_pair(hi, kPairLow)));
    h[8 + 2 * i + 1] = h2_bits(to_weight(code_pair(hi, kPairHigh)));
  }
}

template <>
struct WUnit<DType::q4_0> {
  struct Raw {
    uint32_t d;
    uint32_t q[4];
  };
  __device__ __forceinline__ static void load(const uint8_t* b, int, Raw& r) {
    r.d = quantdot::ld_u16(b);
    quantdot::ld_words_2(b + 2, r.q);
  }
  // w = d (q - 8).
  __device__ __forceinline__ static void decode(const Raw& r, int, uint32_t (&h)[16]) {
    const __half2 d = __half2half2(__ushort_as_half(static_cast<unsigned short>(r.d)));
    const __half2 offset = __float2half2_rn(1032.0f);
    nibble_unit(r.q, [&](__half2 code) { return __hmul2(__hsub2(code, offset), d); }, h);
  }
};

template <>
struct WUnit<DType::q4_1> {
  struct Raw {
    uint32_t dm;
    uint32_t q[4];
  };
  __device__ __forceinline__ static void load(const uint8_t* b, int, Raw& r) {
    r.dm = quantdot::ld_u32_2(b);
    quantdot::ld_words_2(b + 4, r.q);
  }
  // w = d q + m, one fused multiply-add in f16.
  __device__ __forceinline__ static void decode(const Raw& r, int, uint32_t (&h)[16]) {
    const __half2 d = __half2half2(__ushort_as_half(static_cast<unsigned short>(r.dm & 0xFFFFu)));
    const __half2 m = __half2half2(__ushort_as_half(static_cast<unsigned short>(r.dm >> 16)));
    const __half2 offset = __float2half2_rn(1024.0f);
    nibble_unit(r.q, [&](__half2 code) { return __hfma2(__hsub2(code, offset), d, m); }, h);
  }
};

template <>
struct WUnit<DType::q8_0> {
  struct Raw {
    uint32_t d;
    uint32_t q[8];
  };
  __device__ __forceinline__ static void load(const uint8_t* b, int, Raw& r) {
    r.d = quantdot::ld_u16(b);
    quantdot::ld_words_2(b + 2, r.q);
  }
  // int8 q as the code q + 128: w = d (1024 + (q + 128) - 1152).
  __device__ __forceinline__ static void decode(const Raw& r, int, uint32_t (&h)[16]) {
    const __half2 d = __half2half2(__ushort_as_half(static_cast<unsigned short>(r.d)));
    const __half2 offset = __float2half2_rn(1152.0f);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t codes = r.q[i] ^ 0x80808080u;
      h[2 * i] = h2_bits(__hmul2(__hsub2(code_pair(codes, kPairLow), offset), d));
      h[2 * i + 1] = h2_bits(__hmul2(__hsub2(code_pair(codes, kPairHigh), offset), d));
    }
  }
};

// q4_k/q5_k header: d, dmin (f16) and the 12 bytes of 6-bit scales and mins, as 4 words.
// Scale and min of sub-block u as quantdot::kquant_scale_min, from the words.
__device__ __forceinline__ void kquant_header(const uint32_t (&hd)[4], int u, float& scale, float& offset) {
  const int j = u & 3;
  const uint32_t b1 = (hd[1] >> (8 * j)) & 0xFFu;  // scales byte j
  const uint32_t b2 = (hd[2] >> (8 * j)) & 0xFFu;  // scales byte j + 4
  const uint32_t b3 = (hd[3] >> (8 * j)) & 0xFFu;  // scales byte j + 8
  uint32_t sc, mn;
  if (u < 4) {
    sc = b1 & 63u;
    mn = b2 & 63u;
  } else {
    sc = (b3 & 0xFu) | ((b1 >> 6) << 4);
    mn = (b3 >> 4) | ((b2 >> 6) << 4);
  }
  const float d = quantdot::half_bits_to_float(static_cast<uint16_t>(hd[0] & 0xFFFFu));
  const float dmin = quantdot::half_bits_to_float(static_cast<uint16_t>(hd[0] >> 16));
  scale = d * static_cast<float>(sc);
  offset = dmin * static_cast<float>(mn);
}

template <>
struct WUnit<DType::q4_k> {
  struct Raw {
    uint32_t hd[4];
    uint32_t q[8];
  };
  // 144-byte blocks: 16-byte aligned when the rows are (checked by the caller).
  __device__ __forceinline__ static void load(const uint8_t* b, int u, Raw& r) {
    quantdot::ld_words_2(b, r.hd);
    quantdot::ld_words_2(b + 16 + 32 * (u >> 1), r.q);
  }
  __device__ __forceinline__ static void decode(const Raw& r, int u, uint32_t (&h)[16]) {
    float scale, offset;
    kquant_header(r.hd, u, scale, offset);
    const int shift = 4 * (u & 1);
#pragma unroll
    for (int p = 0; p < 16; ++p) {
      const float lo = static_cast<float>((byte_of(r.q, 2 * p) >> shift) & 0xF);
      const float hi = static_cast<float>((byte_of(r.q, 2 * p + 1) >> shift) & 0xF);
      h[p] = pack_half(scale * lo - offset, scale * hi - offset);
    }
  }
};

template <>
struct WUnit<DType::q5_k> {
  struct Raw {
    uint32_t hd[4];
    uint32_t qh[8];
    uint32_t q[8];
  };
  __device__ __forceinline__ static void load(const uint8_t* b, int u, Raw& r) {
    quantdot::ld_words_2(b, r.hd);
    quantdot::ld_words_2(b + 16, r.qh);
    quantdot::ld_words_2(b + 48 + 32 * (u >> 1), r.q);
  }
  __device__ __forceinline__ static void decode(const Raw& r, int u, uint32_t (&h)[16]) {
    float scale, offset;
    kquant_header(r.hd, u, scale, offset);
    const int shift = 4 * (u & 1);
#pragma unroll
    for (int p = 0; p < 16; ++p) {
      float v[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int l = 2 * p + e;
        const uint32_t q = ((byte_of(r.q, l) >> shift) & 0xFu) | (((byte_of(r.qh, l) >> u) & 1u) << 4);
        v[e] = scale * static_cast<float>(q) - offset;
      }
      h[p] = pack_half(v[0], v[1]);
    }
  }
};

template <>
struct WUnit<DType::q6_k> {
  struct Raw {
    uint32_t ql[8];
    uint32_t qh[8];
    uint32_t scales;  // the two int8 scales of the unit
    uint32_t d;
  };
  // 210-byte blocks: 2-byte aligned only.
  __device__ __forceinline__ static void load(const uint8_t* b, int u, Raw& r) {
    const int hf = u >> 2;
    const int s = u & 3;
    quantdot::ld_words_2(b + 64 * hf + 32 * (s & 1), r.ql);
    quantdot::ld_words_2(b + 128 + 32 * hf, r.qh);
    r.scales = quantdot::ld_u16(b + 192 + 2 * u);
    r.d = quantdot::ld_u16(b + 208);
  }
  __device__ __forceinline__ static void decode(const Raw& r, int u, uint32_t (&h)[16]) {
    const int s = u & 3;
    const float d = quantdot::half_bits_to_float(static_cast<uint16_t>(r.d));
    const float sc_lo = d * static_cast<float>(static_cast<int8_t>(r.scales & 0xFFu));
    const float sc_hi = d * static_cast<float>(static_cast<int8_t>(r.scales >> 8));
    const int lo_shift = 4 * (s >> 1);
#pragma unroll
    for (int p = 0; p < 16; ++p) {
      float v[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int l = 2 * p + e;
        const int q = static_cast<int>(((byte_of(r.ql, l) >> lo_shift) & 0xFu) | (((byte_of(r.qh, l) >> (2 * s)) & 3u) << 4));
        v[e] = (l < 16 ? sc_lo : sc_hi) * static_cast<float>(q - 32);
      }
      h[p] = pack_half(v[0], v[1]);
    }
  }
};

// Formats decoded through quantdot::Format<W>::dequant: the unit's 32 values in f32 (the
// reference decoder's products), each rounded once to f16. Raw holds the block's address,
// so the block must stay where it is until decode (true of both callers).
template <DType W>
struct FormatUnit {
  struct Raw {
    const uint8_t* block;
  };
  __device__ __forceinline__ static void load(const uint8_t* b, int, Raw& r) { r.block = b; }
  __device__ __forceinline__ static void decode(const Raw& r, int u, uint32_t (&h)[16]) {
    float v[32];
    quantdot::Format<W>::dequant(r.block, u, v);
#pragma unroll
    for (int p = 0; p < 16; ++p) h[p] = pack_half(v[2 * p], v[2 * p + 1]);
  }
};

template <>
struct WUnit<DType::q5_0> : FormatUnit<DType::q5_0> {};
template <>
struct WUnit<DType::q5_1> : FormatUnit<DType::q5_1> {};
template <>
struct WUnit<DType::iq4_nl> : FormatUnit<DType::iq4_nl> {};
template <>
struct WUnit<DType::iq4_xs> : FormatUnit<DType::iq4_xs> {};
template <>
struct WUnit<DType::q2_k> : FormatUnit<DType::q2_k> {};
template <>
struct WUnit<DType::q3_k> : FormatUnit<DType::q3_k> {};

}  // namespace onepass::cuda::dequant
