// BufferPool: a bump arena over one allocation for the per-pass transient tensors.
#pragma once

#include <cstddef>

#include "onepass/core/buffer.h"
#include "onepass/core/tensor.h"

namespace onepass {

/// Hands out aligned sub-views of one large buffer; `reset()` makes all of it free again
/// (call it once the pass that used the views has finished on the device).
class BufferPool {
 public:
  BufferPool(Device& device, size_t capacity_bytes, size_t alignment = 256);

  /// The next `bytes` bytes; throws Error naming the request and the space left when full.
  BufferView alloc(size_t bytes);
  TensorView alloc_tensor(DType dtype, Shape shape);
  void reset() { used_ = 0; }

  size_t capacity() const { return arena_.size(); }
  size_t used() const { return used_; }
  size_t high_water() const { return high_water_; }
  const BufferView& arena() const { return arena_; }

 private:
  BufferView arena_;
  size_t alignment_;
  size_t used_ = 0;
  size_t high_water_ = 0;
};

}  // namespace onepass
