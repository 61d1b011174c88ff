// CUDA kernel: softmax_<T>. One block per row (row_dims(): a whole number of warps, at
// most 1024 threads); f32 max, exp and sum with block reductions.
#include "common.cuh"
#include "onepass/ops/softmax.h"
#include "registration.h"

namespace onepass::cuda {
namespace {

// Values each thread keeps in registers: rows up to kCached * blockDim.x columns (8192
// with row_dims()) read x once; longer rows read it three times.
constexpr int kCached = 8;

template <DType T>
__global__ void softmax_kernel(const __grid_constant__ ops::SoftmaxArgs a) {
  using E = Elem<T>;
  using S = typename E::storage;
  __shared__ float scratch[32];
  pdl_wait();
  const int64_t r = blockIdx.x;
  if (r >= a.rows) return;  // whole block, before any barrier
  const S* x = static_cast<const S*>(a.x) + r * a.x_stride;
  S* o = static_cast<S*>(a.out) + r * a.out_stride;
  const int64_t tid = threadIdx.x;
  const int64_t threads = blockDim.x;
  // Columns [0, limit) take part; the causal mask hides everything after the query's own
  // position (same rule as the CPU kernel).
  int64_t limit = a.cols;
  if (a.causal != 0) {
    limit = r % a.queries + a.position_offset + 1;
    limit = limit < 0 ? 0 : (limit > a.cols ? a.cols : limit);
  }
  const bool cached = limit <= kCached * threads;  // the same on every thread

  float v[kCached];
  float max = -INFINITY;
  if (cached) {
#pragma unroll
    for (int i = 0; i < kCached; ++i) {
      const int64_t c = tid + i * threads;
      v[i] = c < limit ? E::load(x[c]) * a.scale : -INFINITY;
      max = fmaxf(max, v[i]);
    }
  } else {
    for (int64_t c = tid; c < limit; c += threads) max = fmaxf(max, E::load(x[c]) * a.scale);
  }
  max = block_max(max, scratch);

  // All masked (or every input -inf): no weights at all, so zeros. Uniform over the block.
  if (limit == 0 || max == -INFINITY) {
    for (int64_t c = tid; c < a.cols; c += threads) o[c] = E::store(0.0f);
    return;
  }

  float sum = 0.0f;
  if (cached) {
#pragma unroll
    for (int i = 0; i < kCached; ++i) {
      const int64_t c = tid + i * threads;
      v[i] = c < limit ? expf(v[i] - max) : 0.0f;
      sum += v[i];
    }
  } else {
    for (int64_t c = tid; c < limit; c += threads) sum += expf(E::load(x[c]) * a.scale - max);
  }
  // block_sum's barriers also order every read of x above before the writes below, so
  // out may be x itself.
  sum = block_sum(sum, scratch);
  const float inv = 1.0f / sum;

  if (cached) {
#pragma unroll
    for (int i = 0; i < kCached; ++i) {
      const int64_t c = tid + i * threads;
      if (c < limit) o[c] = E::store(v[i] * inv);
    }
  } else {
    for (int64_t c = tid; c < limit; c += threads)
      o[c] = E::store(expf(E::load(x[c]) * a.scale - max) * inv);
  }
  for (int64_t c = limit + tid; c < a.cols; c += threads) o[c] = E::store(0.0f);
}

}  // namespace

void register_softmax_cuda_kernels(KernelRegistry& registry) {
  for_each_float_type([&]<DType T>() {
    registry.add(
        make_cuda_kernel<ops::SoftmaxArgs>(std::string("softmax_") + Elem<T>::name,
                                           reinterpret_cast<const void*>(&softmax_kernel<T>)));
  });
}

}  // namespace onepass::cuda
