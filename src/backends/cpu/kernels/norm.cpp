// CPU kernels: rms_norm, rms_norm_noweight, rms_norm_mul, rms_norm_add, add_rms_norm. One
// block per row.
#include "onepass/ops/norm.h"

#include <cmath>

#include "../cpu_kernels.h"
#include "float_types.h"
#include "row_math.h"

namespace onepass::cpu {
namespace {

// rms_norm_add: the normalised value stored in T, then residual + it as add_<T> adds, so
// the fused kernel matches rms_norm -> add bit for bit.
template <DType T, bool kWeight, bool kScale, bool kResidual = false>
void rms_norm_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  using E = Elem<T>;
  using S = typename E::storage;
  const auto& a = *static_cast<const ops::RmsNormArgs*>(raw);
  for (uint64_t row = first; row < end; ++row) {
    const auto r = static_cast<int64_t>(row);
    const S* x = static_cast<const S*>(a.x) + r * a.x_stride;
    S* o = static_cast<S*>(a.out) + r * a.out_stride;
    const float inv = rms_inverse([x](int64_t c) { return E::load(x[c]); }, a.cols, a.eps);
    const S* s = nullptr;
    if constexpr (kScale) s = static_cast<const S*>(a.scale) + r * a.scale_row_step * a.scale_stride;
    const S* res = nullptr;
    if constexpr (kResidual) res = static_cast<const S*>(a.residual) + r * a.residual_stride;
    for (int64_t c = 0; c < a.cols; ++c) {
      float v = E::load(x[c]) * inv;
      if constexpr (kWeight) v *= a.weight[c];
      if constexpr (kScale) v *= E::load(s[c]);
      if constexpr (kResidual) v = E::load(res[c]) + E::load(E::store(v));
      o[c] = E::store(v);
    }
  }
}

// sum = a + b exactly as add_<T> computes it, then the rms_norm_<T> arithmetic on the
// stored sum: the fused kernel matches the unfused pair bit for bit.
template <DType T>
void add_rms_norm_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  using E = Elem<T>;
  using S = typename E::storage;
  const auto& a = *static_cast<const ops::AddRmsNormArgs*>(raw);
  for (uint64_t row = first; row < end; ++row) {
    const auto r = static_cast<int64_t>(row);
    if (r >= a.rows) break;
    const S* x = static_cast<const S*>(a.a) + r * a.a_stride;
    const S* y = static_cast<const S*>(a.b) + r * a.b_stride;
    S* s = static_cast<S*>(a.sum) + r * a.sum_stride;
    S* o = static_cast<S*>(a.out) + r * a.out_stride;
    for (int64_t c = 0; c < a.cols; ++c) {
      // Read both inputs before writing: sum may be a or b (in place).
      s[c] = E::store(E::load(x[c]) + E::load(y[c]));
    }
    const float inv = rms_inverse([s](int64_t c) { return E::load(s[c]); }, a.cols, a.eps);
    for (int64_t c = 0; c < a.cols; ++c) {
      float v = E::load(s[c]) * inv;
      v *= a.weight[c];
      o[c] = E::store(v);
    }
  }
}

}  // namespace

void register_norm_kernels(KernelRegistry& registry) {
  for_each_float_type([&]<DType T>() {
    const std::string t = Elem<T>::name;
    registry.add(make_cpu_kernel<ops::RmsNormArgs>("rms_norm_" + t, rms_norm_kernel<T, true, false>));
    registry.add(
        make_cpu_kernel<ops::RmsNormArgs>("rms_norm_noweight_" + t, rms_norm_kernel<T, false, false>));
    registry.add(make_cpu_kernel<ops::RmsNormArgs>("rms_norm_mul_" + t, rms_norm_kernel<T, true, true>));
    registry.add(make_cpu_kernel<ops::RmsNormArgs>("rms_norm_add_" + t, rms_norm_kernel<T, true, false, true>));
    registry.add(make_cpu_kernel<ops::AddRmsNormArgs>("add_rms_norm_" + t, add_rms_norm_kernel<T>));
  });
}

}  // namespace onepass::cpu
