// CPU kernels: rope_<T> (interleaved pairs) and rope_neox_<T>. One token per block.
#include "onepass/ops/rope.h"

#include <cmath>
#include <vector>

#include "../cpu_kernels.h"
#include "float_types.h"

namespace onepass::cpu {
namespace {

template <DType T, bool kNeox>
void rope_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  using E = Elem<T>;
  using S = typename E::storage;
  const auto& a = *static_cast<const ops::RopeArgs*>(raw);
  const int64_t half = a.rotary_dims / 2;
  std::vector<float> cosines(static_cast<size_t>(half));
  std::vector<float> sines(static_cast<size_t>(half));
  for (uint64_t block = first; block < end; ++block) {
    const auto token = static_cast<int64_t>(block);
    if (token >= a.tokens) break;
    // Angles in f32, in the order the CUDA kernel uses, so both backends round alike.
    const auto position = static_cast<float>(a.positions[token]);
    for (int64_t i = 0; i < half; ++i) {
      const float exponent = -static_cast<float>(2 * i) / static_cast<float>(a.rotary_dims);
      float inv_freq = std::pow(a.theta, exponent) * a.freq_scale;
      if (a.freq_factors != nullptr) inv_freq /= a.freq_factors[i];
      const float angle = position * inv_freq;
      cosines[static_cast<size_t>(i)] = std::cos(angle);
      sines[static_cast<size_t>(i)] = std::sin(angle);
    }
    for (int64_t h = 0; h < a.heads; ++h) {
      const int64_t row = token * a.heads + h;
      const S* x = static_cast<const S*>(a.x) + row * a.x_stride;
      S* o = static_cast<S*>(a.out) + row * a.out_stride;
      // Each pair is read completely before it is written: in place is safe.
      for (int64_t i = 0; i < half; ++i) {
        const int64_t i0 = kNeox ? i : 2 * i;
        const int64_t i1 = kNeox ? i + half : 2 * i + 1;
        const float x0 = E::load(x[i0]);
        const float x1 = E::load(x[i1]);
        const float c = cosines[static_cast<size_t>(i)];
        const float s = sines[static_cast<size_t>(i)];
        o[i0] = E::store(x0 * c - x1 * s);
        o[i1] = E::store(x0 * s + x1 * c);
      }
      for (int64_t d = a.rotary_dims; d < a.head_dim; ++d) o[d] = x[d];
    }
  }
}

}  // namespace

void register_rope_kernels(KernelRegistry& registry) {
  for_each_float_type([&]<DType T>() {
    const std::string t = Elem<T>::name;
    registry.add(make_cpu_kernel<ops::RopeArgs>("rope_" + t, rope_kernel<T, false>));
    registry.add(make_cpu_kernel<ops::RopeArgs>("rope_neox_" + t, rope_kernel<T, true>));
  });
}

}  // namespace onepass::cpu
