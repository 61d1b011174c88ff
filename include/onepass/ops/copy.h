// Copy with conversion between f32, f16 and bf16.
#pragma once

#include <cstdint>

namespace onepass::ops {

/// dst[r, c] = convert(src[r, c]). Kernel copy_<S>_<D>. Strides in elements.
struct CopyArgs {
  const void* src;
  void* dst;
  int64_t rows;
  int64_t cols;
  int64_t src_stride;
  int64_t dst_stride;
};

}  // namespace onepass::ops
