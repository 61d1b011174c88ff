// CUDA kernels: argmax_<T>, one block per row (row_dims(): a whole number of warps, at
// most 1024 threads), and argmax_cluster_<T> for long rows: a cluster of blocks per row,
// each scanning a chunk, the first block merging their candidates from its shared memory.
// Each thread scans a strided part of its range with 16-byte loads when it is aligned,
// then (value, index) pairs are reduced over the warp and the block. The _feed variants
// (fusion rule argmax+feed_token) also feed the index to the next decode step.
#include <climits>
#include <cstring>

#include <cooperative_groups.h>

#include "common.cuh"
#include "onepass/ops/argmax.h"
#include "../launch.h"
#include "ptx.cuh"
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

// The best (value, index) of x[begin, end) over the block (every thread gets it; begin a
// multiple of 16 / sizeof(S) when x is 16-byte aligned, so the range is read in 16-byte
// loads when x is).
template <DType T>
__device__ __forceinline__ void block_argmax(const typename Elem<T>::storage* x, int64_t begin, int64_t end,
                                             float& best_v, int32_t& best_i) {
  using E = Elem<T>;
  using S = typename E::storage;
  constexpr int kVec = 16 / sizeof(S);  // values per 16-byte load
  __shared__ float warp_value[32];
  __shared__ int32_t warp_index[32];
  const int tid = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  best_v = -INFINITY;
  best_i = kNone;
  int64_t done = begin;
  if (reinterpret_cast<uintptr_t>(x + begin) % 16 == 0) {
    const int64_t vecs = (end - begin) / kVec;
    const uint4* v = reinterpret_cast<const uint4*>(x + begin);
#pragma unroll 4
    for (int64_t j = tid; j < vecs; j += threads) {
      const uint4 raw = v[j];
      S h[kVec];
      std::memcpy(h, &raw, sizeof(raw));
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const float value = E::load(h[e]);
        // Indices grow within a thread, so ">" keeps the first of equal values.
        if (value > best_v || (value == best_v && best_i == kNone)) {
          best_v = value;
          best_i = static_cast<int32_t>(begin + j * kVec + e);
        }
      }
    }
    done = begin + vecs * kVec;
  }
  for (int64_t c = done + tid; c < end; c += threads) {
    const float value = E::load(x[c]);
    if (better(value, static_cast<int32_t>(c), best_v, best_i)) {
      best_v = value;
      best_i = static_cast<int32_t>(c);
    }
  }
  auto warp_reduce = [&] {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float v = __shfl_xor_sync(0xffffffffu, best_v, offset);
      const int32_t i = __shfl_xor_sync(0xffffffffu, best_i, offset);
      if (better(v, i, best_v, best_i)) {
        best_v = v;
        best_i = i;
      }
    }
  };
  warp_reduce();
  const int lane = tid & 31;
  const int warp = tid >> 5;
  if (lane == 0) {
    warp_value[warp] = best_v;
    warp_index[warp] = best_i;
  }
  __syncthreads();
  const int warps = (threads + 31) >> 5;
  best_v = lane < warps ? warp_value[lane] : -INFINITY;
  best_i = lane < warps ? warp_index[lane] : kNone;
  warp_reduce();
}

// The argmax kernels' arguments and what they do with a row's index: ArgmaxArgs alone, or
// ArgmaxFeedArgs (the _feed variants, one row), which also feed the index to the next
// decode step's inputs.
__device__ __forceinline__ const ops::ArgmaxArgs& argmax_args(const ops::ArgmaxArgs& a) { return a; }
__device__ __forceinline__ const ops::ArgmaxArgs& argmax_args(const ops::ArgmaxFeedArgs& a) { return a.argmax; }
__device__ __forceinline__ void store_index(const ops::ArgmaxArgs& a, int64_t r, int32_t index) { a.out[r] = index; }
__device__ __forceinline__ void store_index(const ops::ArgmaxFeedArgs& a, int64_t r, int32_t index) {
  a.argmax.out[r] = index;
  ops::feed_token_store(a.feed, index);
}

template <DType T, typename Args>
__global__ void argmax_kernel(const __grid_constant__ Args args) {
  using S = typename Elem<T>::storage;
  const ops::ArgmaxArgs& a = argmax_args(args);
  pdl_wait();
  const int64_t r = blockIdx.x;
  if (r >= a.rows) return;  // whole block, before any barrier
  float best_v;
  int32_t best_i;
  // The op checks cols <= INT32_MAX, so indices fit int32.
  block_argmax<T>(static_cast<const S*>(a.x) + r * a.x_stride, 0, a.cols, best_v, best_i);
  // A row without any number (all NaN) gives 0, as on the CPU.
  if (threadIdx.x == 0) store_index(args, r, best_i == kNone ? 0 : best_i);
}

// Grid {chunks, rows} in clusters of {chunks, 1, 1} (kCudaArgmaxClusterMax at most):
// block (c, r) takes chunk c of row r (ops::argmax_chunk_begin) and stores its candidate
// into slot c of the first block's shared memory (st.async, counted on that block's
// transaction barrier); once all have landed, its first thread merges them in chunk order
// (the lower index wins ties across chunks too).
template <DType T, typename Args>
__global__ void __launch_bounds__(1024) argmax_cluster_kernel(const __grid_constant__ Args args) {
  using S = typename Elem<T>::storage;
  const ops::ArgmaxArgs& a = argmax_args(args);
  namespace cg = cooperative_groups;
  __shared__ float chunk_value[kCudaArgmaxClusterMax];
  __shared__ int32_t chunk_index[kCudaArgmaxClusterMax];
  __shared__ uint64_t slots_full;  // the first block's: completes when the others' candidates land
  const cg::cluster_group cluster = cg::this_cluster();
  const int64_t r = blockIdx.y;
  const int chunk = static_cast<int>(blockIdx.x);
  const int chunks = static_cast<int>(gridDim.x);
  if (chunk == 0 && threadIdx.x == 0) {
    ptx::mbarrier_init_for_receive(ptx::smem_addr(&slots_full));
    ptx::mbarrier_expect_bytes(ptx::smem_addr(&slots_full), static_cast<uint32_t>((chunks - 1) * 8));
  }
  // Every block must have started (and the first block's barrier be initialised) before
  // another stores into its shared memory: arrive now, wait just before the stores.
  // Relaxed, as in flash_decode_cluster_kernel: the initialisation has its own fence.
  ptx::cluster_arrive_relaxed();
  pdl_wait();
  float best_v;
  int32_t best_i;
  block_argmax<T>(static_cast<const S*>(a.x) + r * a.x_stride, ops::argmax_chunk_begin(chunk, chunks, a.cols),
                  ops::argmax_chunk_begin(chunk + 1, chunks, a.cols), best_v, best_i);
  cluster.barrier_wait();
  if (chunk != 0) {
    // The candidate goes into slot `chunk` of the first block by asynchronous stores
    // counted on its barrier (see flash_decode_cluster_kernel): no block waits for another.
    if (threadIdx.x == 0) {
      const uint32_t remote_full = ptx::cluster_shared_addr(ptx::smem_addr(&slots_full), 0);
      ptx::st_async_b32(ptx::cluster_shared_addr(ptx::smem_addr(chunk_value + chunk), 0), __float_as_uint(best_v),
                        remote_full);
      ptx::st_async_b32(ptx::cluster_shared_addr(ptx::smem_addr(chunk_index + chunk), 0),
                        static_cast<uint32_t>(best_i), remote_full);
    }
    return;
  }
  if (threadIdx.x != 0) return;
  ptx::mbarrier_wait_phase0(ptx::smem_addr(&slots_full));
  for (int c = 1; c < chunks; ++c) {
    if (better(chunk_value[c], chunk_index[c], best_v, best_i)) {
      best_v = chunk_value[c];
      best_i = chunk_index[c];
    }
  }
  store_index(args, r, best_i == kNone ? 0 : best_i);  // all NaN: 0, as on the CPU
}

__global__ void feed_token_kernel(const __grid_constant__ ops::FeedTokenArgs a) {
  pdl_wait();
  if (threadIdx.x == 0 && blockIdx.x == 0) ops::feed_token_apply(a);
}

}  // namespace

void register_argmax_cuda_kernels(KernelRegistry& registry) {
  registry.add(make_cuda_kernel<ops::FeedTokenArgs>("feed_token", reinterpret_cast<const void*>(&feed_token_kernel), 32));
  for_each_float_type([&]<DType T>() {
    const std::string type = Elem<T>::name;
    registry.add(make_cuda_kernel<ops::ArgmaxArgs>("argmax_" + type,
                                                   reinterpret_cast<const void*>(&argmax_kernel<T, ops::ArgmaxArgs>)));
    registry.add(make_cuda_kernel<ops::ArgmaxFeedArgs>(
        "argmax_" + type + "_feed", reinterpret_cast<const void*>(&argmax_kernel<T, ops::ArgmaxFeedArgs>)));
    Kernel cluster = make_cuda_kernel<ops::ArgmaxArgs>(
        "argmax_cluster_" + type, reinterpret_cast<const void*>(&argmax_cluster_kernel<T, ops::ArgmaxArgs>));
    cluster.cluster_rows = true;
    registry.add(std::move(cluster));
    Kernel cluster_feed = make_cuda_kernel<ops::ArgmaxFeedArgs>(
        "argmax_cluster_" + type + "_feed",
        reinterpret_cast<const void*>(&argmax_cluster_kernel<T, ops::ArgmaxFeedArgs>));
    cluster_feed.cluster_rows = true;
    registry.add(std::move(cluster_feed));
  });
}

}  // namespace onepass::cuda
