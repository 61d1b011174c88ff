#include "cuda_backend.h"
#include "select.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "cublas_library.h"
#include "cuda_check.h"
#include "onepass/core/error.h"
#include "onepass/exec/conflict.h"
#include "onepass/exec/profile.h"

namespace onepass::cuda {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  fail("cuda", call, " failed: ", cudaGetErrorName(status), " (", cudaGetErrorString(status),
       ") at ", base ? base + 1 : file, ":", line);
}

void warn_cuda_error(cudaError_t status, const char* call, const char* file, int line) noexcept {
  // A backend destroyed after the (statically linked) runtime has shut down at process exit
  // has nothing left to release.
  if (status == cudaErrorCudartUnloading) return;
  std::fprintf(stderr, "[cuda] warning: %s failed: %s at %s:%d\n", call, cudaGetErrorName(status),
               file, line);
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver / no device: not an error for callers
    return 0;
  }
  return n;
}

namespace {

constexpr size_t kStagingBytes = 8u << 20;     // pinned bounce buffer for large copies
constexpr size_t kStagedCopyThreshold = 1u << 20;
constexpr size_t kGraphCacheEntries = 16;

}  // namespace

CudaBackend::CudaBackend(int ordinal, const Options& options) : Backend(options), ordinal_(ordinal) {
  const int count = device_count();
  check(count > 0, "cuda", "no CUDA device is available");
  check(ordinal >= 0 && ordinal < count, "cuda", "device ", ordinal, " requested, ", count, " present");
  ONEPASS_CUDA_CHECK(cudaSetDevice(ordinal));
  cudaDeviceProp prop{};
  ONEPASS_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  info_.name = prop.name;
  info_.kind = BackendKind::cuda;
  info_.ordinal = ordinal;
  info_.threads = 0;
  info_.multiprocessors = prop.multiProcessorCount;
  info_.compute_major = prop.major;
  info_.compute_minor = prop.minor;
  info_.total_memory = prop.totalGlobalMem;
  info_.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
  info_.shared_per_block = prop.sharedMemPerBlock;
  info_.shared_per_block_optin = prop.sharedMemPerBlockOptin;
  info_.max_threads_per_block = prop.maxThreadsPerBlock;
  ONEPASS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  register_cuda_kernels(registry_);
  register_cuda_selectors(selectors());
  for (const std::string& name : registry_.names()) configure_kernel(registry_.get(name));
}

void CudaBackend::configure_kernel(const Kernel& k) {
  // Opted in for any dynamic size: a kernel's static shared memory counts against the
  // same 48 KB default (flash_decode_cluster has 48 KB static plus its slots).
  if (k.cuda && k.max_shared_bytes > 0) {
    check(k.max_shared_bytes <= info_.shared_per_block_optin, "cuda", "kernel ", k.name, " needs ",
          k.max_shared_bytes, " bytes of shared memory, the device allows ", info_.shared_per_block_optin);
    ONEPASS_CUDA_CHECK(cudaFuncSetAttribute(k.cuda, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(k.max_shared_bytes)));
  }
  if (k.cuda) {
    // Every kernel asks for the largest shared-memory carveout, so that consecutive
    // kernels never need different L1/shared splits: an SM changes its split only once
    // idle, which stops the next kernel's blocks from joining it early (PDL). None of the
    // kernels relies on L1 for reuse, so they give up nothing (bench-gpu's decode chose it).
    ONEPASS_CUDA_CHECK(cudaFuncSetAttribute(k.cuda, cudaFuncAttributePreferredSharedMemoryCarveout,
                                            cudaSharedmemCarveoutMaxShared));
  }
}

void CudaBackend::add_kernel(Kernel kernel) {
  const std::string name = kernel.name;
  registry_.add(std::move(kernel));
  activate();
  configure_kernel(registry_.get(name));
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(ordinal_);
  ONEPASS_CUDA_WARN(cudaStreamSynchronize(stream_));
  for (CachedGraph& g : graph_cache_) ONEPASS_CUDA_WARN(cudaGraphExecDestroy(g.exec));
  if (cublas_) cublas_library().destroy(cublas_);
  if (cublas_workspace_) ONEPASS_CUDA_WARN(cudaFree(cublas_workspace_));
  for (void* p : scratch_allocations_) ONEPASS_CUDA_WARN(cudaFree(p));
  if (capture_stream_) ONEPASS_CUDA_WARN(cudaStreamDestroy(capture_stream_));
  if (staging_) ONEPASS_CUDA_WARN(cudaFreeHost(staging_));
  ONEPASS_CUDA_WARN(cudaStreamDestroy(stream_));
}

void CudaBackend::activate() const { ONEPASS_CUDA_CHECK(cudaSetDevice(ordinal_)); }

std::unique_ptr<Submission> CudaBackend::new_submission(SubmitMode mode, std::string_view label) {
  return make_cuda_submission(*this, mode, std::string(label));
}

void* CudaBackend::allocate_raw(size_t bytes) {
  activate();
  void* p = nullptr;
  // Sizes are padded to 256 bytes: kernels may read whole 16-byte words past the end of
  // a row that ends unaligned, and those stay inside the allocation.
  const size_t padded = (bytes + 255) / 256 * 256;
  const cudaError_t status = cudaMalloc(&p, padded);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    fail("cuda", "out of memory: cudaMalloc of ", bytes, " bytes failed (", cudaGetErrorName(status), "); ",
         free_bytes, " of ", total, " bytes free on ", info_.name);
  }
  return p;
}

void* CudaBackend::allocate_host_visible_raw(size_t bytes) {
  activate();
  void* p = nullptr;
  const cudaError_t status = cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    fail("cuda", "could not allocate ", bytes, " bytes of pinned host memory: ", cudaGetErrorName(status));
  }
  void* device_pointer = nullptr;
  ONEPASS_CUDA_CHECK(cudaHostGetDevicePointer(&device_pointer, p, 0));
  // With unified addressing the device sees mapped host memory at the host address;
  // views hand the same pointer to kernels and to host code.
  check(device_pointer == p, "cuda", "mapped host memory has a different device address (no UVA)");
  std::lock_guard<std::mutex> lock(pinned_mutex_);
  pinned_.insert(p);
  return p;
}

void CudaBackend::free_raw(void* data, size_t) noexcept {
  cudaSetDevice(ordinal_);
  bool pinned = false;
  {
    std::lock_guard<std::mutex> lock(pinned_mutex_);
    pinned = pinned_.erase(data) > 0;
  }
  // Work still in flight may use the memory: let it finish first.
  ONEPASS_CUDA_WARN(cudaStreamSynchronize(stream_));
  if (pinned) {
    ONEPASS_CUDA_WARN(cudaFreeHost(data));
  } else {
    ONEPASS_CUDA_WARN(cudaFree(data));
  }
}

void CudaBackend::staged_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  std::lock_guard<std::mutex> lock(staging_mutex_);
  if (!staging_) {
    ONEPASS_CUDA_CHECK(cudaHostAlloc(&staging_, 2 * kStagingBytes, cudaHostAllocPortable));
    staging_bytes_ = kStagingBytes;
  }
  char* stage[2] = {static_cast<char*>(staging_), static_cast<char*>(staging_) + staging_bytes_};
  // Double buffering: the host fills (or drains) one half while the copy engine moves
  // the other.
  size_t done = 0;
  int slot = 0;
  size_t pending_bytes[2] = {0, 0};
  size_t pending_offset[2] = {0, 0};
  auto drain = [&](int s) {
    if (kind == cudaMemcpyDeviceToHost && pending_bytes[s]) {
      std::memcpy(static_cast<char*>(dst) + pending_offset[s], stage[s], pending_bytes[s]);
    }
    pending_bytes[s] = 0;
  };
  while (done < bytes) {
    const size_t n = std::min(staging_bytes_, bytes - done);
    ONEPASS_CUDA_CHECK(cudaStreamSynchronize(stream_));  // slot free (copy finished)
    drain(slot);
    if (kind == cudaMemcpyHostToDevice) {
      std::memcpy(stage[slot], static_cast<const char*>(src) + done, n);
      ONEPASS_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + done, stage[slot], n, kind, stream_));
    } else {
      ONEPASS_CUDA_CHECK(cudaMemcpyAsync(stage[slot], static_cast<const char*>(src) + done, n, kind, stream_));
      pending_bytes[slot] = n;
      pending_offset[slot] = done;
    }
    done += n;
    slot ^= 1;
  }
  ONEPASS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  drain(0);
  drain(1);
}

void CudaBackend::copy_from_host(void* dst, const void* src, size_t bytes) {
  activate();
  if (bytes >= kStagedCopyThreshold) return staged_copy(dst, src, bytes, cudaMemcpyHostToDevice);
  // Stream order: the copy happens after all submitted work, so it never races it.
  ONEPASS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
  ONEPASS_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  activate();
  if (bytes >= kStagedCopyThreshold) return staged_copy(dst, src, bytes, cudaMemcpyDeviceToHost);
  ONEPASS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
  ONEPASS_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy_on_device(void* dst, const void* src, size_t bytes) {
  activate();
  ONEPASS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
  ONEPASS_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::fill(void* dst, uint8_t byte, size_t bytes) {
  activate();
  ONEPASS_CUDA_CHECK(cudaMemsetAsync(dst, byte, bytes, stream_));
  ONEPASS_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::synchronize() {
  activate();
  const cudaError_t status = cudaStreamSynchronize(stream_);
  if (status != cudaSuccess) {
    fail("cuda", "device work failed: ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
  }
}

size_t CudaBackend::free_memory() const {
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return free_bytes;
}

cudaGraphExec_t CudaBackend::instantiate_cached(cudaGraph_t graph, uint64_t key) {
  for (auto it = graph_cache_.begin(); it != graph_cache_.end(); ++it) {
    if (it->key != key) continue;
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(it->exec, graph, &info) == cudaSuccess) {
      graph_cache_.splice(graph_cache_.begin(), graph_cache_, it);
      ++cache_stats_.updated;
      return graph_cache_.front().exec;
    }
    (void)cudaGetLastError();
    // Same key but not updatable (hash collision or a change CUDA cannot apply in place).
    ONEPASS_CUDA_CHECK(cudaStreamSynchronize(stream_));
    ONEPASS_CUDA_WARN(cudaGraphExecDestroy(it->exec));
    graph_cache_.erase(it);
    break;
  }
  cudaGraphExec_t exec = nullptr;
  ONEPASS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  ++cache_stats_.instantiated;
  graph_cache_.push_front({key, exec});
  if (graph_cache_.size() > kGraphCacheEntries) {
    ONEPASS_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the evicted graph may be running
    ONEPASS_CUDA_WARN(cudaGraphExecDestroy(graph_cache_.back().exec));
    graph_cache_.pop_back();
  }
  return exec;
}

void check_cublas(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    const CublasLibrary& lib = cublas_library();
    fail("cuda", call, " failed: ", lib.status_name(status), " (", lib.status_string(status), ")");
  }
}

void* HostContext::scratch(int slot, size_t bytes) const { return backend->host_scratch(slot, bytes); }

void* CudaBackend::host_scratch(int slot, size_t bytes) {
  check(slot >= 0 && slot < kHostScratchSlots, "cuda", "host scratch slot ", slot, " of ", kHostScratchSlots);
  if (scratch_bytes_[slot] < bytes) {
    // Graphs recorded earlier keep the old address: it stays allocated.
    const size_t size = std::max(bytes, 2 * scratch_bytes_[slot]);
    scratch_[slot] = allocate_raw(size);
    scratch_allocations_.push_back(scratch_[slot]);
    scratch_bytes_[slot] = size;
  }
  return scratch_[slot];
}

void CudaBackend::run_host(const Dispatch& d, cudaStream_t stream) {
  activate();
  // cuBLAS wants 32 MiB of workspace on Hopper; a fixed one (not its own pool) also keeps
  // allocations out of graph capture.
  constexpr size_t kWorkspaceBytes = 32u << 20;
  if (!cublas_) {
    const auto t0 = std::chrono::steady_clock::now();
    check_cublas(cublas_library().create(&cublas_), "cublasCreate");
    cublas_workspace_ = allocate_raw(kWorkspaceBytes);
    if (options().graph_diag) {
      std::fprintf(stderr, "[graph_diag] cuBLAS set up in %.3f ms\n",
                   std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  check_cublas(cublas_library().set_stream(cublas_, stream), "cublasSetStream");
  // cublasSetStream resets the workspace to cuBLAS's pool.
  check_cublas(cublas_library().set_workspace(cublas_, cublas_workspace_, kWorkspaceBytes),
               "cublasSetWorkspace");
  HostContext context;
  context.stream = stream;
  context.cublas = cublas_;
  context.backend = this;
  context.multiprocessors = std::max(1, info_.multiprocessors);
  d.kernel->cuda_host(d.args_data(), &context);
}

cudaGraph_t CudaBackend::capture_host(const Dispatch& d) {
  activate();
  if (!capture_stream_) ONEPASS_CUDA_CHECK(cudaStreamCreateWithFlags(&capture_stream_, cudaStreamNonBlocking));
  // Relaxed: the entry point may allocate scratch (not a stream operation) while captured.
  const auto t0 = std::chrono::steady_clock::now();
  ONEPASS_CUDA_CHECK(cudaStreamBeginCapture(capture_stream_, cudaStreamCaptureModeRelaxed));
  try {
    run_host(d, capture_stream_);
  } catch (...) {
    cudaGraph_t partial = nullptr;
    (void)cudaStreamEndCapture(capture_stream_, &partial);
    if (partial) (void)cudaGraphDestroy(partial);
    (void)cudaGetLastError();
    throw;
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t status = cudaStreamEndCapture(capture_stream_, &graph);
  if (options().graph_diag) {
    std::fprintf(stderr, "[graph_diag] captured %s in %.3f ms\n", d.name().c_str(),
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    fail("cuda", "capturing ", d.name(), " into a graph failed: ", cudaGetErrorName(status), " (",
         cudaGetErrorString(status), ")");
  }
  return graph;
}

std::shared_ptr<Backend> make_backend(int ordinal, const Options& options) {
  return std::make_shared<CudaBackend>(ordinal, options);
}

}  // namespace onepass::cuda
