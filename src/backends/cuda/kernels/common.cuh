// Device-side helpers shared by the CUDA kernels. Device code only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "onepass/core/dtype.h"

namespace onepass::cuda {

/// Storage type and conversions for each float DType.
template <DType T>
struct Elem;

template <>
struct Elem<DType::f32> {
  using storage = float;
  __device__ __forceinline__ static float load(storage v) { return v; }
  __device__ __forceinline__ static storage store(float v) { return v; }
  static constexpr const char* name = "f32";
};

template <>
struct Elem<DType::f16> {
  using storage = __half;
  __device__ __forceinline__ static float load(storage v) { return __half2float(v); }
  __device__ __forceinline__ static storage store(float v) { return __float2half_rn(v); }
  static constexpr const char* name = "f16";
};

template <>
struct Elem<DType::bf16> {
  using storage = __nv_bfloat16;
  __device__ __forceinline__ static float load(storage v) { return __bfloat162float(v); }
  __device__ __forceinline__ static storage store(float v) { return __float2bfloat16_rn(v); }
  static constexpr const char* name = "bf16";
};

/// Programmatic dependent launch. Every kernel registered with `pdl = true` calls this
/// before touching global memory that another dispatch of the pass may write. Before it a
/// kernel may only prefetch into L2, load what its dispatch declares as early_reads (the
/// backend then never launches it early after a kernel writing those), or load what its op
/// lets the caller promise the predecessor does not write (flash_decode's
/// ops::KvHistory::before_wait). It waits until the predecessor grids have completed and
/// their writes are visible, then lets the next kernel in the chain be launched, so that
/// kernel's launch and prologue overlap this one's execution (it will in turn wait here
/// for this grid to complete). Since no kernel lets its successor launch before its own
/// wait, every dispatch but the predecessor has completed when a kernel starts. No-ops
/// when the kernel was not launched with PDL.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// The block's threads counted in one dimension, x fastest (blocks of more than one row
/// of threads: the mv1 kernels' K split).
__device__ __forceinline__ int flat_thread() { return static_cast<int>(threadIdx.x + threadIdx.y * blockDim.x); }
__device__ __forceinline__ int flat_threads() { return static_cast<int>(blockDim.x * blockDim.y); }

/// Sum over the block (blockDim.x a multiple of 32 or blockDim.y 1; at most 1024 threads).
/// The result is the same on every thread. `scratch` holds 32 floats of shared memory.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = flat_thread() & 31;
  const int warp = flat_thread() >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = (flat_threads() + 31) >> 5;
  v = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

/// Calls f.template operator()<T>() for f32, f16 and bf16.
template <typename F>
void for_each_float_type(F&& f) {
  f.template operator()<DType::f32>();
  f.template operator()<DType::f16>();
  f.template operator()<DType::bf16>();
}

}  // namespace onepass::cuda
