#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <span>
#include <vector>

#include "onepass/core/error.h"
#include "onepass/model/sampler.h"
#include "support/testing.h"

namespace onepass::model {
namespace {

TEST(Sampler, GreedyPicksTheLargestLowestIndexOnTies) {
  Sampler s({});
  EXPECT_EQ(s.sample(std::vector<float>{0.1f, 3.0f, -2.0f, 3.0f}), 1);
  EXPECT_EQ(s.sample(std::vector<float>{NAN, -INFINITY, NAN}), 1);
  EXPECT_EQ(argmax(std::vector<float>{NAN, NAN}), 0);
  SamplerOptions k1;
  k1.temperature = 1.0f;
  k1.top_k = 1;
  EXPECT_EQ(Sampler(k1).sample(std::vector<float>{1.0f, 5.0f, 2.0f}), 1);
}

TEST(Sampler, SeededSamplingIsReproducible) {
  const auto logits = testing::random_floats(1000, 5, -3.0f, 3.0f);
  SamplerOptions o;
  o.temperature = 0.9f;
  o.top_k = 40;
  o.top_p = 0.95f;
  o.seed = 1234;
  Sampler a(o), b(o);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a.sample(logits), b.sample(logits));
  o.seed = 99;
  Sampler c(o);
  int differ = 0;
  Sampler a2({o.temperature, o.top_k, o.top_p, 1234});
  for (int i = 0; i < 50; ++i) differ += a2.sample(logits) != c.sample(logits);
  EXPECT_GT(differ, 10);
}

TEST(Sampler, MatchesTheSoftmaxDistribution) {
  // Logits log(1), log(2), log(3), log(4) at temperature 1: probabilities 0.1..0.4.
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  SamplerOptions o;
  o.temperature = 1.0f;
  o.seed = testing::fresh_seed();
  Sampler s(o);
  std::map<int, int> counts;
  const int n = 40000;
  for (int i = 0; i < n; ++i) counts[s.sample(logits)]++;
  for (int t = 0; t < 4; ++t) {
    const double expected = (t + 1) / 10.0;
    // 5 standard deviations of a binomial proportion.
    const double sd = std::sqrt(expected * (1 - expected) / n);
    EXPECT_NEAR(counts[t] / static_cast<double>(n), expected, 5 * sd) << "token " << t;
  }
}

TEST(Sampler, TopKAndTopPRestrictTheSupport) {
  const std::vector<float> logits = {5.0f, 4.9f, 4.8f, 0.0f, -1.0f};
  SamplerOptions o;
  o.temperature = 2.0f;
  o.top_k = 3;
  o.seed = 7;
  Sampler k(o);
  for (int i = 0; i < 500; ++i) EXPECT_LT(k.sample(logits), 3);
  SamplerOptions p;
  p.temperature = 1.0f;
  p.top_p = 0.01f;  // only the most likely token reaches it
  Sampler nucleus(p);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(nucleus.sample(logits), 0);
}

// Sampled frequencies against float64 probabilities (5 standard deviations of a binomial
// proportion); a token of probability 0 is never drawn.
void expect_distribution(Sampler& s, std::span<const float> logits, const std::vector<double>& expected) {
  std::map<int, int> counts;
  const int n = 40000;
  for (int i = 0; i < n; ++i) counts[s.sample(logits)]++;
  for (size_t t = 0; t < expected.size(); ++t) {
    const double sd = std::sqrt(expected[t] * (1 - expected[t]) / n);
    if (expected[t] == 0.0) {
      EXPECT_EQ(counts[static_cast<int>(t)], 0) << "token " << t;
    } else {
      EXPECT_NEAR(counts[static_cast<int>(t)] / static_cast<double>(n), expected[t], 5 * sd) << "token " << t;
    }
  }
}

// softmax(logits / temperature) in float64, with tokens below min_p times the largest
// probability removed, renormalised.
std::vector<double> reference_distribution(const std::vector<double>& logits, double temperature, double min_p) {
  double top = -INFINITY;
  for (const double l : logits) top = std::max(top, l);
  std::vector<double> p(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) p[i] = std::exp((logits[i] - top) / temperature);
  double total = 0;
  for (double& v : p) {
    if (v < min_p) v = 0;  // relative to the largest, which is 1
    total += v;
  }
  for (double& v : p) v /= total;
  return p;
}

TEST(Sampler, MinPMatchesAFloat64Reference) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const std::vector<float> logits = testing::random_floats(8, seed, -2.0f, 2.0f);
  SamplerOptions o;
  o.temperature = 0.7f;
  o.min_p = 0.25f;
  o.seed = seed;
  Sampler s(o);
  const std::vector<double> wide(logits.begin(), logits.end());
  const std::vector<double> expected = reference_distribution(wide, o.temperature, o.min_p);
  int removed = 0;
  for (const double p : expected) removed += p == 0.0;
  expect_distribution(s, logits, expected);
  // Fixed logits where min-p removes a known set: probabilities 1, 0.5, 0.2, 0.1 relative
  // to the first; min-p 0.3 keeps the first two, in proportion 2:1.
  const std::vector<float> fixed = {0.0f, std::log(0.5f), std::log(0.2f), std::log(0.1f)};
  SamplerOptions f;
  f.temperature = 1.0f;
  f.min_p = 0.3f;
  f.seed = seed;
  Sampler fs(f);
  expect_distribution(fs, fixed, {2.0 / 3.0, 1.0 / 3.0, 0.0, 0.0});
}

TEST(Sampler, RepeatPenaltyMatchesAFloat64Reference) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  std::vector<float> logits = testing::random_floats(6, seed, -2.0f, 2.0f);
  logits[1] = 1.5f;   // a positive logit: divided by the penalty
  logits[4] = -0.5f;  // a negative one: multiplied
  SamplerOptions o;
  o.temperature = 1.0f;
  o.repeat_penalty = 1.7f;
  o.repeat_last_n = 64;
  o.seed = seed;
  // A Sampler per draw, each seeing the same history, so every draw samples the same
  // distribution (sample() remembers what it returns).
  std::vector<double> wide(logits.begin(), logits.end());
  wide[1] /= 1.7;
  wide[4] *= 1.7;
  const std::vector<double> expected = reference_distribution(wide, 1.0, 0.0);
  std::map<int, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    o.seed = seed + static_cast<uint64_t>(i);
    Sampler s(o);
    s.remember(std::vector<int32_t>{1, 4, 4, 1});  // repeats are penalised once
    counts[s.sample(logits)]++;
  }
  for (size_t t = 0; t < expected.size(); ++t) {
    const double sd = std::sqrt(expected[t] * (1 - expected[t]) / n);
    EXPECT_NEAR(counts[static_cast<int>(t)] / static_cast<double>(n), expected[t], 5 * sd) << "token " << t;
  }
}

TEST(Sampler, PresenceAndFrequencyPenaltiesMatchAFloat64Reference) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const std::vector<float> logits = testing::random_floats(6, seed, -1.0f, 1.0f);
  SamplerOptions o;
  o.temperature = 1.0f;
  o.presence_penalty = 0.6f;
  o.frequency_penalty = 0.3f;
  o.repeat_last_n = 4;
  // Window {2, 5, 5, 0}: 2 and 0 once, 5 twice; 3 fell out of it.
  std::vector<double> wide(logits.begin(), logits.end());
  wide[2] -= 0.6 + 0.3;
  wide[0] -= 0.6 + 0.3;
  wide[5] -= 0.6 + 2 * 0.3;
  const std::vector<double> expected = reference_distribution(wide, 1.0, 0.0);
  std::map<int, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    o.seed = seed + static_cast<uint64_t>(i);
    Sampler s(o);
    s.remember(std::vector<int32_t>{3, 2, 5, 5, 0});
    counts[s.sample(logits)]++;
  }
  for (size_t t = 0; t < expected.size(); ++t) {
    const double sd = std::sqrt(expected[t] * (1 - expected[t]) / n);
    EXPECT_NEAR(counts[static_cast<int>(t)] / static_cast<double>(n), expected[t], 5 * sd) << "token " << t;
  }
  // What the device needs for the same draw: the window's tokens with their counts.
  Sampler s(o);
  s.remember(std::vector<int32_t>{3, 2, 5, 5, 0});
  std::vector<ops::SamplePenalty> entries;
  s.penalties(entries);
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].token, 0);
  EXPECT_EQ(entries[0].count, 1);
  EXPECT_EQ(entries[1].token, 2);
  EXPECT_EQ(entries[2].token, 5);
  EXPECT_EQ(entries[2].count, 2);
  EXPECT_EQ(s.device_params().penalty_count, 3);
  EXPECT_EQ(s.device_params().counter, 0u);
  s.accept(1);
  EXPECT_EQ(s.draws(), 1u);
  EXPECT_EQ(s.device_params().counter, 1u);
}

TEST(Sampler, GreedyWithARepeatPenaltyAvoidsRecentTokens) {
  const std::vector<float> logits = {2.0f, 1.9f, -1.0f, -1.05f};
  SamplerOptions o;
  o.repeat_penalty = 1.1f;  // 2.0 / 1.1 = 1.82 < 1.9
  o.repeat_last_n = 2;
  Sampler s(o);
  EXPECT_EQ(s.sample(logits), 0);  // nothing seen yet
  EXPECT_EQ(s.sample(logits), 1);  // 0 was just returned
  EXPECT_EQ(s.sample(logits), 0);  // both seen: 1.82 against 1.73
  // Negative logits are multiplied: -1.0 * 1.1 = -1.1 < -1.05; forget() clears the history.
  Sampler negative(o);
  negative.remember(std::vector<int32_t>{2});
  EXPECT_EQ(negative.sample(std::vector<float>{-1.05f, -5.0f, -1.0f, -3.0f}), 0);
  negative.forget();
  EXPECT_EQ(negative.sample(std::vector<float>{-1.05f, -5.0f, -1.0f, -3.0f}), 2);
  // Only the last repeat_last_n tokens count: 0 fell out of the window of 2.
  Sampler window(o);
  window.remember(std::vector<int32_t>{0, 3, 3});
  EXPECT_EQ(window.sample(logits), 0);
  // A penalty of 1 changes nothing.
  SamplerOptions off;
  Sampler plain(off);
  plain.remember(std::vector<int32_t>{0});
  EXPECT_EQ(plain.sample(logits), 0);
}

TEST(Sampler, RejectsBadOptions) {
  SamplerOptions o;
  o.top_p = 0.0f;
  EXPECT_THROW(Sampler{o}, Error);
  o.top_p = 1.0f;
  o.top_k = -1;
  EXPECT_THROW(Sampler{o}, Error);
  for (const float min_p : {-0.1f, 1.5f, NAN}) {
    SamplerOptions m;
    m.min_p = min_p;
    EXPECT_THROW(Sampler{m}, Error) << min_p;
  }
  for (const float penalty : {0.0f, -1.0f, NAN, INFINITY}) {
    SamplerOptions r;
    r.repeat_penalty = penalty;
    EXPECT_THROW(Sampler{r}, Error) << penalty;
  }
  SamplerOptions n;
  n.repeat_last_n = -1;
  EXPECT_THROW(Sampler{n}, Error);
}

}  // namespace
}  // namespace onepass::model
