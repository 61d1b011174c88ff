// CPU kernels: rope_kv_write_<C> and rope_kv_write_neox_<C>. One token per block, the same
// f32 arithmetic as rms_norm_f32 (the optional per-head q/k norms), rope_<T> and
// kv_write_<S>_<C>, so the fused op equals the unfused sequence bit for bit.
#include <cmath>
#include <vector>

#include "onepass/ops/rope.h"
#include "../cpu_kernels.h"
#include "float_types.h"
#include "row_math.h"

namespace onepass::cpu {
namespace {

template <DType C, bool kNeox>
void rope_kv_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  using Out = Elem<C>;
  using S = typename Out::storage;
  const auto& a = *static_cast<const ops::RopeKvArgs*>(raw);
  const int64_t half = a.rotary_dims / 2;
  std::vector<float> cosines(static_cast<size_t>(half)), sines(static_cast<size_t>(half));
  std::vector<float> normed(a.q_norm != nullptr ? static_cast<size_t>(a.head_dim) : 0);
  // The head row as rms_norm leaves it (x * inv, then * w, in f32), or x itself.
  auto norm_row = [&](const float* x, const float* w) -> const float* {
    if (w == nullptr) return x;
    const float inv = rms_inverse([x](int64_t d) { return x[d]; }, a.head_dim, a.norm_eps);
    for (int64_t d = 0; d < a.head_dim; ++d) {
      float value = x[d] * inv;
      value *= w[d];
      normed[static_cast<size_t>(d)] = value;
    }
    return normed.data();
  };
  for (uint64_t block = first; block < end; ++block) {
    const auto token = static_cast<int64_t>(block);
    if (token >= a.tokens) break;
    const int32_t position = a.positions[token];
    for (int64_t i = 0; i < half; ++i) {
      if (a.cos_sin_in != nullptr) {  // RopeCosSin::load (one token)
        cosines[static_cast<size_t>(i)] = a.cos_sin_in[2 * i];
        sines[static_cast<size_t>(i)] = a.cos_sin_in[2 * i + 1];
        continue;
      }
      rope_cos_sin(i, position, a.rotary_dims, a.theta, a.freq_scale, a.freq_factors, cosines[static_cast<size_t>(i)],
                   sines[static_cast<size_t>(i)]);
      if (a.cos_sin_out != nullptr) {  // RopeCosSin::store (one token)
        a.cos_sin_out[2 * i] = cosines[static_cast<size_t>(i)];
        a.cos_sin_out[2 * i + 1] = sines[static_cast<size_t>(i)];
      }
    }
    auto rotate = [&](const float* x, auto&& put) {
      for (int64_t i = 0; i < half; ++i) {
        const int64_t i0 = kNeox ? i : 2 * i;
        const int64_t i1 = kNeox ? i + half : 2 * i + 1;
        const float x0 = x[i0], x1 = x[i1];
        const float c = cosines[static_cast<size_t>(i)], s = sines[static_cast<size_t>(i)];
        put(i0, x0 * c - x1 * s);
        put(i1, x0 * s + x1 * c);
      }
    };
    for (int64_t h = 0; h < a.n_head; ++h) {  // q in place: each pair read before written
      float* q = a.q + (token * a.n_head + h) * a.q_stride;
      const float* x = norm_row(q, a.q_norm);
      rotate(x, [&](int64_t d, float value) { q[d] = value; });
      if (x != q) {
        for (int64_t d = a.rotary_dims; d < a.head_dim; ++d) q[d] = x[d];
      }
    }
    const int32_t slot = a.slots != nullptr ? a.slots[token] : position;  // the cache row
    if (slot < 0 || slot >= a.ctx) continue;  // device data: never write outside
    for (int64_t h = 0; h < a.n_kv_head; ++h) {
      const float* k = norm_row(a.k + (token * a.n_kv_head + h) * a.k_stride, a.k_norm);
      const float* v = a.v + (token * a.n_kv_head + h) * a.v_stride;
      S* kc = static_cast<S*>(a.k_cache) + (h * a.ctx + slot) * a.cache_stride;
      S* vc = static_cast<S*>(a.v_cache) + (h * a.ctx + slot) * a.cache_stride;
      rotate(k, [&](int64_t d, float value) { kc[d] = Out::store(value); });
      for (int64_t d = a.rotary_dims; d < a.head_dim; ++d) kc[d] = Out::store(k[d]);
      for (int64_t d = 0; d < a.head_dim; ++d) vc[d] = Out::store(v[d]);
    }
  }
}

}  // namespace

void register_rope_kv_kernels(KernelRegistry& registry) {
  for_each_float_type([&]<DType C>() {
    const std::string c = Elem<C>::name;
    registry.add(make_cpu_kernel<ops::RopeKvArgs>("rope_kv_write_" + c, rope_kv_kernel<C, false>));
    registry.add(make_cpu_kernel<ops::RopeKvArgs>("rope_kv_write_neox_" + c, rope_kv_kernel<C, true>));
  });
}

}  // namespace onepass::cpu
