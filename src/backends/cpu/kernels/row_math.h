// Per-value arithmetic shared by a CPU kernel and the fused kernels that fold it in, so a
// fused kernel computes exactly what the unfused pair does.
#pragma once

#include <cmath>
#include <cstdint>

namespace onepass::cpu {

/// Independent partial sums of rms_inverse: the loop vectorises and pipelines without
/// reassociating anything, and the order depends on the length alone.
inline constexpr int64_t kRmsLanes = 8;

/// 1 / rms of a row, the sum of squares in double (kRmsLanes partial sums, then a fixed
/// tree): exact to f32 rounding whatever the length, and independent of how the work was
/// split. `load` reads a value as f32.
template <typename Load>
float rms_inverse(Load&& load, int64_t cols, float eps) {
  double part[kRmsLanes] = {};
  const int64_t body = cols - cols % kRmsLanes;
  for (int64_t c = 0; c < body; c += kRmsLanes) {
    for (int64_t j = 0; j < kRmsLanes; ++j) {
      const double v = load(c + j);
      part[j] += v * v;
    }
  }
  for (int64_t c = body; c < cols; ++c) {
    const double v = load(c);
    part[c - body] += v * v;
  }
  static_assert(kRmsLanes == 8, "the tree below adds 8 partial sums");
  const double sum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  return static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(cols) + eps));
}

/// The angle of RoPE pair i (of rotary_dims / 2) at `position` as (cos, sin):
/// position * theta^(-2i / rotary_dims) * freq_scale, divided by freq_factors[i] if given.
inline void rope_cos_sin(int64_t i, int32_t position, int32_t rotary_dims, float theta, float freq_scale,
                         const float* freq_factors, float& cosine, float& sine) {
  const float exponent = -static_cast<float>(2 * i) / static_cast<float>(rotary_dims);
  float inv_freq = std::pow(theta, exponent) * freq_scale;
  if (freq_factors != nullptr) inv_freq /= freq_factors[i];
  const float angle = static_cast<float>(position) * inv_freq;
  cosine = std::cos(angle);
  sine = std::sin(angle);
}

/// exp(-x) overflows to inf for x < -88, giving x / inf = -0: the right limit.
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

/// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
inline float gelu(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kCubic = 0.044715f;
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(u));
}

/// The activations of activate_rows.
enum class Activation : uint8_t { silu, gelu, softcap };

/// out[j] = act(x[j]) · up[j] for j < n (act alone where up is null), act silu, gelu (as
/// above) or softcap (cap · tanh(x / cap)). On x86 SIMD sets, exp and tanh are vector
/// polynomials within a few f32 ulp of the scalar functions (activation.cpp); the
/// activation kernels and the fused products both call this, so they agree bit for bit.
void activate_rows(Activation act, const float* x, const float* up, float* out, int64_t n, float cap = 0.0f);

}  // namespace onepass::cpu
