#include "onepass/core/buffer_pool.h"

#include <algorithm>

#include "onepass/core/device.h"
#include "onepass/core/error.h"

namespace onepass {

BufferPool::BufferPool(Device& device, size_t capacity_bytes, size_t alignment)
    : arena_(device.alloc(capacity_bytes)), alignment_(alignment) {
  check(alignment != 0 && (alignment & (alignment - 1)) == 0, "BufferPool",
        "alignment must be a power of two, got ", alignment);
}

BufferView BufferPool::alloc(size_t bytes) {
  const size_t start = (used_ + alignment_ - 1) & ~(alignment_ - 1);
  if (start > arena_.size() || bytes > arena_.size() - start) {
    fail("BufferPool", "out of space: asked for ", bytes, " bytes with ", used_, " of ",
         arena_.size(), " in use (", arena_.size() - std::min(start, arena_.size()),
         " free); make the pool larger or reset() it between passes");
  }
  used_ = start + bytes;
  high_water_ = std::max(high_water_, used_);
  return arena_.slice(start, bytes);
}

TensorView BufferPool::alloc_tensor(DType dtype, Shape shape) {
  const size_t bytes = static_cast<size_t>(shape.rows()) * dtype_bytes(dtype, shape.cols());
  return TensorView(alloc(bytes), dtype, shape);
}

}  // namespace onepass
