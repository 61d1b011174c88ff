// CPU kernel: softmax_<T>. One row per block.
#include "onepass/ops/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../cpu_kernels.h"
#include "float_types.h"

namespace onepass::cpu {
namespace {

// Reductions in kLanes independent partial results: the loops vectorise without
// reassociating, and the order (so the result) is fixed by the row length alone.
constexpr int64_t kLanes = 8;

float max_of(const float* v, int64_t n) {
  float part[kLanes];
  std::fill(part, part + kLanes, -std::numeric_limits<float>::infinity());
  const int64_t body = n - n % kLanes;
  for (int64_t i = 0; i < body; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) part[j] = std::max(part[j], v[i + j]);
  }
  for (int64_t i = body; i < n; ++i) part[0] = std::max(part[0], v[i]);
  float m = part[0];
  for (int64_t j = 1; j < kLanes; ++j) m = std::max(m, part[j]);
  return m;
}

// v[i] = exp(v[i] - max); returns the sum of the new values.
float exp_and_sum(float* v, int64_t n, float max) {
  for (int64_t i = 0; i < n; ++i) v[i] = std::exp(v[i] - max);
  float part[kLanes] = {};
  const int64_t body = n - n % kLanes;
  for (int64_t i = 0; i < body; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) part[j] += v[i + j];
  }
  for (int64_t i = body; i < n; ++i) part[0] += v[i];
  float sum = 0.0f;
  for (float p : part) sum += p;
  return sum;
}

template <DType T>
void softmax_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  using E = Elem<T>;
  using S = typename E::storage;
  const auto& a = *static_cast<const ops::SoftmaxArgs*>(raw);
  std::vector<float> values(static_cast<size_t>(a.cols));
  for (uint64_t row = first; row < end; ++row) {
    const auto r = static_cast<int64_t>(row);
    if (r >= a.rows) break;
    const S* x = static_cast<const S*>(a.x) + r * a.x_stride;
    S* o = static_cast<S*>(a.out) + r * a.out_stride;
    // Columns [0, limit) take part; the causal mask hides everything after the query's
    // own position.
    int64_t limit = a.cols;
    if (a.causal != 0)
      limit = std::clamp<int64_t>(r % a.queries + a.position_offset + 1, 0, a.cols);
    float* v = values.data();
    for (int64_t c = 0; c < limit; ++c) v[c] = E::load(x[c]) * a.scale;
    const float max = max_of(v, limit);
    // All masked (or every input -inf): no weights at all, so zeros.
    if (limit == 0 || max == -std::numeric_limits<float>::infinity()) {
      for (int64_t c = 0; c < a.cols; ++c) o[c] = E::store(0.0f);
      continue;
    }
    const float inv = 1.0f / exp_and_sum(v, limit, max);
    for (int64_t c = 0; c < limit; ++c) o[c] = E::store(v[c] * inv);
    for (int64_t c = limit; c < a.cols; ++c) o[c] = E::store(0.0f);
  }
}

}  // namespace

void register_softmax_kernels(KernelRegistry& registry) {
  for_each_float_type([&]<DType T>() {
    registry.add(make_cpu_kernel<ops::SoftmaxArgs>(std::string("softmax_") + Elem<T>::name,
                                                   softmax_kernel<T>));
  });
}

}  // namespace onepass::cpu
