// What the 8-bit integer tensor-core products (mm_x8.cu, gemm_x8.cu) share: the decoding
// of a 32-value unit of each block format into the A fragment of an m16n8k32 product, the
// layout of a stage of weight rows in shared memory, and the exact int32-to-float step.
#pragma once

#include "../kernels/common.cuh"
#include "../kernels/quant_dot.cuh"
#include "launch.h"

namespace onepass::cuda::x8 {

using quantdot::half_bits_to_float;
using quantdot::ld_u16;
using quantdot::ld_u32_2;

constexpr int kRows = kCudaMmX8BlockRows;  // weight rows of a block, 16 per warp in mm_x8
constexpr int kStageK = kCudaMmX8StageK;   // values of K per stage: 8 units of 32
static_assert(kStageK == 256, "8 units per stage");

__device__ __forceinline__ uint32_t ld_u32(const unsigned char* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Bit 0 of byte i = bit i of n (n < 16).
__device__ __forceinline__ uint32_t spread4(uint32_t n) { return (n * 0x00204081u) & 0x01010101u; }

// One 32-value unit of one weight row: the A-fragment words of values 4t .. 4t + 3 (lo)
// and 16 + 4t .. 16 + 4t + 3 (hi) as 8-bit integers q, and w = a (q + kC) + b, b only where
// kMin (q6_k: w = a sc q,
// sc = s0 for the first 16 values, s1 for the rest).
struct Unit {
  uint32_t lo, hi;
  float a, b;
  int s0, s1;
};

// Per format: whether q is unsigned, b as a constant multiple kC of a (q4_0, q5_0), or its
// own value (kMin), and unit j (0..7) of a stage's row data at `row` (2-byte aligned).
template <DType W>
struct X8;

template <>
struct X8<DType::q4_0> {
  static constexpr bool kUnsigned = true, kMin = false;
  static constexpr float kC = -8.0f;
  __device__ static Unit unit(const unsigned char* row, int j, int t) {
    const unsigned char* b = row + 18 * j;
    const uint32_t w = ld_u32_2(b + 2 + 4 * t);
    const float d = half_bits_to_float(ld_u16(b));
    return {w & 0x0F0F0F0Fu, (w >> 4) & 0x0F0F0F0Fu, d, 0.0f, 0, 0};
  }
};

template <>
struct X8<DType::q4_1> {
  static constexpr bool kUnsigned = true, kMin = true;
  static constexpr float kC = 0.0f;
  __device__ static Unit unit(const unsigned char* row, int j, int t) {
    const unsigned char* b = row + 20 * j;
    const uint32_t w = ld_u32(b + 4 + 4 * t);
    return {w & 0x0F0F0F0Fu, (w >> 4) & 0x0F0F0F0Fu, half_bits_to_float(ld_u16(b)), half_bits_to_float(ld_u16(b + 2)), 0, 0};
  }
};

template <>
struct X8<DType::q8_0> {
  static constexpr bool kUnsigned = false, kMin = false;
  static constexpr float kC = 0.0f;
  __device__ static Unit unit(const unsigned char* row, int j, int t) {
    const unsigned char* b = row + 34 * j;
    return {ld_u32_2(b + 2 + 4 * t), ld_u32_2(b + 18 + 4 * t), half_bits_to_float(ld_u16(b)), 0.0f, 0, 0};
  }
};

template <>
struct X8<DType::q5_0> {
  static constexpr bool kUnsigned = true, kMin = false;
  static constexpr float kC = -16.0f;
  __device__ static Unit unit(const unsigned char* row, int j, int t) {
    const unsigned char* b = row + 22 * j;
    const uint32_t qh = ld_u32_2(b + 2);
    const uint32_t w = ld_u32_2(b + 6 + 4 * t);
    const float d = half_bits_to_float(ld_u16(b));
    return {(w & 0x0F0F0F0Fu) | (spread4((qh >> (4 * t)) & 0xF) << 4),
            ((w >> 4) & 0x0F0F0F0Fu) | (spread4((qh >> (16 + 4 * t)) & 0xF) << 4), d, 0.0f, 0, 0};
  }
};

template <>
struct X8<DType::q5_1> {
  static constexpr bool kUnsigned = true, kMin = true;
  static constexpr float kC = 0.0f;
  __device__ static Unit unit(const unsigned char* row, int j, int t) {
    const unsigned char* b = row + 24 * j;
    const uint32_t qh = ld_u32(b + 4);
    const uint32_t w = ld_u32(b + 8 + 4 * t);
    return {(w & 0x0F0F0F0Fu) | (spread4((qh >> (4 * t)) & 0xF) << 4),
            ((w >> 4) & 0x0F0F0F0Fu) | (spread4((qh >> (16 + 4 * t)) & 0xF) << 4), half_bits_to_float(ld_u16(b)),
            half_bits_to_float(ld_u16(b + 2)), 0, 0};
  }
};

template <>
struct X8<DType::q4_k> {
  static constexpr bool kUnsigned = true, kMin = true;
  static constexpr float kC = 0.0f;
  __device__ static Unit unit(const unsigned char* row, int j, int t) {
    int sc, mn;
    quantdot::kquant_scale_min(row + 4, j, sc, mn);
    const unsigned char* qs = row + 16 + 32 * (j >> 1);
    const int shift = 4 * (j & 1);
    return {(ld_u32(qs + 4 * t) >> shift) & 0x0F0F0F0Fu, (ld_u32(qs + 16 + 4 * t) >> shift) & 0x0F0F0F0Fu,
            half_bits_to_float(ld_u16(row)) * static_cast<float>(sc),
            -half_bits_to_float(ld_u16(row + 2)) * static_cast<float>(mn), 0, 0};
  }
};

template <>
struct X8<DType::q5_k> {
  static constexpr bool kUnsigned = true, kMin = true;
  static constexpr float kC = 0.0f;
  __device__ static Unit unit(const unsigned char* row, int j, int t) {
    int sc, mn;
    quantdot::kquant_scale_min(row + 4, j, sc, mn);
    const unsigned char* qh = row + 16;
    const unsigned char* qs = row + 48 + 32 * (j >> 1);
    const int shift = 4 * (j & 1);
    const uint32_t lo = ((ld_u32(qs + 4 * t) >> shift) & 0x0F0F0F0Fu) | (((ld_u32(qh + 4 * t) >> j) & 0x01010101u) << 4);
    const uint32_t hi =
        ((ld_u32(qs + 16 + 4 * t) >> shift) & 0x0F0F0F0Fu) | (((ld_u32(qh + 16 + 4 * t) >> j) & 0x01010101u) << 4);
    return {lo, hi, half_bits_to_float(ld_u16(row)) * static_cast<float>(sc),
            -half_bits_to_float(ld_u16(row + 2)) * static_cast<float>(mn), 0, 0};
  }
};

// q6_k: q - 32 as signed bytes, (q | 0x80) - 0x20 ^ 0x80 per byte (no borrow between bytes).
template <>
struct X8<DType::q6_k> {
  static constexpr bool kUnsigned = false;
  static constexpr float kC = 0.0f;
  __device__ static uint32_t centred(uint32_t q) { return ((q | 0x80808080u) - 0x20202020u) ^ 0x80808080u; }
  __device__ static Unit unit(const unsigned char* row, int j, int t) {
    const int h = j >> 2, s = j & 3;
    const unsigned char* ql = row + 64 * h + 32 * (s & 1);
    const unsigned char* qh = row + 128 + 32 * h;
    const int lo_shift = 4 * (s >> 1);
    const uint32_t lo = ((ld_u32_2(ql + 4 * t) >> lo_shift) & 0x0F0F0F0Fu) | (((ld_u32_2(qh + 4 * t) >> (2 * s)) & 0x03030303u) << 4);
    const uint32_t hi =
        ((ld_u32_2(ql + 16 + 4 * t) >> lo_shift) & 0x0F0F0F0Fu) | (((ld_u32_2(qh + 16 + 4 * t) >> (2 * s)) & 0x03030303u) << 4);
    const uint16_t sc = ld_u16(row + 192 + 2 * j);
    return {centred(lo), centred(hi), half_bits_to_float(ld_u16(row + 208)), 0.0f,
            static_cast<int8_t>(sc & 0xFF), static_cast<int8_t>(sc >> 8)};
  }
};

// One stage of weights in shared memory: the raw bytes of 256 values of each of a block's
// ROWS rows (copied in 16-byte pieces where they are whole 16-byte words; q6_k's 210 bytes
// in 8-byte pieces from the 8-byte word that holds their first byte).
template <DType W, int ROWS = kRows>
struct WeightStage {
  static constexpr int rows = ROWS;
  static constexpr int bytes = kStageK / (quantdot::Format<W>::kUnits * 32) * quantdot::Format<W>::kBlockBytes;
  static constexpr bool aligned = bytes % 16 == 0;
  static constexpr int piece = aligned ? 16 : 8;
  static constexpr int pieces = aligned ? bytes / 16 : (bytes + 6 + 7) / 8;
  static constexpr int padded = (pieces * piece + 15) / 16 * 16;
  // Row pitch: 4 (mod 8) words, so the 8 rows of a fragment load fall in different banks.
  static constexpr int pitch = (padded / 4) % 8 == 0 ? padded + 16 : padded;
  static constexpr int stage_bytes = rows * pitch;
};

// An int32 sum |c| < 2^22 (a unit of 32 products of 8-bit values) added to the bits of
// kIntBias = 1.5 * 2^23, whose unit in the last place is 1: the float kIntBias + c, exactly.
constexpr float kIntBias = 12582912.0f;
__device__ __forceinline__ float biased(int c) { return __int_as_float(c + 0x4B400000); }

}  // namespace onepass::cuda::x8
