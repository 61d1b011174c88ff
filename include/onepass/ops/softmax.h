// Row softmax with f32 accumulation, optional scale and causal mask.
#pragma once

#include <cstdint>
#include "onepass/exec/graph_session.h"

namespace onepass::ops {

/// Options of GraphSession::softmax. The row r of x [rows, cols] is softmax(scale * x[r]);
/// with `causal`, element (r, c) is masked (weight 0) when c > (r % q) + position_offset,
/// where q = queries, or rows when queries is 0. So a score matrix [heads * queries, keys]
/// is masked per head, and position_offset is the position of the first query (keys
/// already in the cache). A row whose elements are all masked comes out as zeros.
struct SoftmaxParams {
  float scale = 1.0f;
  bool causal = false;
  int32_t position_offset = 0;
  int64_t queries = 0;
};

/// x and out share the type (f32, f16, bf16); f32 max, exp and sum. Strides in elements.
/// `queries` is already resolved (never 0); `causal` is 0 or 1.
/// One block per row: CPU one row per block; CUDA one block per row (grid.x = rows),
/// blockDim a multiple of 32 (row_dims()).
struct SoftmaxArgs {
  const void* x;
  void* out;
  int64_t rows;
  int64_t cols;
  int64_t x_stride;
  int64_t out_stride;
  int64_t queries;
  float scale;
  int32_t causal;
  int32_t position_offset;
};

/// Row softmax with f32 accumulation, optional scale and causal mask.
void softmax(GraphSession& s, const TensorView& x, const TensorView& out, const SoftmaxParams& params);

}  // namespace onepass::ops
