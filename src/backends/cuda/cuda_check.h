// ONEPASS_CUDA_CHECK: turns a failed CUDA runtime call into onepass::Error naming the call,
// the error and the source location. Host code only.
#pragma once

#include <cuda_runtime.h>

#include "onepass/core/error.h"

namespace onepass::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);

}  // namespace onepass::cuda

#define ONEPASS_CUDA_CHECK(expr)                                                   \
  do {                                                                             \
    const cudaError_t onepass_cuda_status_ = (expr);                               \
    if (onepass_cuda_status_ != cudaSuccess) {                                     \
      ::onepass::cuda::throw_cuda_error(onepass_cuda_status_, #expr, __FILE__, __LINE__); \
    }                                                                              \
  } while (0)

/// For destructors and other places that must not throw: logs once to stderr instead.
#define ONEPASS_CUDA_WARN(expr)                                                    \
  do {                                                                             \
    const cudaError_t onepass_cuda_status_ = (expr);                               \
    if (onepass_cuda_status_ != cudaSuccess) {                                     \
      ::onepass::cuda::warn_cuda_error(onepass_cuda_status_, #expr, __FILE__, __LINE__); \
    }                                                                              \
  } while (0)

namespace onepass::cuda {
void warn_cuda_error(cudaError_t status, const char* call, const char* file, int line) noexcept;
}  // namespace onepass::cuda
