// CUDA kernel: argmax_<T>. One block per row (row_dims(): a whole number of warps, at most
// 1024 threads). Each thread scans a strided part of the row with 16-byte loads when the
// row is aligned, then (value, index) pairs are reduced over the warp and the block.
#include <climits>
#include <cstring>

#include "common.cuh"
#include "onepass/ops/argmax.h"
#include "registration.h"

namespace onepass::cuda {
namespace {

// A candidate (value, index); index kNone means no candidate yet (NaNs never become one).
constexpr int32_t kNone = INT_MAX;

// True when (v, i) beats (best_v, best_i): larger, or equal at a lower index. NaN v never
// wins since both comparisons are false; -inf beats "no candidate" through the index.
__device__ __forceinline__ bool better(float v, int32_t i, float best_v, int32_t best_i) {
  return v > best_v || (v == best_v && i < best_i);
}

template <DType T>
__global__ void argmax_kernel(const __grid_constant__ ops::ArgmaxArgs a) {
  using E = Elem<T>;
  using S = typename E::storage;
  constexpr int kVec = 16 / sizeof(S);  // values per 16-byte load
  __shared__ float warp_value[32];
  __shared__ int32_t warp_index[32];
  pdl_wait();
  const int64_t r = blockIdx.x;
  if (r >= a.rows) return;  // whole block, before any barrier
  const S* x = static_cast<const S*>(a.x) + r * a.x_stride;
  const int64_t cols = a.cols;  // the op checks cols <= INT32_MAX, so indices fit int32
  const int tid = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);

  float best_v = -INFINITY;
  int32_t best_i = kNone;
  int64_t done = 0;
  if (reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    const int64_t vecs = cols / kVec;
#pragma unroll 4
    for (int64_t j = tid; j < vecs; j += threads) {
      const uint4 raw = reinterpret_cast<const uint4*>(x)[j];
      S h[kVec];
      std::memcpy(h, &raw, sizeof(raw));
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const float v = E::load(h[e]);
        // Indices grow within a thread, so ">" keeps the first of equal values.
        if (v > best_v || (v == best_v && best_i == kNone)) {
          best_v = v;
          best_i = static_cast<int32_t>(j * kVec + e);
        }
      }
    }
    done = vecs * kVec;
  }
  for (int64_t c = done + tid; c < cols; c += threads) {
    const float v = E::load(x[c]);
    if (better(v, static_cast<int32_t>(c), best_v, best_i)) {
      best_v = v;
      best_i = static_cast<int32_t>(c);
    }
  }

#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, best_v, offset);
    const int32_t i = __shfl_xor_sync(0xffffffffu, best_i, offset);
    if (better(v, i, best_v, best_i)) {
      best_v = v;
      best_i = i;
    }
  }
  const int lane = tid & 31;
  const int warp = tid >> 5;
  if (lane == 0) {
    warp_value[warp] = best_v;
    warp_index[warp] = best_i;
  }
  __syncthreads();
  if (warp == 0) {
    const int warps = (threads + 31) >> 5;
    best_v = lane < warps ? warp_value[lane] : -INFINITY;
    best_i = lane < warps ? warp_index[lane] : kNone;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float v = __shfl_xor_sync(0xffffffffu, best_v, offset);
      const int32_t i = __shfl_xor_sync(0xffffffffu, best_i, offset);
      if (better(v, i, best_v, best_i)) {
        best_v = v;
        best_i = i;
      }
    }
    // A row without any number (all NaN) gives 0, as on the CPU.
    if (lane == 0) a.out[r] = best_i == kNone ? 0 : best_i;
  }
}

}  // namespace

void register_argmax_cuda_kernels(KernelRegistry& registry) {
  for_each_float_type([&]<DType T>() {
    registry.add(make_cuda_kernel<ops::ArgmaxArgs>(
        std::string("argmax_") + Elem<T>::name, reinterpret_cast<const void*>(&argmax_kernel<T>)));
  });
}

}  // namespace onepass::cuda
