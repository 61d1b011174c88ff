// RMS normalisation over the last dimension, alone or fused with a multiply.
#pragma once

#include <cstdint>

namespace onepass::ops {

/// out = x / sqrt(mean(x^2) + eps) [* weight] [* scale]. One struct for the kernels
///   rms_norm_<T>           weight set, scale null
///   rms_norm_noweight_<T>  weight null, scale null
///   rms_norm_mul_<T>       weight and scale set (the fused RMS-norm -> mul)
/// x, scale and out are of type T (f32, f16, bf16); weight is f32. Strides in elements;
/// scale_row_step is 0 when one row of scale is broadcast.
struct RmsNormArgs {
  const void* x;
  const float* weight;
  const void* scale;
  void* out;
  int64_t rows;
  int64_t cols;
  int64_t x_stride;
  int64_t scale_stride;
  int64_t out_stride;
  int64_t scale_row_step;
  float eps;
};

}  // namespace onepass::ops
