// CPU kernel: sample_f32, one row per block. The row's candidates (the tokens that can
// carry weight) are cut and drawn as ops::SampleParams describes, each cut (top-k, top-p /
// min-p, the draw) found by a quickselect over (value desc, index asc), without a sort.
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

// A candidate token: its penalised value, index and weight (ops::sample_weight).
struct Candidate {
  float value;
  int32_t index;
  uint64_t weight;
};

// The order of the draw: value descending, ties by lower index (a total order).
bool before(const Candidate& a, const Candidate& b) {
  return a.value > b.value || (a.value == b.value && a.index < b.index);
}

struct Workspace {
  std::vector<float> values;          // the penalised row
  std::vector<Candidate> candidates;  // partitioned in place by cut()
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

struct Prefix {
  size_t length;    // candidates in it
  uint64_t weight;  // their total weight
};

// Rearranges c[0, n) so that the shortest prefix of the order whose length reaches
// `length_limit` or whose weight reaches `weight_limit` comes first (in some order), and
// returns it; all n when neither limit is reached. A quickselect: expected O(n), no sort.
Prefix cut(std::vector<Candidate>& c, size_t n, uint64_t length_limit, uint64_t weight_limit) {
  size_t lo = 0, hi = n;
  uint64_t weight = 0;  // of c[0, lo), which is in the prefix
  while (lo < hi) {
    std::swap(c[lo + (hi - lo) / 2], c[hi - 1]);
    const Candidate pivot = c[hi - 1];
    const auto mid = static_cast<size_t>(
        std::partition(c.begin() + static_cast<std::ptrdiff_t>(lo), c.begin() + static_cast<std::ptrdiff_t>(hi - 1),
                       [&](const Candidate& x) { return before(x, pivot); }) -
        c.begin());
    std::swap(c[mid], c[hi - 1]);
    uint64_t ahead = 0;  // weight of c[lo, mid), the candidates before the pivot
    for (size_t i = lo; i < mid; ++i) ahead += c[i].weight;
    if (mid > lo && (mid >= length_limit || weight + ahead >= weight_limit)) {
      hi = mid;  // the prefix ends before the pivot
      continue;
    }
    weight += ahead + pivot.weight;
    if (mid + 1 >= length_limit || weight >= weight_limit) return {mid + 1, weight};
    lo = mid + 1;
  }
  return {n, weight};
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

  // Candidates: every token within kSampleNegligibleNats of the max (the others weigh 0),
  // and how many have p >= min_p.
  const float inv_t = 1.0f / p.temperature;
  w.candidates.clear();
  size_t min_p_count = 0;
  uint64_t total = 0;
  for (size_t c = 0; c < cols; ++c) {
    const float v = w.values[c];
    if (!(ops::sample_distance(v, max, inv_t) < ops::kSampleNegligibleNats)) continue;
    const float probability = ops::sample_probability(v, max, inv_t);
    min_p_count += probability >= p.min_p;
    w.candidates.push_back({v, static_cast<int32_t>(c), ops::sample_weight(probability)});
    total += w.candidates.back().weight;
  }
  constexpr uint64_t kNone = std::numeric_limits<uint64_t>::max();
  Prefix kept{w.candidates.size(), total};
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < kept.length) {
    kept = cut(w.candidates, kept.length, static_cast<uint64_t>(p.top_k), kNone);
  }
  // Top-p of the top-k tokens' weight and min-p: the shorter prefix.
  const uint64_t by_min_p = p.min_p > 0.0f ? std::max<uint64_t>(min_p_count, 1) : kNone;
  const bool top_p = p.top_p < 1.0f;
  if (top_p || by_min_p < kept.length) {
    kept = cut(w.candidates, kept.length, by_min_p, top_p ? ops::sample_top_p_target(p.top_p, kept.weight) : kNone);
  }
  // The draw: the first token whose cumulative weight exceeds floor(u x total).
  const uint64_t target = ops::sample_draw_target(ops::sample_uniform(p.seed, p.counter), kept.weight);
  const Prefix drawn = cut(w.candidates, kept.length, kNone, target + 1);
  return w.candidates[drawn.length - 1].index;
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
