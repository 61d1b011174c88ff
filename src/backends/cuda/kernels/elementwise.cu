// CUDA kernels: add, mul, scale (grid-stride over rows x cols).
#include "common.cuh"
#include "onepass/ops/elementwise.h"
#include "registration.h"

namespace onepass::cuda {
namespace {

template <DType T, bool kMul>
__global__ void binary_kernel(const __grid_constant__ ops::BinaryArgs a) {
  using E = Elem<T>;
  using S = typename E::storage;
  pdl_wait();
  const int64_t total = a.rows * a.cols;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t r = i / a.cols;
    const int64_t c = i - r * a.cols;
    const float x = E::load(static_cast<const S*>(a.a)[r * a.a_stride + c]);
    const float y = E::load(static_cast<const S*>(a.b)[r * a.b_row_step * a.b_stride + c]);
    static_cast<S*>(a.out)[r * a.out_stride + c] = E::store(kMul ? x * y : x + y);
  }
}

template <DType T>
__global__ void scale_kernel(const __grid_constant__ ops::ScaleArgs a) {
  using E = Elem<T>;
  using S = typename E::storage;
  pdl_wait();
  const int64_t total = a.rows * a.cols;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t r = i / a.cols;
    const int64_t c = i - r * a.cols;
    static_cast<S*>(a.out)[r * a.out_stride + c] =
        E::store(E::load(static_cast<const S*>(a.x)[r * a.x_stride + c]) * a.factor);
  }
}

}  // namespace

void register_elementwise_cuda_kernels(KernelRegistry& registry) {
  for_each_float_type([&]<DType T>() {
    const std::string t = Elem<T>::name;
    registry.add(make_cuda_kernel<ops::BinaryArgs>("add_" + t, reinterpret_cast<const void*>(&binary_kernel<T, false>)));
    registry.add(make_cuda_kernel<ops::BinaryArgs>("mul_" + t, reinterpret_cast<const void*>(&binary_kernel<T, true>)));
    registry.add(make_cuda_kernel<ops::ScaleArgs>("scale_" + t, reinterpret_cast<const void*>(&scale_kernel<T>)));
  });
}

}  // namespace onepass::cuda
