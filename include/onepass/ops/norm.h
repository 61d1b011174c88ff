// RMS normalisation over the last dimension, alone, fused with a multiply, or fused with
// the residual add before it.
#pragma once

#include <cstdint>
#include "onepass/exec/graph_session.h"

namespace onepass::ops {

/// out = x / sqrt(mean(x^2) + eps) [* weight] [* scale]. One struct for the ops
///   rms_norm            weight set, scale null
///   rms_norm_no_weight  weight null, scale null
///   rms_norm_mul        weight and scale set (also the fused RMS-norm -> mul)
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

/// Residual add fused with the next norm: sum = a + b, stored in T; then
/// out = sum / sqrt(mean(sum^2) + eps) * weight, computed from sum as stored;
/// a, b, sum and out of type T (f32, f16, bf16), weight f32. Strides
/// in elements. sum may be a or b itself (in-place residual update).
struct AddRmsNormArgs {
  const void* a;
  const void* b;
  void* sum;
  const float* weight;
  void* out;
  int64_t rows;
  int64_t cols;
  int64_t a_stride;
  int64_t b_stride;
  int64_t sum_stride;
  int64_t out_stride;
  float eps;
};

/// out = x / rms(x) * weight over the last dim.
void rms_norm(GraphSession& s, const TensorView& x, const TensorView& weight, const TensorView& out, float eps);

/// out = x / rms(x).
void rms_norm_no_weight(GraphSession& s, const TensorView& x, const TensorView& out, float eps);

/// out = x / rms(x) * weight * scale (scale same shape as out or one row).
void rms_norm_mul(GraphSession& s, const TensorView& x, const TensorView& weight, const TensorView& scale,
                                   const TensorView& out, float eps);

/// sum = a + b; out = sum / rms(sum) * weight (residual add fused with the next norm).
void add_rms_norm(GraphSession& s, const TensorView& a, const TensorView& b, const TensorView& sum,
                                   const TensorView& weight, const TensorView& out, float eps);

}  // namespace onepass::ops
