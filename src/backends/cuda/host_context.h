// What a CUDA host entry point (Kernel::cuda_host) works with: the stream to enqueue on,
// a cuBLAS handle bound to that stream, and scratch memory owned by the backend.
//
// The backend runs host entry points one at a time: directly on its stream, or in a graph
// where each one's node depends on the previous one's (CudaSubmission chains them). So a
// scratch slot belongs to the running entry point, and its contents do not outlive it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace onepass::cuda {

class CudaBackend;

/// Turns a failed cuBLAS call into onepass::Error naming the call.
void check_cublas(cublasStatus_t status, const char* call);

struct HostContext {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;  // bound to `stream`, with the backend's workspace
  CudaBackend* backend = nullptr;
  int multiprocessors = 1;  // of the device

  /// At least `bytes` of device memory for scratch slot `slot` (< kHostScratchSlots),
  /// 256-byte aligned. A recorded graph keeps the address it was given: the backend never
  /// frees a slot's memory while it lives (a larger request adds a new allocation).
  void* scratch(int slot, size_t bytes) const;
};

inline constexpr int kHostScratchSlots = 2;

}  // namespace onepass::cuda
