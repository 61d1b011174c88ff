// RMS normalisation over the last dimension, alone, fused with a multiply, with the
// residual add before it, or with the residual add after it (post-norms).
#pragma once

#include <cstdint>
#include "onepass/exec/graph_session.h"

namespace onepass::ops {

/// out = x / sqrt(mean(x^2) + eps) [* weight] [* scale] [+ residual]. One struct for the ops
///   rms_norm            weight set, scale and residual null
///   rms_norm_no_weight  weight null, scale and residual null
///   rms_norm_mul        weight and scale set (also the fused RMS-norm -> mul)
///   rms_norm_add        weight and residual set (also the fused RMS-norm -> add): the
///                       normalised value is rounded to T, then added to the residual as
///                       add_<T> adds; out may be the residual itself (x += norm(y) * w)
/// x, scale, residual and out are of type T (f32, f16, bf16); weight is f32. Strides in
/// elements; scale_row_step is 0 when one row of scale is broadcast.
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
  const void* residual;
  int64_t residual_stride;
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

/// out = residual + x / rms(x) * weight (a post-norm fused with the residual add after it:
/// Gemma 2 and 3's attention and FFN outputs). out may be x or residual itself (in place),
/// or disjoint from both.
void rms_norm_add(GraphSession& s, const TensorView& x, const TensorView& weight, const TensorView& residual,
                  const TensorView& out, float eps);

/// sum = a + b; out = sum / rms(sum) * weight (residual add fused with the next norm).
void add_rms_norm(GraphSession& s, const TensorView& a, const TensorView& b, const TensorView& sum,
                                   const TensorView& weight, const TensorView& out, float eps);

}  // namespace onepass::ops
