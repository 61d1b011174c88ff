// Elementwise ops: add, mul (same shape or one row broadcast) and scale.
// Argument structs are shared by every backend's kernels.
#pragma once

#include <cstdint>
#include "onepass/exec/graph_session.h"

namespace onepass::ops {

/// out[r, c] = a[r, c] (op) b[r * b_row_step, c]. Strides are in elements; b_row_step is
/// 0 when one row of b is broadcast over every row of a. Types f32, f16, bf16
/// (a, b and out share the type).
struct BinaryArgs {
  const void* a;
  const void* b;
  void* out;
  int64_t rows;
  int64_t cols;
  int64_t a_stride;
  int64_t b_stride;
  int64_t out_stride;
  int64_t b_row_step;  // 1, or 0 for a broadcast row
};

/// out = x * factor.
struct ScaleArgs {
  const void* x;
  void* out;
  int64_t rows;
  int64_t cols;
  int64_t x_stride;
  int64_t out_stride;
  float factor;
};

/// out = a + b; b has a's shape or is one row broadcast over a's rows.
void add(GraphSession& s, const TensorView& a, const TensorView& b, const TensorView& out);

/// out = a * b; broadcast as add.
void mul(GraphSession& s, const TensorView& a, const TensorView& b, const TensorView& out);

/// out = x * factor.
void scale(GraphSession& s, const TensorView& x, float factor, const TensorView& out);

}  // namespace onepass::ops
