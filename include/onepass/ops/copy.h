// Copy with conversion between f32, f16 and bf16.
#pragma once

#include <cstdint>
#include "onepass/exec/graph_session.h"

namespace onepass::ops {

/// dst[r, c] = convert(src[r, c]). Strides in elements.
struct CopyArgs {
  const void* src;
  void* dst;
  int64_t rows;
  int64_t cols;
  int64_t src_stride;
  int64_t dst_stride;
};

/// dst[0, bytes) = src[0, bytes).
struct CopyBytesArgs {
  const void* src;
  void* dst;
  uint64_t bytes;
};

/// Copy with conversion between f32, f16 and bf16 (same number of elements).
void copy(GraphSession& s, const TensorView& src, const TensorView& dst);

/// Raw byte copy of src into dst (same size); e.g. the per-step inputs of a replayed
/// graph from host-visible memory into device memory.
void copy_bytes(GraphSession& s, const BufferView& src, const BufferView& dst);

}  // namespace onepass::ops
