// CUDA kernels: rope_kv_write_<C> and rope_kv_write_neox_<C>. One block per (token, head
// row): q rows rotate in place, k rows rotate into the cache, v rows copy into it; with the
// per-head q/k norms, a q or k row is RMS-normalised first (a block reduction). Angles
// in f32 in the order of rope_<T> (powf, factor, position, sincosf; rope_math.cuh), so the
// fused and the unfused paths round alike. (mv_<W>_f32_fused folds this op into a
// one-token Q/K/V product for the normal layout.)
#include "common.cuh"
#include "onepass/ops/rope.h"
#include "registration.h"
#include "rope_math.cuh"

namespace onepass::cuda {
namespace {

template <DType C, bool kNeox>
__global__ void rope_kv_kernel(const __grid_constant__ ops::RopeKvArgs a) {
  using Out = Elem<C>;
  using S = typename Out::storage;
  pdl_wait();
  const int64_t token = blockIdx.x;
  const int64_t row = blockIdx.y;
  const int32_t position = a.positions[token];
  const int64_t half = a.rotary_dims / 2;
  const bool is_q = row < a.n_head;
  const bool is_k = !is_q && row < a.n_head + a.n_kv_head;
  const int32_t slot = a.slots != nullptr ? a.slots[token] : position;  // the cache row
  if (!is_q && (slot < 0 || slot >= a.ctx)) return;  // device data: never write outside
  if (is_q || is_k) {
    float* q = a.q + (token * a.n_head + row) * a.q_stride;
    const int64_t kh = row - a.n_head;
    const float* k = a.k + (token * a.n_kv_head + kh) * a.k_stride;
    S* kc = is_k ? static_cast<S*>(a.k_cache) + (kh * a.ctx + slot) * a.cache_stride : nullptr;
    const float* x = is_q ? q : k;
    // The per-head RMS norm (rms_norm_f32's arithmetic: x * inv, then * w): the block sums
    // the row's squares before any thread writes (q is rotated in place), and each thread
    // then reads only the values it writes.
    const float* w = is_q ? a.q_norm : a.k_norm;
    float inv = 1.0f;
    if (w != nullptr) {  // the same for the whole block
      __shared__ float scratch[32];
      float sum = 0.0f;
      for (int64_t d = threadIdx.x; d < a.head_dim; d += blockDim.x) sum += x[d] * x[d];
      sum = block_sum(sum, scratch);
      inv = rsqrtf(sum / static_cast<float>(a.head_dim) + a.norm_eps);
    }
    auto load = [&](int64_t d) {
      if (w == nullptr) return x[d];
      const float value = x[d] * inv;
      return value * w[d];
    };
    for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
      const int64_t i0 = kNeox ? i : 2 * i;
      const int64_t i1 = kNeox ? i + half : 2 * i + 1;
      float y0, y1;
      // RopeCosSin::load: the stored angles; ::store: the first q head's block stores them.
      const float2 cs = a.cos_sin_in != nullptr
                            ? make_float2(a.cos_sin_in[2 * i], a.cos_sin_in[2 * i + 1])
                            : rope_cos_sin(position, i, a.rotary_dims, a.theta, a.freq_scale, a.freq_factors);
      if (a.cos_sin_out != nullptr && row == 0) {
        a.cos_sin_out[2 * i] = cs.x;
        a.cos_sin_out[2 * i + 1] = cs.y;
      }
      rope_apply(load(i0), load(i1), cs, y0, y1);
      if (is_q) {
        q[i0] = y0;
        q[i1] = y1;
      } else {
        kc[i0] = Out::store(y0);
        kc[i1] = Out::store(y1);
      }
    }
    for (int64_t d = a.rotary_dims + threadIdx.x; d < a.head_dim; d += blockDim.x) {
      if (is_k) {
        kc[d] = Out::store(load(d));
      } else if (w != nullptr) {
        q[d] = load(d);
      }
    }
    return;
  }
  const int64_t vh = row - a.n_head - a.n_kv_head;
  const float* v = a.v + (token * a.n_kv_head + vh) * a.v_stride;
  S* vc = static_cast<S*>(a.v_cache) + (vh * a.ctx + slot) * a.cache_stride;
  for (int64_t d = threadIdx.x; d < a.head_dim; d += blockDim.x) vc[d] = Out::store(v[d]);
}

}  // namespace

void register_rope_kv_cuda_kernels(KernelRegistry& registry) {
  for_each_float_type([&]<DType C>() {
    const std::string c = Elem<C>::name;
    registry.add(make_cuda_kernel<ops::RopeKvArgs>("rope_kv_write_" + c, reinterpret_cast<const void*>(&rope_kv_kernel<C, false>), 256));
    registry.add(make_cuda_kernel<ops::RopeKvArgs>("rope_kv_write_neox_" + c,
                                                   reinterpret_cast<const void*>(&rope_kv_kernel<C, true>), 256));
  });
}

}  // namespace onepass::cuda
