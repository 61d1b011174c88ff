// The CUDA backend: device memory through cudaMalloc (never managed memory), one stream,
// kernels compiled ahead of time by nvcc, submissions as direct stream launches or as CUDA
// graphs (cached by topology; replayed without rebuilding).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "host_context.h"
#include "onepass/exec/backend.h"

namespace onepass::cuda {

/// Number of usable CUDA devices; 0 when there is no driver or no GPU. Never throws.
int device_count();

/// Creates the backend for device `ordinal` (kernels registered).
std::shared_ptr<Backend> make_backend(int ordinal, const Options& options);

class CudaBackend;

/// An instantiated CUDA graph with the topology key it was built from.
struct CachedGraph {
  uint64_t key = 0;
  cudaGraphExec_t exec = nullptr;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int ordinal, const Options& options);
  ~CudaBackend() override;

  const DeviceInfo& info() const override { return info_; }
  const KernelRegistry& registry() const override { return registry_; }
  void add_kernel(Kernel kernel) override;
  std::unique_ptr<Submission> new_submission(SubmitMode mode, std::string_view label) override;

  void copy_from_host(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void copy_on_device(void* dst, const void* src, size_t bytes) override;
  void fill(void* dst, uint8_t byte, size_t bytes) override;
  void synchronize() override;
  size_t free_memory() const override;

  int ordinal() const { return ordinal_; }
  cudaStream_t stream() const { return stream_; }
  /// Makes this backend's device current on the calling thread.
  void activate() const;

  /// Returns an instantiated graph for `graph`: a cached one with the same topology
  /// updated in place (cudaGraphExecUpdate), or a new instantiation. The backend owns it.
  cudaGraphExec_t instantiate_cached(cudaGraph_t graph, uint64_t topology_key);
  GraphCacheStats graph_cache_stats() const override { return cache_stats_; }

  /// Host entry points (Kernel::cuda_host): runs `d`'s host function, enqueuing its work on
  /// `stream`.
  void run_host(const Dispatch& d, cudaStream_t stream);
  /// `d`'s host function captured into a new graph (the caller destroys it).
  cudaGraph_t capture_host(const Dispatch& d);
  /// See HostContext::scratch.
  void* host_scratch(int slot, size_t bytes);

 protected:
  void* allocate_raw(size_t bytes) override;
  void* allocate_host_visible_raw(size_t bytes) override;
  void free_raw(void* data, size_t bytes) noexcept override;

 private:
  void staged_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
  /// Sets a registered kernel's function attributes (shared memory, carveout).
  void configure_kernel(const Kernel& k);

  int ordinal_;
  DeviceInfo info_;
  KernelRegistry registry_;
  cudaStream_t stream_ = nullptr;
  std::mutex pinned_mutex_;
  std::set<void*> pinned_;  // host-visible allocations (freed with cudaFreeHost)
  // Pinned staging for large host<->device copies.
  void* staging_ = nullptr;
  size_t staging_bytes_ = 0;
  std::mutex staging_mutex_;
  // Host entry points: a stream to capture them on, cuBLAS, scratch. Every scratch
  // allocation is kept until the backend goes (recorded graphs hold their addresses).
  cudaStream_t capture_stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* cublas_workspace_ = nullptr;
  void* scratch_[kHostScratchSlots] = {};
  size_t scratch_bytes_[kHostScratchSlots] = {};
  std::vector<void*> scratch_allocations_;
  // Most recently used instantiated graphs, by topology key.
  std::list<CachedGraph> graph_cache_;
  GraphCacheStats cache_stats_;
};

/// Registers every CUDA kernel family (list in cuda_kernels.cu).
void register_cuda_kernels(KernelRegistry& registry);

/// A new submission on `backend` (cuda_submission.cpp).
std::unique_ptr<Submission> make_cuda_submission(CudaBackend& backend, SubmitMode mode, std::string label);

}  // namespace onepass::cuda
