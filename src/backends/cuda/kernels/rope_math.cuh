// The RoPE rotation of one pair, in f32 and in the order ops/rope.h prescribes, shared
// by rope_kv_write and the Q/K/V product that has it folded into its epilogue, so the
// fused and the unfused paths round alike.
#pragma once

#include <cstdint>

namespace onepass::cuda {

/// Pair i's inverse frequency: powf(theta, -2i / rotary_dims) * freq_scale [/ freq_factors[i]].
__device__ __forceinline__ float rope_inv_freq(int64_t i, int32_t rotary_dims, float theta, float freq_scale,
                                               const float* freq_factors) {
  const float exponent = -static_cast<float>(2 * i) / static_cast<float>(rotary_dims);
  float inv_freq = powf(theta, exponent) * freq_scale;
  if (freq_factors != nullptr) inv_freq /= freq_factors[i];
  return inv_freq;
}

/// cos and sin of the angle position * inv_freq.
__device__ __forceinline__ float2 rope_cos_sin_at(int32_t position, float inv_freq) {
  const float angle = static_cast<float>(position) * inv_freq;
  float s, c;
  sincosf(angle, &s, &c);
  return make_float2(c, s);
}

/// cos and sin of pair i's angle: position * powf(theta, -2i / rotary_dims) * freq_scale
/// [/ freq_factors[i]].
__device__ __forceinline__ float2 rope_cos_sin(int32_t position, int64_t i, int32_t rotary_dims, float theta,
                                               float freq_scale, const float* freq_factors) {
  return rope_cos_sin_at(position, rope_inv_freq(i, rotary_dims, theta, freq_scale, freq_factors));
}

/// (x0, x1) rotated by the angle whose (cos, sin) is cs. Every product and sum rounded
/// on its own (the _rn intrinsics are never contracted into FMAs): the compiler chooses
/// contractions per call site, and the two kernels that use this must agree bit for bit.
__device__ __forceinline__ void rope_apply(float x0, float x1, float2 cs, float& y0, float& y1) {
  y0 = __fsub_rn(__fmul_rn(x0, cs.x), __fmul_rn(x1, cs.y));
  y1 = __fadd_rn(__fmul_rn(x0, cs.y), __fmul_rn(x1, cs.x));
}

}  // namespace onepass::cuda
