// CPU kernels: gelu, silu, softcap, silu_mul, gelu_mul. Blocks of kCpuElementwiseBlock values.
#include "onepass/ops/activation.h"

#include <algorithm>
#include <cmath>

#include "../cpu_kernels.h"
#include "float_types.h"
#include "row_math.h"
#include "onepass/ops/elementwise.h"

namespace onepass::cpu {
namespace {

enum class Unary { gelu, silu, softcap };

template <DType T, Unary kOp>
void unary_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  using E = Elem<T>;
  using S = typename E::storage;
  const auto& a = *static_cast<const ops::ActivationArgs*>(raw);
  for_spans(a.rows, a.cols, first, end, [&](int64_t r, int64_t c0, int64_t c1) {
    const S* x = static_cast<const S*>(a.x) + r * a.x_stride;
    S* o = static_cast<S*>(a.out) + r * a.out_stride;
    for (int64_t c = c0; c < c1; ++c) {
      const float v = E::load(x[c]);
      float y;
      if constexpr (kOp == Unary::gelu) {
        y = gelu(v);
      } else if constexpr (kOp == Unary::silu) {
        y = silu(v);
      } else {
        y = std::tanh(v / a.cap) * a.cap;
      }
      o[c] = E::store(y);
    }
  });
}

// act(a) * b with act silu (SwiGLU) or gelu (GeGLU: Gemma).
template <DType T, Unary kGate>
void gated_mul_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  using E = Elem<T>;
  using S = typename E::storage;
  const auto& a = *static_cast<const ops::SiluMulArgs*>(raw);
  for_spans(a.rows, a.cols, first, end, [&](int64_t r, int64_t c0, int64_t c1) {
    const S* x = static_cast<const S*>(a.a) + r * a.a_stride;
    const S* y = static_cast<const S*>(a.b) + r * a.b_stride;
    S* o = static_cast<S*>(a.out) + r * a.out_stride;
    for (int64_t c = c0; c < c1; ++c) {
      const float v = E::load(x[c]);
      const float gate = kGate == Unary::gelu ? gelu(v) : silu(v);
      o[c] = E::store(gate * E::load(y[c]));
    }
  });
}

}  // namespace

void register_activation_kernels(KernelRegistry& registry) {
  for_each_float_type([&]<DType T>() {
    const std::string t = Elem<T>::name;
    registry.add(make_cpu_kernel<ops::ActivationArgs>("gelu_" + t, unary_kernel<T, Unary::gelu>));
    registry.add(make_cpu_kernel<ops::ActivationArgs>("silu_" + t, unary_kernel<T, Unary::silu>));
    registry.add(
        make_cpu_kernel<ops::ActivationArgs>("softcap_" + t, unary_kernel<T, Unary::softcap>));
    registry.add(make_cpu_kernel<ops::SiluMulArgs>("silu_mul_" + t, gated_mul_kernel<T, Unary::silu>));
    registry.add(make_cpu_kernel<ops::SiluMulArgs>("gelu_mul_" + t, gated_mul_kernel<T, Unary::gelu>));
  });
}

}  // namespace onepass::cpu
