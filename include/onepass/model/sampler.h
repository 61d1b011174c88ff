// Token sampling from logits: greedy, temperature, top-k, top-p, min-p, repetition,
// presence and frequency penalties, seeded. The steps and their order are ops::SampleParams';
// the host Sampler computes them in float64, ops::sample on the device, both drawing the
// same u for the same (seed, draw), so a sequence samples the same tokens on either.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "onepass/ops/sample.h"

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
  /// The window of every penalty: the last this many tokens seen (prompt and output).
  int32_t repeat_last_n = 64;
  /// Subtracted from the logit of every token in the window (OpenAI's presence_penalty).
  float presence_penalty = 0.0f;
  /// Subtracted from the logit of a token once per occurrence in the window.
  float frequency_penalty = 0.0f;

  bool greedy() const { return temperature <= 0.0f || top_k == 1; }
  /// Whether the logits depend on the tokens seen (a penalty is set).
  bool penalizes() const {
    return repeat_last_n != 0 && (repeat_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f);
  }
  /// Throws Error on values out of range (negative top_k, top_p outside (0, 1], min_p
  /// outside [0, 1], repeat_penalty not above 0, negative repeat_last_n, non-finite values).
  void validate() const;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);

  /// The next token for `logits` (one value per vocabulary entry), remembered for the
  /// penalties; draw number draws() of the seed. Greedy picks the largest (penalised) logit
  /// (lowest index on ties; NaNs never win).
  int32_t sample(std::span<const float> logits);
  /// Takes a token drawn elsewhere (ops::sample with device_params()) as this sampler's
  /// next draw: remembered, and the draw counter advances.
  void accept(int32_t token);
  /// Remembers tokens the model saw without sampling them (the prompt) for the penalty.
  void remember(std::span<const int32_t> tokens);
  /// Forgets the remembered tokens (a new conversation).
  void forget() { recent_.clear(); }
  const SamplerOptions& options() const { return options_; }
  /// Tokens drawn so far (sample and accept): the counter of the next draw.
  uint64_t draws() const { return draws_; }

  /// The next draw's parameters for ops::sample, with penalty_count set to the entries
  /// penalties() gives.
  ops::SampleParams device_params() const;
  /// The distinct tokens of the penalty window with their counts, by token (empty without
  /// penalties).
  void penalties(std::vector<ops::SamplePenalty>& out) const;

 private:
  void remember_one(int32_t token);
  int32_t sample_distribution(std::span<const float> logits, uint64_t draw);

  SamplerOptions options_;
  uint64_t draws_ = 0;
  std::deque<int32_t> recent_;                         // last repeat_last_n tokens
  std::vector<std::pair<float, int32_t>> candidates_;  // reused between calls
  std::vector<ops::SamplePenalty> penalised_;          // reused between calls
  std::vector<float> penalised_logits_;                // reused between calls
};

/// Index of the largest finite-or-inf value (lowest on ties; 0 when all are NaN).
int32_t argmax(std::span<const float> logits);

}  // namespace onepass::model
