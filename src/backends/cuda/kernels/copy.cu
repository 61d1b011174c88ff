// CUDA kernels: copy_bytes, and copy_<S>_<D> between f32, f16 and bf16.
#include "common.cuh"
#include "onepass/ops/copy.h"
#include "registration.h"

namespace onepass::cuda {
namespace {

template <DType Src, DType Dst>
__global__ void copy_kernel(const __grid_constant__ ops::CopyArgs a) {
  using In = Elem<Src>;
  using Out = Elem<Dst>;
  pdl_wait();
  const int64_t total = a.rows * a.cols;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t r = i / a.cols;
    const int64_t c = i - r * a.cols;
    const auto v = static_cast<const typename In::storage*>(a.src)[r * a.src_stride + c];
    static_cast<typename Out::storage*>(a.dst)[r * a.dst_stride + c] = Out::store(In::load(v));
  }
}

__global__ void copy_bytes_kernel(const __grid_constant__ ops::CopyBytesArgs a) {
  pdl_wait();
  const uint64_t tid = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const uint64_t step = uint64_t{gridDim.x} * blockDim.x;
  const auto* src = static_cast<const unsigned char*>(a.src);
  auto* dst = static_cast<unsigned char*>(a.dst);
  uint64_t done = 0;
  // 16-byte words when both ends are 16-byte aligned, bytes for the rest.
  if (((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) & 15u) == 0) {
    const uint64_t words = a.bytes / 16;
    for (uint64_t i = tid; i < words; i += step) reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    done = words * 16;
  }
  for (uint64_t i = done + tid; i < a.bytes; i += step) dst[i] = src[i];
}

}  // namespace

void register_copy_cuda_kernels(KernelRegistry& registry) {
  registry.add(make_cuda_kernel<ops::CopyBytesArgs>("copy_bytes", reinterpret_cast<const void*>(&copy_bytes_kernel)));
  for_each_float_type([&]<DType S>() {
    for_each_float_type([&]<DType D>() {
      registry.add(make_cuda_kernel<ops::CopyArgs>(std::string("copy_") + Elem<S>::name + "_" + Elem<D>::name,
                                                   reinterpret_cast<const void*>(&copy_kernel<S, D>)));
    });
  });
}

}  // namespace onepass::cuda
