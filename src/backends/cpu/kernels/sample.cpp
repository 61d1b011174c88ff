// CPU kernel: sample_f32, one row per block. The row's candidates (the tokens that can
// carry weight) are sorted by (value desc, index asc), then cut and drawn as
// ops::SampleParams describes.
#include "onepass/ops/sample.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "../cpu_kernels.h"
#include "float_types.h"

namespace onepass::cpu {
namespace {

struct Workspace {
  std::vector<float> values;                     // the penalised row
  std::vector<std::pair<float, int32_t>> order;  // candidates, sorted by value desc, index asc
};

// The first index of the largest non-NaN value; 0 when there is none.
int32_t first_argmax(const std::vector<float>& v) {
  float max = -std::numeric_limits<float>::infinity();
  int32_t index = -1;
  for (size_t c = 0; c < v.size(); ++c) {
    if (v[c] > max || (index < 0 && v[c] == max)) {
      max = v[c];
      index = static_cast<int32_t>(c);
    }
  }
  return index < 0 ? 0 : index;
}

int32_t sample_row(const ops::SampleArgs& a, int64_t r, Workspace& w) {
  const ops::SampleParams p = a.params[r];
  const float* x = a.logits + r * a.logits_stride;
  const auto cols = static_cast<size_t>(a.cols);
  w.values.assign(x, x + cols);
  // Step 1; entries in reverse, each from the raw logit, so a repeated token's first entry wins.
  const int64_t entries = std::min<int64_t>(std::max(p.penalty_count, 0), a.penalty_stride);
  for (int64_t i = entries - 1; i >= 0; --i) {
    const ops::SamplePenalty e = a.penalties[r * a.penalty_stride + i];
    if (e.count <= 0 || e.token < 0 || e.token >= a.cols) continue;
    w.values[static_cast<size_t>(e.token)] = ops::sample_penalise(x[e.token], e.count, p);
  }
  for (float& v : w.values) v = ops::sample_canonical(v);
  const int32_t argmax = first_argmax(w.values);
  const float max = w.values[static_cast<size_t>(argmax)];
  if (ops::sample_is_greedy(p) || !std::isfinite(max)) return argmax;  // NaN (none), +inf, -inf

  // Candidates: every token within kSampleNegligibleNats of the max (the others weigh 0).
  const float inv_t = 1.0f / p.temperature;
  w.order.clear();
  for (size_t c = 0; c < cols; ++c) {
    const float v = w.values[c];
    if (ops::sample_distance(v, max, inv_t) < ops::kSampleNegligibleNats) w.order.emplace_back(v, static_cast<int32_t>(c));
  }
  auto before = [](const auto& l, const auto& rt) { return l.first > rt.first || (l.first == rt.first && l.second < rt.second); };
  size_t keep = w.order.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < keep) {
    keep = static_cast<size_t>(p.top_k);
    std::partial_sort(w.order.begin(), w.order.begin() + static_cast<std::ptrdiff_t>(keep), w.order.end(), before);
  } else {
    std::sort(w.order.begin(), w.order.end(), before);
  }
  auto weight = [&](size_t i) { return ops::sample_weight(ops::sample_probability(w.order[i].first, max, inv_t)); };
  size_t min_p_keep = keep;
  if (p.min_p > 0.0f) {
    // As many tokens as have p >= min_p (counted over all candidates, as the CUDA kernel does).
    size_t n = 0;
    for (const auto& [v, c] : w.order) n += ops::sample_probability(v, max, inv_t) >= p.min_p;
    min_p_keep = std::min(keep, n);
  }
  if (p.top_p < 1.0f) {
    uint64_t total = 0;
    for (size_t i = 0; i < keep; ++i) total += weight(i);
    const uint64_t target = ops::sample_top_p_target(p.top_p, total);
    uint64_t acc = 0;
    for (size_t i = 0; i < keep; ++i) {
      acc += weight(i);
      if (acc >= target) {
        keep = i + 1;
        break;
      }
    }
  }
  keep = std::max<size_t>(std::min(keep, min_p_keep), 1);
  uint64_t total = 0;
  for (size_t i = 0; i < keep; ++i) total += weight(i);
  const uint64_t target = ops::sample_draw_target(ops::sample_uniform(p.seed, p.counter), total);
  uint64_t acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += weight(i);
    if (acc > target) return w.order[i].second;
  }
  return w.order[keep - 1].second;  // not reached: the total exceeds the target
}

void sample_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  const auto& a = *static_cast<const ops::SampleArgs*>(raw);
  thread_local Workspace w;
  for (uint64_t block = first; block < end; ++block) {
    const auto r = static_cast<int64_t>(block);
    if (r >= a.rows) break;
    a.out[r] = sample_row(a, r, w);
  }
}

}  // namespace

void register_sample_kernels(KernelRegistry& registry) {
  registry.add(make_cpu_kernel<ops::SampleArgs>("sample_f32", sample_kernel));
}

}  // namespace onepass::cpu
