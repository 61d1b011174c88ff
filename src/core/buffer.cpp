#include "onepass/core/buffer.h"

#include <cstring>
#include <utility>

#include "onepass/core/device.h"
#include "onepass/core/error.h"

namespace onepass {

Buffer::Buffer(std::shared_ptr<Device> device, void* data, size_t bytes)
    : device_(std::move(device)), data_(data), bytes_(bytes) {}

Buffer::~Buffer() {
  if (data_ != nullptr) device_->free_raw(data_, bytes_);
}

BufferView::BufferView(std::shared_ptr<Buffer> buffer)
    : buffer_(std::move(buffer)), offset_(0), bytes_(buffer_ ? buffer_->size() : 0) {}

BufferView::BufferView(std::shared_ptr<Buffer> buffer, size_t offset, size_t bytes)
    : buffer_(std::move(buffer)), offset_(offset), bytes_(bytes) {
  check(buffer_ != nullptr, "BufferView", "null buffer");
  check(offset <= buffer_->size() && bytes <= buffer_->size() - offset, "BufferView",
        "window [", offset, ", ", offset + bytes, ") exceeds buffer of ", buffer_->size(),
        " bytes");
}

BufferView BufferView::slice(size_t offset, size_t bytes) const {
  check(buffer_ != nullptr, "BufferView::slice", "slice of an empty view");
  check(offset <= bytes_ && bytes <= bytes_ - offset, "BufferView::slice", "slice [", offset,
        ", ", offset + bytes, ") exceeds view of ", bytes_, " bytes");
  return BufferView(buffer_, offset_ + offset, bytes);
}

BufferView BufferView::slice_from(size_t offset) const {
  check(offset <= bytes_, "BufferView::slice_from", "offset ", offset, " exceeds view of ",
        bytes_, " bytes");
  return slice(offset, bytes_ - offset);
}

void* BufferView::data() const {
  return buffer_ ? static_cast<char*>(buffer_->data()) + offset_ : nullptr;
}

Device& BufferView::device() const {
  check(buffer_ != nullptr, "BufferView", "empty view has no device");
  return buffer_->device();
}

void BufferView::write(const void* src, size_t bytes, size_t at) const {
  check(buffer_ != nullptr, "BufferView::write", "write to an empty view");
  check(at <= bytes_ && bytes <= bytes_ - at, "BufferView::write", "writing ", bytes,
        " bytes at ", at, " overruns view of ", bytes_, " bytes");
  if (bytes == 0) return;
  buffer_->device().copy_from_host(static_cast<char*>(data()) + at, src, bytes);
}

void BufferView::read(void* dst, size_t bytes, size_t at) const {
  check(buffer_ != nullptr, "BufferView::read", "read from an empty view");
  check(at <= bytes_ && bytes <= bytes_ - at, "BufferView::read", "reading ", bytes,
        " bytes at ", at, " overruns view of ", bytes_, " bytes");
  if (bytes == 0) return;
  buffer_->device().copy_to_host(dst, static_cast<const char*>(data()) + at, bytes);
}

void BufferView::fill(uint8_t byte) const {
  check(buffer_ != nullptr, "BufferView::fill", "fill of an empty view");
  if (bytes_ != 0) buffer_->device().fill(data(), byte, bytes_);
}

}  // namespace onepass
