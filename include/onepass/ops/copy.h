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

/// dst[0, bytes) = src[0, bytes). Kernel copy_bytes. CPU: 4096 bytes per block; CUDA:
/// grid-stride over bytes (16-byte words when both pointers allow).
struct CopyBytesArgs {
  const void* src;
  void* dst;
  uint64_t bytes;
};

inline constexpr uint64_t kCpuCopyBytesBlock = 4096;

}  // namespace onepass::ops
