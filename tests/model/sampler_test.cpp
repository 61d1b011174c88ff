#include <gtest/gtest.h>

#include <cmath>
#include <map>

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

TEST(Sampler, RejectsBadOptions) {
  SamplerOptions o;
  o.top_p = 0.0f;
  EXPECT_THROW(Sampler{o}, Error);
  o.top_p = 1.0f;
  o.top_k = -1;
  EXPECT_THROW(Sampler{o}, Error);
}

}  // namespace
}  // namespace onepass::model
