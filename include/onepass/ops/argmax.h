// Argmax over rows (greedy sampling helper).
#pragma once

#include <cstdint>

namespace onepass::ops {

/// out[r] = index of the largest value of row r of x [rows, cols]. Ties go to the lowest
/// index; NaNs never win (an all-NaN row gives 0). Kernel argmax_<T> for T in f32, f16,
/// bf16. x_stride in elements.
/// Work: one block per row: CPU one row per block; CUDA grid.x = rows, blockDim a
/// multiple of 32 (row_dims()), reduction of (value, index) pairs preferring the lower
/// index on equal values.
struct ArgmaxArgs {
  const void* x;
  int32_t* out;
  int64_t rows;
  int64_t cols;
  int64_t x_stride;
};

}  // namespace onepass::ops
