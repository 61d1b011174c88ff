// CUDA kernels: rms_norm, rms_norm_noweight, rms_norm_mul, rms_norm_add, add_rms_norm. One
// block per row.
#include "common.cuh"
#include "onepass/ops/norm.h"
#include "registration.h"

namespace onepass::cuda {
namespace {

// rms_norm_add: the normalised value stored in T, then residual + it as add_<T> adds (the
// post-norm and the residual add in one dispatch).
template <DType T, bool kWeight, bool kScale, bool kResidual = false>
__global__ void rms_norm_kernel(const __grid_constant__ ops::RmsNormArgs a) {
  using E = Elem<T>;
  using S = typename E::storage;
  __shared__ float scratch[32];
  pdl_wait();
  const int64_t r = blockIdx.x;
  const S* x = static_cast<const S*>(a.x) + r * a.x_stride;
  S* out = static_cast<S*>(a.out) + r * a.out_stride;
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) {
    const float v = E::load(x[c]);
    sum += v * v;
  }
  sum = block_sum(sum, scratch);
  const float inv = rsqrtf(sum / static_cast<float>(a.cols) + a.eps);
  const S* s = nullptr;
  if constexpr (kScale) s = static_cast<const S*>(a.scale) + r * a.scale_row_step * a.scale_stride;
  const S* res = nullptr;
  if constexpr (kResidual) res = static_cast<const S*>(a.residual) + r * a.residual_stride;
  for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) {
    float v = E::load(x[c]) * inv;
    if constexpr (kWeight) v *= a.weight[c];
    if constexpr (kScale) v *= E::load(s[c]);
    if constexpr (kResidual) v = __fadd_rn(E::load(res[c]), E::load(E::store(v)));
    out[c] = E::store(v);
  }
}

// Values of the row each thread keeps in registers in add_rms_norm: rows up to
// kAddNormCached * blockDim.x columns (8192 with row_dims()) never re-read sum.
constexpr int kAddNormCached = 8;

// sum = a + b stored in T, then the rms_norm_<T> arithmetic above on the stored sum, in
// the same per-thread order and with the same block reduction, so that for the same
// blockDim the fused kernel computes what the unfused add -> rms_norm pair computes.
template <DType T>
__global__ void add_rms_norm_kernel(const __grid_constant__ ops::AddRmsNormArgs a) {
  using E = Elem<T>;
  using S = typename E::storage;
  __shared__ float scratch[32];
  pdl_wait();
  const int64_t r = blockIdx.x;
  if (r >= a.rows) return;  // whole block, before any barrier
  const S* x = static_cast<const S*>(a.a) + r * a.a_stride;
  const S* y = static_cast<const S*>(a.b) + r * a.b_stride;
  S* s = static_cast<S*>(a.sum) + r * a.sum_stride;
  S* out = static_cast<S*>(a.out) + r * a.out_stride;
  const int64_t tid = threadIdx.x;
  const int64_t threads = blockDim.x;
  const bool cached = a.cols <= kAddNormCached * threads;  // the same on every thread
  // Each thread reads a[c] and b[c] before it writes sum[c], and only it touches column
  // c until the barrier, so sum may be a or b (in place).
  float v[kAddNormCached];
  float sum = 0.0f;
  if (cached) {
#pragma unroll
    for (int i = 0; i < kAddNormCached; ++i) {
      const int64_t c = tid + i * threads;
      v[i] = 0.0f;
      if (c < a.cols) {
        const S stored = E::store(E::load(x[c]) + E::load(y[c]));
        s[c] = stored;
        v[i] = E::load(stored);
        sum += v[i] * v[i];
      }
    }
  } else {
    for (int64_t c = tid; c < a.cols; c += threads) {
      const S stored = E::store(E::load(x[c]) + E::load(y[c]));
      s[c] = stored;
      const float value = E::load(stored);
      sum += value * value;
    }
  }
  sum = block_sum(sum, scratch);
  const float inv = rsqrtf(sum / static_cast<float>(a.cols) + a.eps);
  if (cached) {
#pragma unroll
    for (int i = 0; i < kAddNormCached; ++i) {
      const int64_t c = tid + i * threads;
      if (c < a.cols) {
        float value = v[i] * inv;
        value *= a.weight[c];
        out[c] = E::store(value);
      }
    }
  } else {
    // The thread re-reads only the sum values it wrote itself.
    for (int64_t c = tid; c < a.cols; c += threads) {
      float value = E::load(s[c]) * inv;
      value *= a.weight[c];
      out[c] = E::store(value);
    }
  }
}

}  // namespace

void register_norm_cuda_kernels(KernelRegistry& registry) {
  for_each_float_type([&]<DType T>() {
    const std::string t = Elem<T>::name;
    registry.add(make_cuda_kernel<ops::RmsNormArgs>(
        "rms_norm_" + t, reinterpret_cast<const void*>(&rms_norm_kernel<T, true, false>)));
    registry.add(make_cuda_kernel<ops::RmsNormArgs>(
        "rms_norm_noweight_" + t, reinterpret_cast<const void*>(&rms_norm_kernel<T, false, false>)));
    registry.add(make_cuda_kernel<ops::RmsNormArgs>(
        "rms_norm_mul_" + t, reinterpret_cast<const void*>(&rms_norm_kernel<T, true, true>)));
    registry.add(make_cuda_kernel<ops::RmsNormArgs>(
        "rms_norm_add_" + t, reinterpret_cast<const void*>(&rms_norm_kernel<T, true, false, true>)));
    registry.add(make_cuda_kernel<ops::AddRmsNormArgs>(
        "add_rms_norm_" + t, reinterpret_cast<const void*>(&add_rms_norm_kernel<T>)));
  });
}

}  // namespace onepass::cuda
