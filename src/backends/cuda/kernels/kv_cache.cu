// CUDA kernels: kv_write_<S>_<C>. One block per source row (token, head), head fastest
// (row_dims(): a whole number of warps); threads over head_dim, four values per access
// when both rows are aligned.
#include <cstring>

#include "common.cuh"
#include "onepass/ops/kv_cache.h"
#include "registration.h"

namespace onepass::cuda {
namespace {

// Four consecutive storage values as one access (16 bytes for f32, 8 for f16/bf16).
template <typename S>
struct alignas(4 * sizeof(S)) Quad {
  S v[4];
};

template <DType Src, DType Cache>
__global__ void kv_write_kernel(const __grid_constant__ ops::KvWriteArgs a) {
  using In = Elem<Src>;
  using Out = Elem<Cache>;
  using SI = typename In::storage;
  using SO = typename Out::storage;
  pdl_wait();
  const int64_t row = blockIdx.x;
  if (row >= a.tokens * a.n_kv_head) return;
  const int64_t token = row / a.n_kv_head;
  const int64_t head = row - token * a.n_kv_head;
  const int64_t position = a.positions[token];
  // Positions are device data the host never saw: skip, never write outside the cache.
  if (position < 0 || position >= a.ctx) return;
  const SI* src = static_cast<const SI*>(a.src) + row * a.src_stride;
  SO* dst = static_cast<SO*>(a.cache) + (head * a.ctx + position) * a.cache_stride;
  const int64_t tid = threadIdx.x;
  const int64_t threads = blockDim.x;

  int64_t done = 0;
  if (reinterpret_cast<uintptr_t>(src) % sizeof(Quad<SI>) == 0 &&
      reinterpret_cast<uintptr_t>(dst) % sizeof(Quad<SO>) == 0) {
    const int64_t quads = a.head_dim / 4;
    for (int64_t q = tid; q < quads; q += threads) {
      const Quad<SI> in = reinterpret_cast<const Quad<SI>*>(src)[q];
      Quad<SO> o;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if constexpr (Src == Cache) {
          o.v[k] = in.v[k];  // same type: a bit copy
        } else {
          o.v[k] = Out::store(In::load(in.v[k]));
        }
      }
      reinterpret_cast<Quad<SO>*>(dst)[q] = o;
    }
    done = quads * 4;
  }
  for (int64_t c = done + tid; c < a.head_dim; c += threads) {
    if constexpr (Src == Cache) {
      dst[c] = src[c];
    } else {
      dst[c] = Out::store(In::load(src[c]));
    }
  }
}

}  // namespace

void register_kv_cache_cuda_kernels(KernelRegistry& registry) {
  for_each_float_type([&]<DType S>() {
    for_each_float_type([&]<DType C>() {
      registry.add(make_cuda_kernel<ops::KvWriteArgs>(
          std::string("kv_write_") + Elem<S>::name + "_" + Elem<C>::name,
          reinterpret_cast<const void*>(&kv_write_kernel<S, C>)));
    });
  });
}

}  // namespace onepass::cuda
