// Device: memory and synchronisation of one compute device (the host CPU or one GPU).
// Kernel execution lives one layer up, in exec/backend.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "onepass/core/buffer.h"
#include "onepass/core/dtype.h"
#include "onepass/core/tensor.h"

namespace onepass {

enum class BackendKind : uint8_t { cpu, cuda };

const char* backend_name(BackendKind kind);

/// Facts about a device that ops use to choose launch shapes.
struct DeviceInfo {
  std::string name;
  BackendKind kind = BackendKind::cpu;
  int ordinal = 0;
  int threads = 1;                  // CPU: worker threads; CUDA: 0
  std::string isa;                  // CPU: instruction-set path of the kernels ("avx512", "avx2", "portable")
  int multiprocessors = 0;          // CUDA SMs
  int compute_major = 0;            // CUDA compute capability
  int compute_minor = 0;
  size_t total_memory = 0;          // bytes
  size_t l2_bytes = 0;              // CUDA L2 cache
  size_t shared_per_block = 0;      // default dynamic shared memory limit per block
  size_t shared_per_block_optin = 0;  // after cudaFuncSetAttribute
  int max_threads_per_block = 1024;
};

/// Base class of every device. Allocation goes through `alloc`, which returns a view that
/// owns its buffer; copies between host and device are explicit.
class Device : public std::enable_shared_from_this<Device> {
 public:
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual const DeviceInfo& info() const = 0;
  BackendKind kind() const { return info().kind; }

  /// A new buffer of `bytes` bytes (contents undefined). Throws Error on out-of-memory,
  /// naming the size asked for and the memory free.
  BufferView alloc(size_t bytes);
  /// A new contiguous tensor.
  TensorView alloc_tensor(DType dtype, Shape shape);
  /// Host memory that this device's kernels read and write directly (CUDA: pinned and
  /// mapped; CPU: ordinary memory). Its data() pointer is valid on the host too, so
  /// per-step inputs can be written with plain stores between submissions and read by
  /// the next submission without a separate copy call.
  BufferView alloc_host_visible(size_t bytes);

  /// Copies between host memory and this device's memory (synchronous).
  virtual void copy_from_host(void* device_dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* device_src, size_t bytes) = 0;
  virtual void copy_on_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void fill(void* device_dst, uint8_t byte, size_t bytes) = 0;
  /// Blocks until all work submitted to the device has finished; throws on device errors.
  virtual void synchronize() = 0;
  /// Bytes of device memory currently free (best effort).
  virtual size_t free_memory() const = 0;

 protected:
  Device() = default;
  virtual void* allocate_raw(size_t bytes) = 0;
  virtual void* allocate_host_visible_raw(size_t bytes) { return allocate_raw(bytes); }
  virtual void free_raw(void* data, size_t bytes) noexcept = 0;
  friend class Buffer;
};

}  // namespace onepass
