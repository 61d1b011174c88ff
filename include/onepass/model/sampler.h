// Token sampling from logits: greedy, temperature, top-k, top-p, min-p, repetition penalty,
// seeded.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <vector>

namespace onepass::model {

struct SamplerOptions {
  float temperature = 0.0f;  // 0 (or below): greedy
  int32_t top_k = 0;         // keep the k most likely tokens; 0 = all
  float top_p = 1.0f;        // keep the smallest set whose probability reaches p; 1 = all
  uint64_t seed = 0;
  /// Keep the tokens whose probability (after temperature) is at least min_p times the most
  /// likely token's; 0 = all.
  float min_p = 0.0f;
  /// Repetition penalty (CTRL): a token among the last `repeat_last_n` seen has its logit
  /// divided by this when positive and multiplied by it when negative; 1 = off.
  float repeat_penalty = 1.0f;
  int32_t repeat_last_n = 64;

  bool greedy() const { return temperature <= 0.0f || top_k == 1; }
  /// Whether the logits depend on the tokens seen (a repetition penalty is set).
  bool penalizes() const { return repeat_penalty != 1.0f && repeat_last_n != 0; }
  /// Throws Error on values out of range (negative top_k, top_p outside (0, 1], min_p
  /// outside [0, 1], repeat_penalty not above 0, negative repeat_last_n, non-finite values).
  void validate() const;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);

  /// The next token for `logits` (one value per vocabulary entry), remembered for the
  /// repetition penalty. Greedy picks the largest (penalised) logit (lowest index on ties;
  /// NaNs never win).
  int32_t sample(std::span<const float> logits);
  /// Remembers tokens the model saw without sampling them (the prompt) for the penalty.
  void remember(std::span<const int32_t> tokens);
  /// Forgets the remembered tokens (a new conversation).
  void forget() { recent_.clear(); }
  const SamplerOptions& options() const { return options_; }

 private:
  void remember_one(int32_t token);
  int32_t sample_distribution(std::span<const float> logits);

  SamplerOptions options_;
  std::mt19937_64 rng_;
  std::deque<int32_t> recent_;                         // last repeat_last_n tokens
  std::vector<std::pair<float, int32_t>> candidates_;  // reused between calls
  std::vector<int32_t> penalised_;                     // reused between calls
};

/// Index of the largest finite-or-inf value (lowest on ties; 0 when all are NaN).
int32_t argmax(std::span<const float> logits);

}  // namespace onepass::model
