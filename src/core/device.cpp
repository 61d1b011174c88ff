#include "onepass/core/device.h"

#include "onepass/core/error.h"

namespace onepass {

const char* backend_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::cpu:
      return "cpu";
    case BackendKind::cuda:
      return "cuda";
  }
  return "?";
}

BufferView Device::alloc(size_t bytes) {
  // Zero-byte requests still get a distinct allocation so views have an address.
  const size_t asked = bytes == 0 ? 1 : bytes;
  void* data = allocate_raw(asked);
  // If the shared_ptr construction throws, give the memory back.
  try {
    auto buffer = std::make_shared<Buffer>(shared_from_this(), data, asked);
    return BufferView(std::move(buffer), 0, bytes);
  } catch (...) {
    free_raw(data, asked);
    throw;
  }
}

BufferView Device::alloc_host_visible(size_t bytes) {
  const size_t asked = bytes == 0 ? 1 : bytes;
  void* data = allocate_host_visible_raw(asked);
  try {
    auto buffer = std::make_shared<Buffer>(shared_from_this(), data, asked);
    return BufferView(std::move(buffer), 0, bytes);
  } catch (...) {
    free_raw(data, asked);
    throw;
  }
}

TensorView Device::alloc_tensor(DType dtype, Shape shape) {
  const size_t bytes = static_cast<size_t>(shape.rows()) * dtype_bytes(dtype, shape.cols());
  return TensorView(alloc(bytes), dtype, shape);
}

}  // namespace onepass
