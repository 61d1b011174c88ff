#include "onepass/model/sampler.h"

#include <algorithm>
#include <cmath>

#include "onepass/core/error.h"

namespace onepass::model {

void SamplerOptions::validate() const {
  check(top_k >= 0, "sampler", "top-k must be >= 0, got ", top_k);
  check(top_p > 0.0f && top_p <= 1.0f, "sampler", "top-p must be in (0, 1], got ", top_p);
  check(std::isfinite(temperature), "sampler", "temperature must be finite");
  check(min_p >= 0.0f && min_p <= 1.0f, "sampler", "min-p must be in [0, 1], got ", min_p);
  check(std::isfinite(repeat_penalty) && repeat_penalty > 0.0f, "sampler",
        "repeat penalty must be above 0 (1 = off), got ", repeat_penalty);
  check(repeat_last_n >= 0, "sampler", "repeat-last-n must be >= 0, got ", repeat_last_n);
  check(std::isfinite(presence_penalty), "sampler", "presence penalty must be finite");
  check(std::isfinite(frequency_penalty), "sampler", "frequency penalty must be finite");
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  float best_value = -INFINITY;
  bool found = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float v = logits[i];
    if (std::isnan(v)) continue;
    if (!found || v > best_value) {
      best = static_cast<int32_t>(i);
      best_value = v;
      found = true;
    }
  }
  return best;
}

Sampler::Sampler(const SamplerOptions& options) : options_(options) { options_.validate(); }

void Sampler::remember_one(int32_t token) {
  if (options_.repeat_last_n <= 0) return;
  recent_.push_back(token);
  while (recent_.size() > static_cast<size_t>(options_.repeat_last_n)) recent_.pop_front();
}

void Sampler::remember(std::span<const int32_t> tokens) {
  for (const int32_t token : tokens) remember_one(token);
}

void Sampler::accept(int32_t token) {
  remember_one(token);
  ++draws_;
}

void Sampler::penalties(std::vector<ops::SamplePenalty>& out) const {
  out.clear();
  if (!options_.penalizes()) return;
  std::vector<int32_t> tokens(recent_.begin(), recent_.end());
  std::sort(tokens.begin(), tokens.end());
  for (const int32_t token : tokens) {
    if (!out.empty() && out.back().token == token) {
      ++out.back().count;
    } else {
      out.push_back({token, 1});
    }
  }
}

ops::SampleParams Sampler::device_params() const {
  ops::SampleParams p;
  p.temperature = options_.temperature;
  p.top_k = options_.top_k;
  p.top_p = options_.top_p;
  p.min_p = options_.min_p;
  p.repeat_penalty = options_.repeat_penalty;
  p.presence_penalty = options_.presence_penalty;
  p.frequency_penalty = options_.frequency_penalty;
  if (options_.penalizes()) {
    // Distinct tokens of the window, counted without building the list.
    std::vector<int32_t> tokens(recent_.begin(), recent_.end());
    std::sort(tokens.begin(), tokens.end());
    p.penalty_count = static_cast<int32_t>(std::unique(tokens.begin(), tokens.end()) - tokens.begin());
  }
  p.seed = options_.seed;
  p.counter = draws_;
  return p;
}

int32_t Sampler::sample(std::span<const float> logits) {
  check(!logits.empty(), "sampler", "empty logits");
  if (options_.penalizes() && !recent_.empty()) {
    // Each distinct recent token is penalised once, by its count in the window.
    std::vector<float>& penalised_logits = penalised_logits_;
    penalised_logits.assign(logits.begin(), logits.end());
    penalties(penalised_);
    const ops::SampleParams params = device_params();
    for (const ops::SamplePenalty& e : penalised_) {
      if (e.token < 0 || static_cast<size_t>(e.token) >= logits.size()) continue;
      float& v = penalised_logits[static_cast<size_t>(e.token)];
      v = ops::sample_penalise(v, e.count, params);
    }
    logits = penalised_logits;
  }
  const int32_t best = argmax(logits);
  const float top = logits[static_cast<size_t>(best)];
  // A row whose largest value is infinite (or that has no number) has no distribution.
  const bool greedy = options_.greedy() || !std::isfinite(top);
  const int32_t token = greedy ? best : sample_distribution(logits, draws_);
  accept(token);
  return token;
}

int32_t Sampler::sample_distribution(std::span<const float> logits, uint64_t draw) {
  candidates_.clear();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isnan(logits[i])) candidates_.emplace_back(ops::sample_canonical(logits[i]), static_cast<int32_t>(i));
  }
  // Highest first; ties by lower index so results do not depend on the sort.
  auto higher = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t keep = candidates_.size();
  if (options_.top_k > 0 && static_cast<size_t>(options_.top_k) < keep) {
    keep = static_cast<size_t>(options_.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<long>(keep), candidates_.end(), higher);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), higher);
  }
  candidates_.resize(keep);
  // Softmax of logits / temperature in double, relative to the maximum.
  std::vector<double> probs(keep);
  const double inv_t = 1.0 / options_.temperature;
  const double top = candidates_.front().first;
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    probs[i] = std::exp((candidates_[i].first - top) * inv_t);
    total += probs[i];
  }
  // Nucleus: the smallest prefix whose mass reaches top_p (at least one token).
  if (options_.top_p < 1.0f) {
    double mass = 0.0;
    size_t n = 0;
    while (n < keep) {
      mass += probs[n] / total;
      ++n;
      if (mass >= options_.top_p) break;
    }
    keep = n;
    total = 0.0;
    for (size_t i = 0; i < keep; ++i) total += probs[i];
  }
  // Min-p: probabilities relative to the most likely token (probs[0] is 1).
  if (options_.min_p > 0.0f) {
    size_t n = 1;
    while (n < keep && probs[n] >= static_cast<double>(options_.min_p)) ++n;
    keep = n;
    total = 0.0;
    for (size_t i = 0; i < keep; ++i) total += probs[i];
  }
  // Inverse CDF at the draw's u, in the order above.
  const double r = ops::sample_uniform(options_.seed, draw) * total;
  double acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs[i];
    if (r < acc) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

}  // namespace onepass::model
