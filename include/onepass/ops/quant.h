// Quantized weight formats: the GGML block formats (bit-compatible with GGUF files) and
// MLX affine quantisation, with host quantize/dequantize functions.
//
// GGML block formats. A row of K values is K / block_elems consecutive blocks. All
// multi-byte fields are little-endian; "f16" fields hold IEEE binary16 bit patterns.
// The layouts below are normative: the CPU and CUDA kernels, the GGUF reader/writer and
// the tests all use these structs, and tests/unit/quant_test.cpp checks dequantize()
// bit for bit against gguf-py.
//
//   q4_0 (32 values, 18 bytes)   x[j] = d * (q[j] - 8), q in [0, 15]
//     q[j] for j < 16 is the low nibble of qs[j]; q[j + 16] is the high nibble of qs[j].
//   q4_1 (32 values, 20 bytes)   x[j] = d * q[j] + m, q in [0, 15]; nibbles as q4_0.
//   q8_0 (32 values, 34 bytes)   x[j] = d * qs[j], qs signed bytes.
//   q4_k (256 values, 144 bytes) 8 sub-blocks of 32 values, each with a 6-bit scale sc[i]
//     and 6-bit min mn[i] (see kquant_scale_min):
//       x[32 i + l] = (d * sc[i]) * q - (dmin * mn[i]), q in [0, 15]
//     value e = 64 p + 32 h + l (p = 0..3, h = 0..1, l = 0..31) has q = nibble h (0 low,
//     1 high) of qs[32 p + l]; so sub-block 2p uses the low nibbles of qs[32p .. 32p+31]
//     and sub-block 2p+1 their high nibbles.
//   q5_k (256 values, 176 bytes) as q4_k with q in [0, 31]: the low 4 bits as in q4_k,
//     the fifth bit of value 32 i + l is bit i of qh[l].
//   q6_k (256 values, 210 bytes) 16 sub-blocks of 16 values with signed 8-bit scales:
//       x[16 i + r] = (d * scales[i]) * (q - 32), q in [0, 63]
//     value e = 128 h + 32 s + l (h = 0..1, s = 0..3, l = 0..31) has its low 4 bits in
//     ql[64 h + l + 32 (s & 1)] (low nibble for s < 2, high nibble for s >= 2) and its
//     high 2 bits in bits 2s..2s+1 of qh[32 h + l].
//   q5_0 (32 values, 22 bytes)   x[j] = d * (q[j] - 16), q in [0, 31]: the low 4 bits
//     as q4_0, the fifth bit of value j is bit j of the little-endian word qh.
//   q5_1 (32 values, 24 bytes)   x[j] = d * q[j] + m, q in [0, 31]; bits as q5_0.
//   iq4_nl (32 values, 18 bytes) x[j] = d * kIq4Values[q[j]], q in [0, 15]; nibbles as q4_0.
//   q2_k (256 values, 84 bytes) 16 sub-blocks of 16 values; byte i of scales holds the
//     sub-block's 4-bit scale (low nibble) and 4-bit min (high nibble):
//       x[16 i + r] = (d * sc[i]) * q - (dmin * mn[i]), q in [0, 3]
//     value e = 128 g + 32 s + l (g = 0..1, s = 0..3, l = 0..31) has q = bits 2s..2s+1
//     of qs[32 g + l].
//   q3_k (256 values, 110 bytes) 16 sub-blocks of 16 values with 6-bit scales:
//       x[16 i + r] = (d * (sc[i] - 32)) * q, q in [-4, 3]
//     value e = 128 g + 32 s + l has its low 2 bits at bits 2s..2s+1 of qs[32 g + l], and
//     q = low - 4 when bit (e / 32) of hmask[l] is clear, q = low when it is set. The low
//     4 bits of sc[i] are the low (i < 8) or high (i >= 8) nibble of scales[i % 8], its
//     top 2 bits are bits 2 (i / 4)..+1 of scales[8 + i % 4] (see q3k_scale).
//   iq4_xs (256 values, 136 bytes) 8 sub-blocks of 32 values with 6-bit scales:
//       x[32 i + l] = (d * (sc[i] - 32)) * kIq4Values[q], q in [0, 15]
//     sc[i] = nibble (i % 2) of scales_l[i / 2] | bits 2i..2i+1 of scales_h << 4; q is the
//     low (l < 16) or high (l >= 16) nibble of qs[16 i + l % 16].
//
// The products are evaluated in f32 in exactly the order written (d * sc first, then
// times q, then minus dmin * mn), which is what ggml and gguf-py do.
//
// MLX affine (AffineFormat): a weight matrix [rows, cols] is stored as
//   packed  u32 [rows, cols * bits / 32]: value j of a row is
//           (packed[j / (32/bits)] >> (bits * (j % (32/bits)))) & (2^bits - 1)
//   scales, biases [rows, cols / group_size] in the scale dtype (f16 or bf16)
//   w[r, j] = scale[r, j / group] * q + bias[r, j / group]   (f32: one product, one add)
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "onepass/core/dtype.h"
#include "onepass/core/half.h"

namespace onepass::ops {

/// Values per block of the 32-value formats (q4_0, q4_1, q8_0, q5_0, q5_1, iq4_nl).
inline constexpr int kQuantBlock32 = 32;
/// Values per super-block of the k-quant formats (q2_k ... q6_k, iq4_xs).
inline constexpr int kQuantBlockK = 256;

struct BlockQ4_0 {
  f16_bits d;
  uint8_t qs[16];
};
struct BlockQ4_1 {
  f16_bits d;
  f16_bits m;
  uint8_t qs[16];
};
struct BlockQ8_0 {
  f16_bits d;
  int8_t qs[32];
};
struct BlockQ4_K {
  f16_bits d;
  f16_bits dmin;
  uint8_t scales[12];  // 8 x (6-bit scale, 6-bit min), packed as kquant_scale_min reads
  uint8_t qs[128];
};
struct BlockQ5_K {
  f16_bits d;
  f16_bits dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  f16_bits d;
};
struct BlockQ5_0 {
  f16_bits d;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ5_1 {
  f16_bits d;
  f16_bits m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockIQ4_NL {
  f16_bits d;
  uint8_t qs[16];
};
struct BlockQ2_K {
  uint8_t scales[16];  // low nibble: scale, high nibble: min
  uint8_t qs[64];
  f16_bits d;
  f16_bits dmin;
};
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];  // 16 x 6-bit scales, packed as q3k_scale reads
  f16_bits d;
};
struct BlockIQ4_XS {
  f16_bits d;
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};

static_assert(sizeof(BlockQ4_0) == 18, "q4_0 block must match GGUF");
static_assert(sizeof(BlockQ4_1) == 20, "q4_1 block must match GGUF");
static_assert(sizeof(BlockQ8_0) == 34, "q8_0 block must match GGUF");
static_assert(sizeof(BlockQ4_K) == 144, "q4_k block must match GGUF");
static_assert(sizeof(BlockQ5_K) == 176, "q5_k block must match GGUF");
static_assert(sizeof(BlockQ6_K) == 210, "q6_k block must match GGUF");
static_assert(sizeof(BlockQ5_0) == 22, "q5_0 block must match GGUF");
static_assert(sizeof(BlockQ5_1) == 24, "q5_1 block must match GGUF");
static_assert(sizeof(BlockIQ4_NL) == 18, "iq4_nl block must match GGUF");
static_assert(sizeof(BlockQ2_K) == 84, "q2_k block must match GGUF");
static_assert(sizeof(BlockQ3_K) == 110, "q3_k block must match GGUF");
static_assert(sizeof(BlockIQ4_XS) == 136, "iq4_xs block must match GGUF");

/// The 16 values iq4_nl and iq4_xs indices select (a non-uniform 4-bit grid).
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

/// The 6-bit scale field sc (0..63, used as sc - 32) of q3_k sub-block i (0..15).
inline int q3k_scale(const uint8_t* scales, int i) {
  const int low = i < 8 ? (scales[i] & 0xF) : (scales[i - 8] >> 4);
  const int high = (scales[8 + i % 4] >> (2 * (i / 4))) & 3;
  return low | (high << 4);
}

/// The 6-bit scale field sc (0..63, used as sc - 32) of iq4_xs sub-block i (0..7).
inline int iq4xs_scale(const BlockIQ4_XS& b, int i) {
  const int low = (b.scales_l[i / 2] >> (4 * (i % 2))) & 0xF;
  const int high = (b.scales_h >> (2 * i)) & 3;
  return low | (high << 4);
}

/// Scale and min of sub-block j (0..7) of a q4_k/q5_k block. The 12 bytes hold, for
/// j < 4, sc in the low 6 bits of bytes j and mn in the low 6 bits of bytes j + 4; for
/// j >= 4 the low 4 bits of sc / mn are the low / high nibble of byte j + 4 and their top
/// 2 bits are the top 2 bits of bytes j - 4 / j.
inline void kquant_scale_min(const uint8_t* scales, int j, int& sc, int& mn) {
  if (j < 4) {
    sc = scales[j] & 63;
    mn = scales[j + 4] & 63;
  } else {
    sc = (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
    mn = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

/// Inverse of kquant_scale_min for all 8 sub-blocks (each value in [0, 63]).
inline void kquant_pack_scales(const int sc[8], const int mn[8], uint8_t scales[12]) {
  std::memset(scales, 0, 12);
  for (int j = 0; j < 4; ++j) {
    scales[j] = static_cast<uint8_t>(sc[j] & 63);
    scales[j + 4] = static_cast<uint8_t>(mn[j] & 63);
  }
  for (int j = 4; j < 8; ++j) {
    scales[j + 4] = static_cast<uint8_t>((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
    scales[j - 4] = static_cast<uint8_t>(scales[j - 4] | ((sc[j] >> 4) << 6));
    scales[j] = static_cast<uint8_t>(scales[j] | ((mn[j] >> 4) << 6));
  }
}

// --- one block -> floats (the reference decoders; `out` gets block_elems values) ------

inline void dequantize_block(const BlockQ4_0& b, float* out) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < 16; ++j) {
    out[j] = d * static_cast<float>((b.qs[j] & 0xF) - 8);
    out[j + 16] = d * static_cast<float>((b.qs[j] >> 4) - 8);
  }
}

inline void dequantize_block(const BlockQ4_1& b, float* out) {
  const float d = f16_to_f32(b.d);
  const float m = f16_to_f32(b.m);
  for (int j = 0; j < 16; ++j) {
    out[j] = d * static_cast<float>(b.qs[j] & 0xF) + m;
    out[j + 16] = d * static_cast<float>(b.qs[j] >> 4) + m;
  }
}

inline void dequantize_block(const BlockQ8_0& b, float* out) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>(b.qs[j]);
}

inline void dequantize_block(const BlockQ4_K& b, float* out) {
  const float d = f16_to_f32(b.d);
  const float dmin = f16_to_f32(b.dmin);
  for (int i = 0; i < 8; ++i) {
    int sc = 0;
    int mn = 0;
    kquant_scale_min(b.scales, i, sc, mn);
    const float scale = d * static_cast<float>(sc);
    const float offset = dmin * static_cast<float>(mn);
    const uint8_t* q = b.qs + 32 * (i / 2);
    const int shift = 4 * (i % 2);
    for (int l = 0; l < 32; ++l) {
      out[32 * i + l] = scale * static_cast<float>((q[l] >> shift) & 0xF) - offset;
    }
  }
}

inline void dequantize_block(const BlockQ5_K& b, float* out) {
  const float d = f16_to_f32(b.d);
  const float dmin = f16_to_f32(b.dmin);
  for (int i = 0; i < 8; ++i) {
    int sc = 0;
    int mn = 0;
    kquant_scale_min(b.scales, i, sc, mn);
    const float scale = d * static_cast<float>(sc);
    const float offset = dmin * static_cast<float>(mn);
    const uint8_t* q = b.qs + 32 * (i / 2);
    const int shift = 4 * (i % 2);
    for (int l = 0; l < 32; ++l) {
      const int v = ((q[l] >> shift) & 0xF) | (((b.qh[l] >> i) & 1) << 4);
      out[32 * i + l] = scale * static_cast<float>(v) - offset;
    }
  }
}

inline void dequantize_block(const BlockQ6_K& b, float* out) {
  const float d = f16_to_f32(b.d);
  for (int h = 0; h < 2; ++h) {
    for (int s = 0; s < 4; ++s) {
      for (int l = 0; l < 32; ++l) {
        const int e = 128 * h + 32 * s + l;
        const uint8_t low = b.ql[64 * h + l + 32 * (s & 1)];
        const int lo4 = s < 2 ? (low & 0xF) : (low >> 4);
        const int hi2 = (b.qh[32 * h + l] >> (2 * s)) & 3;
        const float scale = d * static_cast<float>(b.scales[e / 16]);
        out[e] = scale * static_cast<float>((lo4 | (hi2 << 4)) - 32);
      }
    }
  }
}

inline void dequantize_block(const BlockQ5_0& b, float* out) {
  const float d = f16_to_f32(b.d);
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  for (int j = 0; j < 16; ++j) {
    const int lo = (b.qs[j] & 0xF) | (((qh >> j) & 1) << 4);
    const int hi = (b.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    out[j] = d * static_cast<float>(lo - 16);
    out[j + 16] = d * static_cast<float>(hi - 16);
  }
}

inline void dequantize_block(const BlockQ5_1& b, float* out) {
  const float d = f16_to_f32(b.d);
  const float m = f16_to_f32(b.m);
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  for (int j = 0; j < 16; ++j) {
    const int lo = (b.qs[j] & 0xF) | (((qh >> j) & 1) << 4);
    const int hi = (b.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    out[j] = d * static_cast<float>(lo) + m;
    out[j + 16] = d * static_cast<float>(hi) + m;
  }
}

inline void dequantize_block(const BlockIQ4_NL& b, float* out) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < 16; ++j) {
    out[j] = d * static_cast<float>(kIq4Values[b.qs[j] & 0xF]);
    out[j + 16] = d * static_cast<float>(kIq4Values[b.qs[j] >> 4]);
  }
}

inline void dequantize_block(const BlockQ2_K& b, float* out) {
  const float d = f16_to_f32(b.d);
  const float dmin = f16_to_f32(b.dmin);
  for (int g = 0; g < 2; ++g) {
    for (int s = 0; s < 4; ++s) {
      for (int l = 0; l < 32; ++l) {
        const int e = 128 * g + 32 * s + l;
        const uint8_t sc = b.scales[e / 16];
        const float scale = d * static_cast<float>(sc & 0xF);
        const float offset = dmin * static_cast<float>(sc >> 4);
        out[e] = scale * static_cast<float>((b.qs[32 * g + l] >> (2 * s)) & 3) - offset;
      }
    }
  }
}

inline void dequantize_block(const BlockQ3_K& b, float* out) {
  const float d = f16_to_f32(b.d);
  for (int g = 0; g < 2; ++g) {
    for (int s = 0; s < 4; ++s) {
      for (int l = 0; l < 32; ++l) {
        const int e = 128 * g + 32 * s + l;
        const float scale = d * static_cast<float>(q3k_scale(b.scales, e / 16) - 32);
        const int low = (b.qs[32 * g + l] >> (2 * s)) & 3;
        const int q = low - (((b.hmask[l] >> (e / 32)) & 1) ? 0 : 4);
        out[e] = scale * static_cast<float>(q);
      }
    }
  }
}

inline void dequantize_block(const BlockIQ4_XS& b, float* out) {
  const float d = f16_to_f32(b.d);
  for (int i = 0; i < 8; ++i) {
    const float scale = d * static_cast<float>(iq4xs_scale(b, i) - 32);
    for (int l = 0; l < 16; ++l) {
      out[32 * i + l] = scale * static_cast<float>(kIq4Values[b.qs[16 * i + l] & 0xF]);
      out[32 * i + l + 16] = scale * static_cast<float>(kIq4Values[b.qs[16 * i + l] >> 4]);
    }
  }
}

// --- whole arrays -----------------------------------------------------------------------

/// Quantizes n values into `type` (any of f32, f16, bf16 and the GGML block formats):
/// round-to-nearest with a per-block scale choice (see quant.cpp). Throws Error unless n is
/// a multiple of the block size and the type is a weight type.
void quantize(DType type, const float* src, int64_t n, void* dst);
/// Dequantizes n values of `type` into f32, exactly as GGUF tools do.
void dequantize(DType type, const void* src, int64_t n, float* dst);
/// Whether `type` can hold matmul / embedding weights (f32, f16, bf16, the block formats).
bool is_weight_type(DType type);
/// The weight types by name, comma-separated ("f32, f16, ..."), for error messages.
const std::string& weight_type_names();

/// 32-bit words per packed row of `cols` values.
int64_t affine_words_per_row(const AffineFormat& format, int64_t cols);
/// MLX affine quantisation of a [rows, cols] matrix (cols a multiple of the group size):
/// per group scale = (max - min) / (2^bits - 1) and bias = min, both rounded to the scale
/// dtype, then q = round((x - bias) / scale) clamped to [0, 2^bits - 1].
void affine_quantize(const AffineFormat& format, const float* src, int64_t rows, int64_t cols,
                     uint32_t* packed, uint16_t* scales, uint16_t* biases);
/// w = scale * q + bias, in f32.
void affine_dequantize(const AffineFormat& format, const uint32_t* packed, const uint16_t* scales,
                       const uint16_t* biases, int64_t rows, int64_t cols, float* dst);

}  // namespace onepass::ops
