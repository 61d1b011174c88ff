// CUDA kernels: rms_norm, rms_norm_noweight, rms_norm_mul. One block per row.
#include "common.cuh"
#include "onepass/ops/norm.h"
#include "registration.h"

namespace onepass::cuda {
namespace {

template <DType T, bool kWeight, bool kScale>
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
  for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) {
    float v = E::load(x[c]) * inv;
    if constexpr (kWeight) v *= a.weight[c];
    if constexpr (kScale) v *= E::load(s[c]);
    out[c] = E::store(v);
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
  });
}

}  // namespace onepass::cuda
