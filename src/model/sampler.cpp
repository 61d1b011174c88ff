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

Sampler::Sampler(const SamplerOptions& options) : options_(options), rng_(options.seed) {
  options_.validate();
}

void Sampler::remember_one(int32_t token) {
  if (options_.repeat_last_n <= 0) return;
  recent_.push_back(token);
  while (recent_.size() > static_cast<size_t>(options_.repeat_last_n)) recent_.pop_front();
}

void Sampler::remember(std::span<const int32_t> tokens) {
  for (const int32_t token : tokens) remember_one(token);
}

int32_t Sampler::sample(std::span<const float> logits) {
  check(!logits.empty(), "sampler", "empty logits");
  std::vector<float> penalised_logits;
  if (options_.penalizes() && !recent_.empty()) {
    // Each distinct recent token is penalised once, however often it occurred.
    penalised_logits.assign(logits.begin(), logits.end());
    penalised_.assign(recent_.begin(), recent_.end());
    std::sort(penalised_.begin(), penalised_.end());
    penalised_.erase(std::unique(penalised_.begin(), penalised_.end()), penalised_.end());
    for (const int32_t token : penalised_) {
      if (token < 0 || static_cast<size_t>(token) >= logits.size()) continue;
      float& v = penalised_logits[static_cast<size_t>(token)];
      v = v > 0.0f ? v / options_.repeat_penalty : v * options_.repeat_penalty;
    }
    logits = penalised_logits;
  }
  const int32_t token = options_.greedy() ? argmax(logits) : sample_distribution(logits);
  remember_one(token);
  return token;
}

int32_t Sampler::sample_distribution(std::span<const float> logits) {
  candidates_.clear();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isnan(logits[i])) candidates_.emplace_back(logits[i], static_cast<int32_t>(i));
  }
  if (candidates_.empty()) return 0;
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
  std::uniform_real_distribution<double> uniform(0.0, total);
  const double r = uniform(rng_);
  double acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs[i];
    if (r < acc) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

}  // namespace onepass::model
