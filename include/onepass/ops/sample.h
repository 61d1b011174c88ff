// Token sampling on the device: one token id per row of logits, each row with its own
// parameters (model::Sampler's, so a batched step draws what the host sampler would).
#pragma once

#include <cmath>
#include <cstdint>

#include "onepass/exec/graph_session.h"

#if defined(__CUDACC__)
#define ONEPASS_SAMPLE_HD __host__ __device__
#else
#define ONEPASS_SAMPLE_HD
#endif

namespace onepass::ops {

/// One row's sampling parameters (a device buffer of these, one per row).
///
/// A row is drawn in this order (model::Sampler's):
///  1. penalties: each listed token t with count n > 0 (SamplePenalty) has its logit v
///     replaced by v / repeat_penalty when v > 0, else v * repeat_penalty, then by
///     v - n * frequency_penalty - presence_penalty;
///  2. greedy (temperature <= 0 or top_k == 1), or a row whose largest value is +inf or
///     -inf, or has no number: the argmax of the penalised values (lowest index on ties,
///     NaNs never win, an all-NaN row gives 0);
///  3. otherwise the tokens are ordered by penalised value, descending, ties by lower
///     index (NaNs dropped), and weighted by p = exp((v - max) / temperature);
///  4. top-k keeps the first top_k tokens (0: all); top-p keeps the shortest prefix of
///     those whose probability, renormalised over them, reaches top_p; min-p keeps the
///     tokens with p >= min_p (p is 1 for the most likely); the kept set is the shortest
///     of the three prefixes;
///  5. the token is the first of the kept prefix whose cumulative weight exceeds
///     u x (their total weight), u = sample_uniform(seed, counter) (inverse CDF).
/// Weights are exact sums of integers (p in units of 2^-40, sample_weight), so a row's
/// token does not depend on the order a backend adds them in; CPU and CUDA draw the same u.
struct SampleParams {
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t penalty_count = 0;  // entries of the row's penalty list in use
  uint64_t seed = 0;
  uint64_t counter = 0;       // the draw's index in its sequence (the tokens sampled before)
};

/// A penalised token of a row and how often it occurs in the row's window. A row's tokens
/// are distinct; should one repeat, its first entry applies. Tokens outside the
/// vocabulary are ignored.
struct SamplePenalty {
  int32_t token = 0;
  int32_t count = 0;
};

/// Most penalty entries per row (the CUDA kernel holds a row's list in shared memory).
inline constexpr int64_t kSampleMaxPenalties = 512;

struct SampleArgs {
  const float* logits;
  int64_t logits_stride;  // elements
  const SampleParams* params;
  const SamplePenalty* penalties;  // [rows, penalty_stride]
  int64_t penalty_stride;          // entries per row
  int32_t* out;
  int64_t rows;
  int64_t cols;
};

/// One unit of weight: p = 1 is 2^40 units, so a row of 2^23 tokens sums below 2^63.
inline constexpr uint64_t kSampleWeightOne = uint64_t{1} << 40;

/// splitmix64's finaliser: a bijection of 64-bit words that mixes every input bit.
ONEPASS_SAMPLE_HD inline uint64_t sample_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// 64 random bits of draw `counter` of `seed`: a hash of both words, so any draw of any
/// sequence is computed alone, in any batch, on any backend.
ONEPASS_SAMPLE_HD inline uint64_t sample_random_bits(uint64_t seed, uint64_t counter) {
  return sample_mix64(sample_mix64(seed + 0x9e3779b97f4a7c15ull) ^ (counter * 0xd1b54a32d192ed03ull + 0x8cb92ba72f3d8dd7ull));
}

/// The uniform u in [0, 1) of draw `counter` of `seed` (53 random bits).
ONEPASS_SAMPLE_HD inline double sample_uniform(uint64_t seed, uint64_t counter) {
  return static_cast<double>(sample_random_bits(seed, counter) >> 11) * 0x1.0p-53;
}

/// Whether the row is drawn greedily (step 2, before looking at the values).
ONEPASS_SAMPLE_HD inline bool sample_is_greedy(const SampleParams& p) {
  return p.temperature <= 0.0f || p.top_k == 1;
}

/// Step 1 for a logit v of a token occurring `count` (> 0) times in the row's window.
ONEPASS_SAMPLE_HD inline float sample_penalise(float v, int32_t count, const SampleParams& p) {
  v = v > 0.0f ? v / p.repeat_penalty : v * p.repeat_penalty;
  return v - static_cast<float>(count) * p.frequency_penalty - p.presence_penalty;
}

/// (max - v) / temperature in float (inv_temperature = 1 / temperature), 0 for v == max
/// (also when a tiny temperature makes inv_temperature infinite).
ONEPASS_SAMPLE_HD inline float sample_distance(float v, float max, float inv_temperature) {
  const float d = max - v;
  return d == 0.0f ? 0.0f : d * inv_temperature;
}

/// p = exp((v - max) / temperature) in float.
ONEPASS_SAMPLE_HD inline float sample_probability(float v, float max, float inv_temperature) {
  return expf(-sample_distance(v, max, inv_temperature));
}

/// p in units of 2^-40, truncated (p <= 1).
ONEPASS_SAMPLE_HD inline uint64_t sample_weight(float probability) {
  return static_cast<uint64_t>(static_cast<double>(probability) * static_cast<double>(kSampleWeightOne));
}

/// Values below max by more than this many temperatures weigh nothing (p < 2^-45): they
/// are never drawn and cannot end a top-p prefix, so backends may leave them out.
inline constexpr float kSampleNegligibleNats = 31.875f;

/// Top-p: the prefix ends at the first token where the cumulative weight reaches this,
/// ceil(top_p x total), of the top-k tokens' total weight.
ONEPASS_SAMPLE_HD inline uint64_t sample_top_p_target(float top_p, uint64_t total) {
  const double t = static_cast<double>(top_p) * static_cast<double>(total);
  uint64_t target = static_cast<uint64_t>(t);
  if (static_cast<double>(target) < t) ++target;
  return target < 1 ? 1 : (target > total ? total : target);
}

/// The draw: the first token whose cumulative weight exceeds floor(u x total) (< total).
ONEPASS_SAMPLE_HD inline uint64_t sample_draw_target(double u, uint64_t total) {
  const uint64_t target = static_cast<uint64_t>(u * static_cast<double>(total));
  return target >= total ? total - 1 : target;
}

/// The value used for ordering: -0 and +0 are the same value.
ONEPASS_SAMPLE_HD inline float sample_canonical(float v) { return v == 0.0f ? 0.0f : v; }

/// out[r] = the token drawn for row r of `logits` (f32 [rows, vocab]) with params[r]
/// (u8 [rows x sizeof(SampleParams)], SampleParams) and penalties row r (i32 [rows, 2 x P],
/// SamplePenalty pairs, the first params[r].penalty_count of them used; P at most
/// kSampleMaxPenalties; may be empty when no row has penalties).
void sample(GraphSession& s, const TensorView& logits, const TensorView& params, const TensorView& penalties,
            const TensorView& out);

}  // namespace onepass::ops
