// CUDA kernels: gelu, silu, softcap, silu_mul, gelu_mul. Grid-stride over rows x cols (256 threads,
// about 4 values per thread, ops/activation.h); contiguous aligned tensors move 4 values
// per access (16 bytes for f32, 8 for f16/bf16), strided rows go one value at a time.
#include <cstring>

#include "common.cuh"
#include "onepass/ops/activation.h"
#include "registration.h"

namespace onepass::cuda {
namespace {

enum class Unary { gelu, silu, softcap };

// Same formulas and operation order as the CPU kernels (accurate tanhf / expf, no fast
// math), so both backends round alike up to the libm ulp differences.
__device__ __forceinline__ float gelu(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kCubic = 0.044715f;
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

// expf(-x) overflows to inf for x < -88, giving x / inf = -0: the right limit.
__device__ __forceinline__ float silu(float x) {
  return x / (1.0f + expf(-x));
}

template <Unary kOp>
__device__ __forceinline__ float apply(float x, float cap) {
  if constexpr (kOp == Unary::gelu) {
    return gelu(x);
  } else if constexpr (kOp == Unary::silu) {
    return silu(x);
  } else {
    return tanhf(x / cap) * cap;
  }
}

// Four consecutive values of T: one 16-byte (f32) or 8-byte (f16, bf16) access. The
// pointer must be aligned to 4 elements.
template <DType T>
__device__ __forceinline__ void load4(const void* p, float (&v)[4]) {
  if constexpr (T == DType::f32) {
    const float4 r = *static_cast<const float4*>(p);
    v[0] = r.x;
    v[1] = r.y;
    v[2] = r.z;
    v[3] = r.w;
  } else {
    using S = typename Elem<T>::storage;
    const uint2 r = *static_cast<const uint2*>(p);
    S h[4];
    std::memcpy(h, &r, sizeof(r));
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = Elem<T>::load(h[i]);
  }
}

template <DType T>
__device__ __forceinline__ void store4(void* p, const float (&v)[4]) {
  if constexpr (T == DType::f32) {
    *static_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    using S = typename Elem<T>::storage;
    S h[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = Elem<T>::store(v[i]);
    uint2 r;
    std::memcpy(&r, h, sizeof(r));
    *static_cast<uint2*>(p) = r;
  }
}

template <DType T>
__device__ __forceinline__ bool aligned4(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) % (4 * sizeof(typename Elem<T>::storage))) == 0;
}

template <DType T, Unary kOp>
__global__ void unary_kernel(const __grid_constant__ ops::ActivationArgs a) {
  using E = Elem<T>;
  using S = typename E::storage;
  pdl_wait();
  const S* x = static_cast<const S*>(a.x);
  S* out = static_cast<S*>(a.out);
  const int64_t tid = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  const int64_t total = a.rows * a.cols;
  // One row, or rows packed back to back: a flat array of rows * cols values.
  const bool flat = a.rows == 1 || (a.x_stride == a.cols && a.out_stride == a.cols);
  if (flat && aligned4<T>(x) && aligned4<T>(out)) {
    const int64_t quads = total / 4;
    for (int64_t i = tid; i < quads; i += step) {
      float v[4];
      load4<T>(x + 4 * i, v);
#pragma unroll
      for (int k = 0; k < 4; ++k) v[k] = apply<kOp>(v[k], a.cap);
      store4<T>(out + 4 * i, v);
    }
    for (int64_t i = 4 * quads + tid; i < total; i += step)
      out[i] = E::store(apply<kOp>(E::load(x[i]), a.cap));
    return;
  }
  for (int64_t i = tid; i < total; i += step) {
    const int64_t r = i / a.cols;
    const int64_t c = i - r * a.cols;
    out[r * a.out_stride + c] = E::store(apply<kOp>(E::load(x[r * a.x_stride + c]), a.cap));
  }
}

// act(a) * b with act silu (SwiGLU) or gelu (GeGLU: Gemma).
template <DType T, Unary kGate>
__global__ void gated_mul_kernel(const __grid_constant__ ops::SiluMulArgs a) {
  using E = Elem<T>;
  using S = typename E::storage;
  pdl_wait();
  const S* x = static_cast<const S*>(a.a);
  const S* y = static_cast<const S*>(a.b);
  S* out = static_cast<S*>(a.out);
  const int64_t tid = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  const int64_t total = a.rows * a.cols;
  const bool flat =
      a.rows == 1 || (a.a_stride == a.cols && a.b_stride == a.cols && a.out_stride == a.cols);
  if (flat && aligned4<T>(x) && aligned4<T>(y) && aligned4<T>(out)) {
    const int64_t quads = total / 4;
    for (int64_t i = tid; i < quads; i += step) {
      float u[4];
      float v[4];
      load4<T>(x + 4 * i, u);
      load4<T>(y + 4 * i, v);
#pragma unroll
      for (int k = 0; k < 4; ++k) u[k] = apply<kGate>(u[k], 0.0f) * v[k];
      store4<T>(out + 4 * i, u);
    }
    for (int64_t i = 4 * quads + tid; i < total; i += step) {
      out[i] = E::store(apply<kGate>(E::load(x[i]), 0.0f) * E::load(y[i]));
    }
    return;
  }
  for (int64_t i = tid; i < total; i += step) {
    const int64_t r = i / a.cols;
    const int64_t c = i - r * a.cols;
    out[r * a.out_stride + c] =
        E::store(apply<kGate>(E::load(x[r * a.a_stride + c]), 0.0f) * E::load(y[r * a.b_stride + c]));
  }
}

}  // namespace

void register_activation_cuda_kernels(KernelRegistry& registry) {
  for_each_float_type([&]<DType T>() {
    const std::string t = Elem<T>::name;
    registry.add(make_cuda_kernel<ops::ActivationArgs>(
        "gelu_" + t, reinterpret_cast<const void*>(&unary_kernel<T, Unary::gelu>)));
    registry.add(make_cuda_kernel<ops::ActivationArgs>(
        "silu_" + t, reinterpret_cast<const void*>(&unary_kernel<T, Unary::silu>)));
    registry.add(make_cuda_kernel<ops::ActivationArgs>(
        "softcap_" + t, reinterpret_cast<const void*>(&unary_kernel<T, Unary::softcap>)));
    registry.add(make_cuda_kernel<ops::SiluMulArgs>(
        "silu_mul_" + t, reinterpret_cast<const void*>(&gated_mul_kernel<T, Unary::silu>)));
    registry.add(make_cuda_kernel<ops::SiluMulArgs>(
        "gelu_mul_" + t, reinterpret_cast<const void*>(&gated_mul_kernel<T, Unary::gelu>)));
  });
}

}  // namespace onepass::cuda
