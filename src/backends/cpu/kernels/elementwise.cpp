// CPU kernels: add, mul, scale.
#include "onepass/ops/elementwise.h"

#include <algorithm>

#include "../cpu_kernels.h"
#include "float_types.h"

namespace onepass::cpu {
namespace {

template <DType T, bool kMul>
void binary_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  using E = Elem<T>;
  using S = typename E::storage;
  const auto& a = *static_cast<const ops::BinaryArgs*>(raw);
  for_spans(a.rows, a.cols, first, end, [&](int64_t r, int64_t c0, int64_t c1) {
    const S* x = static_cast<const S*>(a.a) + r * a.a_stride;
    const S* y = static_cast<const S*>(a.b) + r * a.b_row_step * a.b_stride;
    S* o = static_cast<S*>(a.out) + r * a.out_stride;
    for (int64_t c = c0; c < c1; ++c) {
      const float v = kMul ? E::load(x[c]) * E::load(y[c]) : E::load(x[c]) + E::load(y[c]);
      o[c] = E::store(v);
    }
  });
}

template <DType T>
void scale_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  using E = Elem<T>;
  using S = typename E::storage;
  const auto& a = *static_cast<const ops::ScaleArgs*>(raw);
  for_spans(a.rows, a.cols, first, end, [&](int64_t r, int64_t c0, int64_t c1) {
    const S* x = static_cast<const S*>(a.x) + r * a.x_stride;
    S* o = static_cast<S*>(a.out) + r * a.out_stride;
    for (int64_t c = c0; c < c1; ++c) o[c] = E::store(E::load(x[c]) * a.factor);
  });
}

}  // namespace

void register_elementwise_kernels(KernelRegistry& registry) {
  for_each_float_type([&]<DType T>() {
    const std::string t = Elem<T>::name;
    registry.add(make_cpu_kernel<ops::BinaryArgs>("add_" + t, binary_kernel<T, false>));
    registry.add(make_cpu_kernel<ops::BinaryArgs>("mul_" + t, binary_kernel<T, true>));
    registry.add(make_cpu_kernel<ops::ScaleArgs>("scale_" + t, scale_kernel<T>));
  });
}

}  // namespace onepass::cpu
