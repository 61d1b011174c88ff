// CPU kernels: moe_route (one block per token) and moe_combine (one block per token).
#include "onepass/ops/moe.h"

#include <cmath>
#include <limits>

#include "../cpu_kernels.h"
#include "float_types.h"

namespace onepass::cpu {
namespace {

// (value, index) a beats b: larger, or equal at a lower index; NaN loses to every number
// (and to an earlier NaN).
bool beats(float a, int64_t ia, float b, int64_t ib) {
  if (std::isnan(a)) return std::isnan(b) && ia < ib;
  if (std::isnan(b)) return true;
  return a > b || (a == b && ia < ib);
}

void moe_route_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  const auto& a = *static_cast<const ops::MoeRouteArgs*>(raw);
  bool taken[ops::kMoeMaxExperts];
  for (uint64_t block = first; block < end; ++block) {
    const auto t = static_cast<int64_t>(block);
    if (t >= a.tokens) break;
    const float* l = a.logits + t * a.logits_stride;
    int32_t* ids = a.ids + t * a.slots;
    float* w = a.weights + t * a.slots;
    for (int64_t e = 0; e < a.n_experts; ++e) taken[e] = false;
    for (int64_t s = 0; s < a.slots; ++s) {
      int64_t best = -1;
      for (int64_t e = 0; e < a.n_experts; ++e) {
        if (!taken[e] && (best < 0 || beats(l[e], e, l[best], best))) best = e;
      }
      taken[best] = true;
      ids[s] = static_cast<int32_t>(best);
    }
    // exp(l - max) over the selected experts (the first is the largest), or over all.
    const float max = l[ids[0]];
    float sum = 0.0f;
    if (a.weighting == ops::MoeWeighting::softmax_all) {
      for (int64_t e = 0; e < a.n_experts; ++e) sum += std::exp(l[e] - max);
    } else {
      for (int64_t s = 0; s < a.slots; ++s) sum += std::exp(l[ids[s]] - max);
    }
    for (int64_t s = 0; s < a.slots; ++s) w[s] = std::exp(l[ids[s]] - max) / sum;
  }
}

void moe_combine_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  const auto& a = *static_cast<const ops::MoeCombineArgs*>(raw);
  for (uint64_t block = first; block < end; ++block) {
    const auto t = static_cast<int64_t>(block);
    if (t >= a.tokens) break;
    const float* y = a.y + t * a.y_token_stride;
    const float* w = a.weights + t * a.slots;
    float* out = a.out + t * a.out_stride;
    for (int64_t i = 0; i < a.n; ++i) out[i] = w[0] * y[i];
    for (int64_t s = 1; s < a.slots; ++s) {
      const float ws = w[s];
      const float* ys = y + s * a.n;
      for (int64_t i = 0; i < a.n; ++i) out[i] += ws * ys[i];
    }
  }
}

}  // namespace

void register_moe_kernels(KernelRegistry& registry) {
  registry.add(make_cpu_kernel<ops::MoeRouteArgs>("moe_route", moe_route_kernel));
  registry.add(make_cpu_kernel<ops::MoeCombineArgs>("moe_combine", moe_combine_kernel));
}

}  // namespace onepass::cpu
