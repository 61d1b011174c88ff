// Kernel: a compiled entry point of one backend; KernelRegistry: name -> Kernel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace onepass {

struct Dim3 {
  uint32_t x = 1;
  uint32_t y = 1;
  uint32_t z = 1;
  uint64_t count() const { return uint64_t{x} * y * z; }
  friend bool operator==(const Dim3&, const Dim3&) = default;
};

/// Grid of blocks, threads per block and dynamic shared memory (CUDA terms; the CPU
/// backend runs the same grid as a parallel-for over blocks).
struct LaunchDims {
  Dim3 grid;
  Dim3 block;
  uint32_t shared_bytes = 0;
  friend bool operator==(const LaunchDims&, const LaunchDims&) = default;
};

/// A CPU kernel runs blocks [first_block, end_block) of the linearised grid
/// (x fastest). Every block must compute the same values whichever thread runs it, so
/// results do not depend on the thread count.
using CpuKernelFn = void (*)(const void* args, const LaunchDims& dims, uint64_t first_block,
                             uint64_t end_block);

/// A CUDA entry point that is host code enqueuing work on a stream (a library call such
/// as a cuBLAS GEMM, with the kernels it needs around it) instead of one __global__
/// launch. `context` is the CUDA backend's cuda::HostContext (stream, cuBLAS handle,
/// scratch memory). The backend runs it on its stream, or captures it into a child
/// graph of a graph submission.
using CudaHostFn = void (*)(const void* args, void* context);

/// One entry point. Every kernel takes a single POD argument struct by value; the
/// struct type is shared by all backends (see ops/).
struct Kernel {
  std::string name;
  size_t args_size = 0;            // sizeof the argument struct, checked at dispatch
  CpuKernelFn cpu = nullptr;       // set on the CPU backend
  const void* cuda = nullptr;      // __global__ function, set on the CUDA backend
  CudaHostFn cuda_host = nullptr;  // or host code enqueuing the work (CUDA backend)
  uint32_t max_threads = 1024;     // largest block the kernel supports
  uint32_t max_shared_bytes = 0;   // dynamic shared memory it was configured for
  /// The kernel waits for its predecessors (cudaGridDependencySynchronize) before it
  /// touches global memory other dispatches may write, so it may be launched early with programmatic dependent
  /// launch (Hopper) and overlap its launch with the predecessor's tail.
  bool pdl = false;
  /// CUDA: launched in thread-block clusters of {grid.x, 1, 1}, so that the blocks of one
  /// row of the grid share distributed shared memory (sm_90); grid.x must be at most
  /// kMaxClusterBlocks.
  bool cluster_rows = false;
};

/// Largest cluster a Kernel::cluster_rows launch may ask for (the portable limit).
inline constexpr uint32_t kMaxClusterBlocks = 8;

/// Kernels of one backend by stable name ("rms_norm_f32", "mv_q4_0_f32", ...).
class KernelRegistry {
 public:
  /// Registers a kernel; throws Error when the name is taken.
  void add(Kernel kernel);
  /// The kernel called `name`; throws Error listing the closest registered names.
  const Kernel& get(std::string_view name) const;
  /// nullptr when absent.
  const Kernel* find(std::string_view name) const;
  bool contains(std::string_view name) const { return find(name) != nullptr; }
  std::vector<std::string> names() const;
  size_t size() const { return kernels_.size(); }
  /// Up to `count` registered names closest to `name` (edit distance, prefix first).
  std::vector<std::string> near_names(std::string_view name, size_t count = 5) const;

 private:
  std::unordered_map<std::string, std::unique_ptr<Kernel>> kernels_;
};

}  // namespace onepass
