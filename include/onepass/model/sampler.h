// Token sampling from logits: greedy, temperature, top-k, top-p, seeded.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace onepass::model {

struct SamplerOptions {
  float temperature = 0.0f;  // 0 (or below): greedy
  int32_t top_k = 0;         // keep the k most likely tokens; 0 = all
  float top_p = 1.0f;        // keep the smallest set whose probability reaches p; 1 = all
  uint64_t seed = 0;

  bool greedy() const { return temperature <= 0.0f || top_k == 1; }
  /// Throws Error on values out of range (negative top_k, top_p outside (0, 1]).
  void validate() const;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);

  /// The next token for `logits` (one value per vocabulary entry). Greedy picks the
  /// largest logit (lowest index on ties; NaNs never win).
  int32_t sample(std::span<const float> logits);
  const SamplerOptions& options() const { return options_; }

 private:
  SamplerOptions options_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;  // reused between calls
};

/// Index of the largest finite-or-inf value (lowest on ties; 0 when all are NaN).
int32_t argmax(std::span<const float> logits);

}  // namespace onepass::model
