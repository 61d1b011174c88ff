// Buffer (one allocation on a device), BufferView (a bounds-checked byte window into one)
// and MemRange (the address interval a view covers, used for dependency analysis).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

namespace onepass {

class Device;

/// Half-open address interval [begin, end) in the address space of the owning device.
struct MemRange {
  uint64_t begin = 0;
  uint64_t end = 0;

  bool empty() const { return end <= begin; }
  uint64_t size() const { return empty() ? 0 : end - begin; }
  /// True when the two ranges share at least one byte (empty ranges overlap nothing).
  bool overlaps(const MemRange& other) const {
    return !empty() && !other.empty() && begin < other.end && other.begin < end;
  }
  bool contains(const MemRange& other) const {
    return other.empty() || (begin <= other.begin && other.end <= end);
  }
  friend bool operator==(const MemRange&, const MemRange&) = default;
};

/// One allocation on a device (host memory for the CPU backend, cudaMalloc memory for
/// CUDA). Owned through shared_ptr: views, recorded graphs and in-flight submissions keep
/// it alive.
class Buffer {
 public:
  Buffer(std::shared_ptr<Device> device, void* data, size_t bytes);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  uint64_t address() const { return reinterpret_cast<uint64_t>(data_); }
  size_t size() const { return bytes_; }
  Device& device() const { return *device_; }
  const std::shared_ptr<Device>& device_ptr() const { return device_; }

 private:
  std::shared_ptr<Device> device_;
  void* data_;
  size_t bytes_;
};

/// A window {buffer, offset, bytes} into a Buffer. Cheap to copy; holds shared ownership.
class BufferView {
 public:
  BufferView() = default;
  /// The whole buffer.
  explicit BufferView(std::shared_ptr<Buffer> buffer);
  BufferView(std::shared_ptr<Buffer> buffer, size_t offset, size_t bytes);

  /// A sub-window relative to this view; throws Error when it does not fit.
  BufferView slice(size_t offset, size_t bytes) const;
  /// Everything from `offset` to the end of this view.
  BufferView slice_from(size_t offset) const;

  explicit operator bool() const { return buffer_ != nullptr; }
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }
  size_t offset() const { return offset_; }
  size_t size() const { return bytes_; }
  /// Raw address of the first byte (host pointer on the CPU, device pointer on CUDA).
  void* data() const;
  uint64_t address() const { return reinterpret_cast<uint64_t>(data()); }
  MemRange range() const { return {address(), address() + bytes_}; }
  Device& device() const;

  /// Host -> view copy of `bytes` bytes at byte `at` of the view (bounds-checked).
  void write(const void* src, size_t bytes, size_t at = 0) const;
  /// View -> host copy.
  void read(void* dst, size_t bytes, size_t at = 0) const;
  /// Sets every byte of the view.
  void fill(uint8_t byte) const;

  template <typename T>
  void write(std::span<const T> values, size_t at = 0) const {
    static_assert(std::is_trivially_copyable_v<T>);
    write(values.data(), values.size_bytes(), at);
  }
  template <typename T>
  void write(const std::vector<T>& values, size_t at = 0) const {
    write(std::span<const T>(values), at);
  }
  /// Reads the whole view as an array of T (size must divide evenly).
  template <typename T>
  std::vector<T> read_as() const {
    static_assert(std::is_trivially_copyable_v<T>);
    std::vector<T> out(bytes_ / sizeof(T));
    read(out.data(), out.size() * sizeof(T));
    return out;
  }

 private:
  std::shared_ptr<Buffer> buffer_;
  size_t offset_ = 0;
  size_t bytes_ = 0;
};

}  // namespace onepass
