// CUDA kernels: rope_<T> (interleaved pairs) and rope_neox_<T>. One block per token
// (row_dims(): a whole number of warps); the block first puts that token's cos/sin per
// pair in shared memory, then its threads rotate the (head, pair) values of the token.
#include <cstring>

#include "common.cuh"
#include "onepass/ops/rope.h"
#include "registration.h"

namespace onepass::cuda {
namespace {

// Pairs whose cos/sin fit the shared table (rotary_dims up to 512). Wider rotations
// compute the angle per value instead: the same arithmetic, only slower.
constexpr int kTablePairs = 256;

// Angle of pair i, in f32 and in the order ops/rope.h prescribes (the CPU kernel uses the
// same order), so both backends round alike up to the powf/sincosf ulp.
__device__ __forceinline__ float rope_angle(const ops::RopeArgs& a, int i, float position) {
  const float exponent = -static_cast<float>(2 * i) / static_cast<float>(a.rotary_dims);
  float inv_freq = powf(a.theta, exponent) * a.freq_scale;
  if (a.freq_factors != nullptr) inv_freq /= a.freq_factors[i];
  return position * inv_freq;
}

// Two adjacent values of T (one 8-byte or 4-byte access); the pointer is aligned to 2
// elements.
template <DType T>
__device__ __forceinline__ float2 load2(const typename Elem<T>::storage* p) {
  if constexpr (T == DType::f32) {
    return *reinterpret_cast<const float2*>(p);
  } else {
    using S = typename Elem<T>::storage;
    const uint32_t raw = *reinterpret_cast<const uint32_t*>(p);
    S h[2];
    std::memcpy(h, &raw, sizeof(raw));
    return make_float2(Elem<T>::load(h[0]), Elem<T>::load(h[1]));
  }
}

template <DType T>
__device__ __forceinline__ void store2(typename Elem<T>::storage* p, float v0, float v1) {
  if constexpr (T == DType::f32) {
    *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
  } else {
    using S = typename Elem<T>::storage;
    const S h[2] = {Elem<T>::store(v0), Elem<T>::store(v1)};
    uint32_t raw;
    std::memcpy(&raw, h, sizeof(raw));
    *reinterpret_cast<uint32_t*>(p) = raw;
  }
}

// Assumes heads * head_dim < 2^31 (the values of one token), so that the (head, pair)
// index math runs in 32 bits.
template <DType T, bool kNeox>
__global__ void rope_kernel(const __grid_constant__ ops::RopeArgs a) {
  using E = Elem<T>;
  using S = typename E::storage;
  __shared__ float table_cos[kTablePairs];
  __shared__ float table_sin[kTablePairs];
  pdl_wait();
  const int64_t token = blockIdx.x;
  if (token >= a.tokens) return;  // whole block, before the barrier
  const uint32_t tid = threadIdx.x;
  const uint32_t threads = blockDim.x;
  const uint32_t half = static_cast<uint32_t>(a.rotary_dims) / 2;
  const uint32_t heads = static_cast<uint32_t>(a.heads);
  const float position = static_cast<float>(a.positions[token]);
  const bool table = half <= kTablePairs;  // the same on every thread
  if (table) {
    for (uint32_t i = tid; i < half; i += threads) {
      sincosf(rope_angle(a, static_cast<int>(i), position), &table_sin[i], &table_cos[i]);
    }
  }
  __syncthreads();

  const S* x = static_cast<const S*>(a.x) + token * a.heads * a.x_stride;
  S* out = static_cast<S*>(a.out) + token * a.heads * a.out_stride;
  // Pairs (2i, 2i+1) are adjacent in the normal layout: one access per pair when both
  // tensors keep every row 2-element aligned.
  const bool paired = !kNeox && reinterpret_cast<uintptr_t>(x) % (2 * sizeof(S)) == 0 &&
                      reinterpret_cast<uintptr_t>(out) % (2 * sizeof(S)) == 0 &&
                      a.x_stride % 2 == 0 && a.out_stride % 2 == 0;
  const uint32_t pairs = heads * half;
  // Each pair is read completely by the thread that writes it: in place is safe.
  for (uint32_t idx = tid; idx < pairs; idx += threads) {
    const uint32_t h = idx / half;
    const uint32_t i = idx - h * half;
    float c;
    float s;
    if (table) {
      c = table_cos[i];
      s = table_sin[i];
    } else {
      sincosf(rope_angle(a, static_cast<int>(i), position), &s, &c);
    }
    const S* xr = x + h * a.x_stride;
    S* orow = out + h * a.out_stride;
    const uint32_t i0 = kNeox ? i : 2 * i;
    const uint32_t i1 = kNeox ? i + half : 2 * i + 1;
    float x0;
    float x1;
    if (paired) {
      const float2 v = load2<T>(xr + i0);
      x0 = v.x;
      x1 = v.y;
    } else {
      x0 = E::load(xr[i0]);
      x1 = E::load(xr[i1]);
    }
    const float y0 = x0 * c - x1 * s;
    const float y1 = x0 * s + x1 * c;
    if (paired) {
      store2<T>(orow + i0, y0, y1);
    } else {
      orow[i0] = E::store(y0);
      orow[i1] = E::store(y1);
    }
  }

  // Dimensions past rotary_dims pass through (nothing to do in place).
  const uint32_t rest = static_cast<uint32_t>(a.head_dim) - 2 * half;
  const bool in_place = a.x == a.out && a.x_stride == a.out_stride;
  if (rest > 0 && !in_place) {
    const uint32_t count = heads * rest;
    for (uint32_t idx = tid; idx < count; idx += threads) {
      const uint32_t h = idx / rest;
      const uint32_t d = 2 * half + (idx - h * rest);
      out[h * a.out_stride + d] = x[h * a.x_stride + d];
    }
  }
}

}  // namespace

void register_rope_cuda_kernels(KernelRegistry& registry) {
  for_each_float_type([&]<DType T>() {
    const std::string t = Elem<T>::name;
    registry.add(make_cuda_kernel<ops::RopeArgs>(
        "rope_" + t, reinterpret_cast<const void*>(&rope_kernel<T, false>)));
    registry.add(make_cuda_kernel<ops::RopeArgs>(
        "rope_neox_" + t, reinterpret_cast<const void*>(&rope_kernel<T, true>)));
  });
}

}  // namespace onepass::cuda
