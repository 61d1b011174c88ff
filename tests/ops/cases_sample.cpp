// Op cases: sample (per-row sampling parameters, penalties, ties, NaN and infinities),
// against a float64 inverse-CDF reference drawing with the same uniform u.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "onepass/model/sampler.h"
#include "onepass/ops/sample.h"
#include "support/op_harness.h"

namespace onepass::testing {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
// A draw, a top-p cut or a min-p cut this close to a boundary (in probability) may fall
// either way under float rounding: such rows are not compared.
constexpr double kBoundary = 1e-6;

struct RowCase {
  ops::SampleParams params;
  std::vector<ops::SamplePenalty> penalties;
};

struct Expected {
  int32_t token = 0;
  bool fragile = false;
};

// The lowest index of the largest non-NaN value; 0 when there is none.
int32_t reference_argmax(const std::vector<double>& v) {
  int64_t best = -1;
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) continue;
    if (best < 0 || v[i] > v[static_cast<size_t>(best)]) best = static_cast<int64_t>(i);
  }
  return static_cast<int32_t>(best < 0 ? 0 : best);
}

// ops::SampleParams' steps in float64: penalised logits, then the kept prefix of the tokens
// ordered by (value desc, index asc), renormalised, and the inverse CDF at u.
Expected reference_sample(const double* raw, int64_t cols, const RowCase& row) {
  const ops::SampleParams& p = row.params;
  std::vector<double> v(raw, raw + cols);
  // Penalties are part of the op's input transformation, computed in float as specified.
  for (size_t i = row.penalties.size(); i-- > 0;) {
    const ops::SamplePenalty e = row.penalties[i];
    if (i >= static_cast<size_t>(std::max(p.penalty_count, 0)) || e.count <= 0 || e.token < 0 || e.token >= cols) {
      continue;
    }
    v[static_cast<size_t>(e.token)] = ops::sample_penalise(static_cast<float>(raw[e.token]), e.count, p);
  }
  const int32_t argmax = reference_argmax(v);
  const double max = v[static_cast<size_t>(argmax)];
  if (p.temperature <= 0.0f || p.top_k == 1 || !std::isfinite(max)) return {argmax, false};
  std::vector<int32_t> order;
  for (int64_t i = 0; i < cols; ++i) {
    if (!std::isnan(v[static_cast<size_t>(i)])) order.push_back(static_cast<int32_t>(i));
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return v[static_cast<size_t>(a)] > v[static_cast<size_t>(b)] || (v[static_cast<size_t>(a)] == v[static_cast<size_t>(b)] && a < b);
  });
  std::vector<double> prob(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    prob[i] = std::exp((v[static_cast<size_t>(order[i])] - max) / static_cast<double>(p.temperature));
  }
  bool fragile = false;
  size_t keep = order.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < keep) keep = static_cast<size_t>(p.top_k);
  size_t keep_min_p = keep;
  if (p.min_p > 0.0f) {
    size_t n = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      n += prob[i] >= p.min_p;
      fragile = fragile || (prob[i] != 1.0 && std::abs(prob[i] - p.min_p) < kBoundary);
    }
    keep_min_p = std::min(keep, n);
  }
  if (p.top_p < 1.0f) {
    const double total = std::accumulate(prob.begin(), prob.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
    double mass = 0.0;
    for (size_t i = 0; i < keep; ++i) {
      mass += prob[i] / total;
      fragile = fragile || std::abs(mass - p.top_p) < kBoundary;
      if (mass >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  keep = std::max<size_t>(std::min(keep, keep_min_p), 1);
  const double total = std::accumulate(prob.begin(), prob.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
  const double target = ops::sample_uniform(p.seed, p.counter) * total;
  double acc = 0.0;
  int32_t token = order[keep - 1];
  for (size_t i = 0; i < keep; ++i) {
    const double next = acc + prob[i];
    if (std::abs(next - target) < kBoundary * total) fragile = true;
    if (target < next) {
      token = order[i];
      break;
    }
    acc = next;
  }
  return {token, fragile};
}

// Random parameters: greedy rows, temperatures, top-k 1 / 40 / the vocabulary / beyond,
// top-p edge values, min-p, and penalties on random tokens.
RowCase random_row(std::mt19937_64& rng, int64_t cols, int64_t max_penalties) {
  auto pick = [&](const auto& options) { return options[rng() % std::size(options)]; };
  RowCase row;
  ops::SampleParams& p = row.params;
  const float temperatures[] = {0.0f, 0.3f, 0.7f, 1.0f, 1.0f, 1.5f, 4.0f};
  const int32_t top_ks[] = {0, 0, 1, 40, static_cast<int32_t>(cols), static_cast<int32_t>(cols) + 5, 3};
  const float top_ps[] = {1.0f, 1.0f, 0.9f, 0.5f, 1e-3f, 0.999999f, 0.95f};
  const float min_ps[] = {0.0f, 0.0f, 0.0f, 0.05f, 0.5f, 1.0f};
  p.temperature = pick(temperatures);
  p.top_k = pick(top_ks);
  p.top_p = pick(top_ps);
  p.min_p = pick(min_ps);
  p.seed = rng();
  p.counter = rng() % 1000;
  if (max_penalties > 0 && rng() % 2 == 0) {
    const float repeat[] = {1.0f, 1.3f, 0.8f};
    const float presence[] = {0.0f, 0.5f, -0.25f};
    const float frequency[] = {0.0f, 0.2f};
    p.repeat_penalty = pick(repeat);
    p.presence_penalty = pick(presence);
    p.frequency_penalty = pick(frequency);
    const auto n = static_cast<int64_t>(rng() % static_cast<uint64_t>(max_penalties + 1));
    for (int64_t i = 0; i < n; ++i) {
      // Mostly distinct in-range tokens; now and then a repeat, an id outside the
      // vocabulary or a zero count (ignored).
      ops::SamplePenalty e;
      e.token = static_cast<int32_t>(rng() % static_cast<uint64_t>(cols + (i % 11 == 10 ? 3 : 0)));
      if (i % 13 == 12 && !row.penalties.empty()) e.token = row.penalties.front().token;
      e.count = static_cast<int32_t>(rng() % 4) + (i % 17 == 16 ? 0 : 1);
      row.penalties.push_back(e);
    }
    p.penalty_count = static_cast<int32_t>(n);
  }
  return row;
}

// The host sampler of a row: its options and, remembered, each penalised token `count`
// times (first entries only, as the op applies them); the row's counter must be 0.
int32_t host_sampler_token(const double* raw, int64_t cols, const RowCase& row) {
  const ops::SampleParams& p = row.params;
  model::SamplerOptions o;
  o.temperature = p.temperature;
  o.top_k = p.top_k;
  o.top_p = p.top_p;
  o.min_p = p.min_p;
  o.seed = p.seed;
  o.repeat_penalty = p.repeat_penalty;
  o.presence_penalty = p.presence_penalty;
  o.frequency_penalty = p.frequency_penalty;
  std::vector<int32_t> seen;
  std::vector<int32_t> history;
  for (int32_t i = 0; i < p.penalty_count; ++i) {
    const ops::SamplePenalty e = row.penalties[static_cast<size_t>(i)];
    if (e.count <= 0 || e.token < 0 || e.token >= cols || std::count(seen.begin(), seen.end(), e.token) > 0) continue;
    seen.push_back(e.token);
    history.insert(history.end(), static_cast<size_t>(e.count), e.token);
  }
  o.repeat_last_n = static_cast<int32_t>(std::max<size_t>(history.size(), 1));
  model::Sampler sampler(o);
  sampler.remember(history);
  const std::vector<float> logits(raw, raw + cols);
  return sampler.sample(logits);
}

// Runs sample over `logits` with `rows` and compares every row that is not fragile with
// the reference (and, with `host_sampler`, with model::Sampler); at most a few rows may
// be fragile.
void run_and_compare(OpContext& c, const TensorView& logits, const std::vector<RowCase>& rows,
                     bool host_sampler = false) {
  const auto n = static_cast<int64_t>(rows.size());
  const int64_t cols = logits.cols();
  int64_t per_row = 0;
  for (const RowCase& r : rows) per_row = std::max<int64_t>(per_row, static_cast<int64_t>(r.penalties.size()));
  std::vector<uint8_t> param_bytes(static_cast<size_t>(n) * sizeof(ops::SampleParams));
  std::vector<int32_t> penalty_values(static_cast<size_t>(n * per_row * 2), 0);
  for (int64_t r = 0; r < n; ++r) {
    const RowCase& row = rows[static_cast<size_t>(r)];
    std::memcpy(param_bytes.data() + r * static_cast<int64_t>(sizeof(ops::SampleParams)), &row.params, sizeof(row.params));
    for (size_t i = 0; i < row.penalties.size(); ++i) {
      penalty_values[static_cast<size_t>(r * per_row * 2) + 2 * i] = row.penalties[i].token;
      penalty_values[static_cast<size_t>(r * per_row * 2) + 2 * i + 1] = row.penalties[i].count;
    }
  }
  const TensorView params = c.input_bytes(DType::u8, {n, static_cast<int64_t>(sizeof(ops::SampleParams))}, param_bytes);
  const TensorView penalties = per_row > 0 ? c.input_i32({n, per_row * 2}, penalty_values) : TensorView{};
  const TensorView out = c.output(DType::i32, {n});
  ops::sample(c.session(), logits, params, penalties, out);
  c.run();
  std::vector<int32_t> got(static_cast<size_t>(n));
  out.view.read(got.data(), got.size() * 4);
  const std::vector<double>& x = c.host(logits);
  int64_t fragile = 0;
  for (int64_t r = 0; r < n; ++r) {
    const RowCase& row = rows[static_cast<size_t>(r)];
    const Expected want = reference_sample(x.data() + r * cols, cols, row);
    const int32_t token = got[static_cast<size_t>(r)];
    ASSERT_TRUE(token >= 0 && token < cols) << "row " << r << ": token " << token;
    if (want.fragile) {
      ++fragile;
      continue;
    }
    const ops::SampleParams& p = row.params;
    EXPECT_EQ(token, want.token) << "row " << r << " of " << n << "x" << cols << ": temperature " << p.temperature
                                 << ", top_k " << p.top_k << ", top_p " << p.top_p << ", min_p " << p.min_p
                                 << ", penalties " << p.penalty_count << ", seed " << p.seed << ", counter "
                                 << p.counter;
    if (host_sampler) {
      EXPECT_EQ(token, host_sampler_token(x.data() + r * cols, cols, row)) << "row " << r;
    }
  }
  // A row of 128k tokens of similar weight has a CDF boundary every ~8e-6: a fair share of
  // such rows is skipped, but never most of them.
  EXPECT_LE(fragile, n / 2 + 1) << "too many rows near a boundary to compare";
  c.check_guards();
}

std::vector<RowCase> random_rows(OpContext& c, int64_t n, int64_t cols, int64_t max_penalties) {
  std::vector<RowCase> rows;
  for (int64_t r = 0; r < n; ++r) rows.push_back(random_row(c.rng(), cols, max_penalties));
  return rows;
}

RowCase sampled(float temperature, int32_t top_k, float top_p, float min_p, uint64_t seed, uint64_t counter) {
  RowCase row;
  row.params.temperature = temperature;
  row.params.top_k = top_k;
  row.params.top_p = top_p;
  row.params.min_p = min_p;
  row.params.seed = seed;
  row.params.counter = counter;
  return row;
}

}  // namespace

ONEPASS_OP_CASES(sample) {
  // (rows, vocabulary, logit range): small rows, warp and block edges, 32k and 128k
  // vocabularies, peaked and flat distributions.
  struct Shape {
    int64_t rows, cols;
    float range;
  };
  const Shape shapes[] = {{1, 1, 1.0f},      {5, 7, 3.0f},       {16, 333, 10.0f},  {8, 4097, 2.0f},
                          {64, 1000, 20.0f}, {3, 32001, 10.0f},  {2, 128256, 12.0f}, {1, 128256, 0.5f},
                          {64, 2048, 8.0f},  {12, 128256, 30.0f}, {64, 128256, 15.0f}};
  for (const Shape sh : shapes) {
    cases.push_back({cat("sample/random_", sh.rows, "x", sh.cols, "_range", sh.range), [=](OpContext& c) {
      const TensorView logits = c.random_input(DType::f32, {sh.rows, sh.cols}, -sh.range, sh.range);
      run_and_compare(c, logits, random_rows(c, sh.rows, sh.cols, sh.cols > 1 ? 48 : 0));
    }});
  }
  cases.push_back({"sample/strided_9x777", [](OpContext& c) {
    const TensorView logits = c.random_input_strided(DType::f32, {9, 777}, 13, -5.0f, 5.0f);
    run_and_compare(c, logits, random_rows(c, 9, 777, 16));
  }});
  // Penalty lists of the most entries a row may hold.
  cases.push_back({"sample/penalties_512", [](OpContext& c) {
    const TensorView logits = c.random_input(DType::f32, {4, 5000}, -4.0f, 4.0f);
    std::vector<RowCase> rows = random_rows(c, 4, 5000, 0);
    for (RowCase& r : rows) {
      for (int64_t i = 0; i < ops::kSampleMaxPenalties; ++i) {
        r.penalties.push_back({static_cast<int32_t>((i * 7919) % 5000), static_cast<int32_t>(1 + i % 3)});
      }
      r.params.penalty_count = static_cast<int32_t>(ops::kSampleMaxPenalties);
      r.params.repeat_penalty = 1.5f;
      r.params.frequency_penalty = 0.1f;
    }
    run_and_compare(c, logits, rows);
  }});
  // Ties everywhere: logits on a grid of 6 values, so cuts and draws fall among equal
  // values and the lower index must come first.
  for (const int64_t cols : {int64_t{37}, int64_t{4096}, int64_t{128256}}) {
    cases.push_back({cat("sample/ties_", cols), [=](OpContext& c) {
      const int64_t n = 24;
      std::vector<float> values(static_cast<size_t>(n * cols));
      for (float& v : values) v = static_cast<float>(c.rng()() % 6) * 0.5f - 1.0f;
      const TensorView logits = c.input_from(DType::f32, {n, cols}, values);
      std::vector<RowCase> rows = random_rows(c, n, cols, 8);
      rows[0] = sampled(1.0f, 40, 1.0f, 0.0f, c.rng()(), 0);  // top-k inside a run of equal values
      rows[1] = sampled(1.0f, 0, 0.3f, 0.0f, c.rng()(), 1);
      rows[2] = sampled(0.5f, 0, 1.0f, 0.9f, c.rng()(), 2);
      rows[3] = sampled(0.0f, 0, 1.0f, 0.0f, c.rng()(), 3);   // greedy: the first of the largest
      run_and_compare(c, logits, rows);
    }});
  }
  // A flat row: every token equally likely; top-k 40 keeps the 40 lowest indices.
  cases.push_back({"sample/flat_top_k", [](OpContext& c) {
    const int64_t cols = 128256;
    const TensorView logits = c.input_from(DType::f32, {8, cols}, std::vector<float>(static_cast<size_t>(8 * cols), 0.25f));
    std::vector<RowCase> rows;
    for (uint64_t i = 0; i < 8; ++i) rows.push_back(sampled(1.0f, i < 4 ? 40 : 0, 1.0f, 0.0f, c.rng()(), i));
    run_and_compare(c, logits, rows);
  }});
  // NaN, -inf and +inf: NaNs are never drawn, -inf weigh nothing, +inf or no finite value
  // makes the row greedy.
  for (const int64_t cols : {int64_t{45}, int64_t{40000}}) {
    cases.push_back({cat("sample/nan_inf_", cols), [=](OpContext& c) {
      const int64_t n = 10;
      std::vector<float> values(static_cast<size_t>(n * cols));
      std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
      for (float& v : values) v = uniform(c.rng());
      auto row = [&](int64_t r) { return values.begin() + r * cols; };
      for (int64_t i = 0; i < cols; i += 3) row(0)[i] = kNan;      // a third NaN
      for (int64_t i = 1; i < cols; i += 2) row(1)[i] = -kInf;     // half -inf
      std::fill(row(2), row(2) + cols, kNan);                      // all NaN: 0
      std::fill(row(3), row(3) + cols, -kInf);                     // all -inf: 0
      row(4)[cols / 2] = kInf;                                     // +inf: that token
      row(5)[cols - 1] = kInf;
      row(5)[7] = kInf;                                            // two +inf: the first
      std::fill(row(6), row(6) + cols, -kInf);
      row(6)[cols - 2] = -1.0f;                                    // one finite value
      std::fill(row(7), row(7) + cols, kNan);
      row(7)[3] = -kInf;                                           // only -inf and NaN
      for (int64_t i = 0; i < cols; ++i) row(8)[i] = i % 2 ? -1.0f : kNan;  // NaNs and a -0 / +0 tie
      row(8)[1] = -0.0f;
      row(8)[5] = 0.0f;
      row(9)[4] = row(9)[cols - 3] = row(9)[cols / 2] = 5.0f;
      const TensorView logits = c.input_from(DType::f32, {n, cols}, values);
      std::vector<RowCase> rows;
      for (int64_t r = 0; r < n; ++r) rows.push_back(sampled(1.0f, r % 3 == 0 ? 0 : 40, r % 2 ? 0.9f : 1.0f, 0.0f, c.rng()(), static_cast<uint64_t>(r)));
      rows[8] = sampled(1.0f, 2, 1.0f, 0.0f, c.rng()(), 8);
      rows[9] = sampled(1e-45f, 0, 1.0f, 0.0f, c.rng()(), 9);  // 1 / temperature overflows: the tied maxima

      run_and_compare(c, logits, rows);
    }});
  }
  // The max in the columns of each of 32 warps of a 1024-wide block (column 32 w + j), in
  // rows of mixed signs and rows of negative values only: greedy rows, top-k 1, min-p 1
  // (only the max kept) and a plain draw must each see every warp's share of the row.
  cases.push_back({"sample/max_in_every_warp", [](OpContext& c) {
    const int64_t cols = 1024;
    const int64_t n = 128;
    std::vector<float> values(static_cast<size_t>(n * cols));
    for (int64_t r = 0; r < n; ++r) {
      const bool negative = r % 2 == 1;
      std::uniform_real_distribution<float> uniform(negative ? -9.0f : -4.0f, negative ? -2.0f : 4.0f);
      float* row = values.data() + r * cols;
      for (int64_t i = 0; i < cols; ++i) row[i] = uniform(c.rng());
      row[(r % 32) * 32 + static_cast<int64_t>(c.rng()() % 32)] = negative ? -0.5f : 9.0f;
    }
    const TensorView logits = c.input_from(DType::f32, {n, cols}, values);
    std::vector<RowCase> rows;
    for (int64_t r = 0; r < n; ++r) {
      const uint64_t seed = c.rng()();
      switch (r / 32) {
        case 0: rows.push_back(sampled(0.0f, 0, 1.0f, 0.0f, seed, 0)); break;
        case 1: rows.push_back(sampled(1.0f, 1, 1.0f, 0.0f, seed, 0)); break;
        case 2: rows.push_back(sampled(0.8f, 0, 1.0f, 1.0f, seed, 0)); break;
        default: rows.push_back(sampled(1.0f, 0, 1.0f, 0.0f, seed, static_cast<uint64_t>(r))); break;
      }
    }
    run_and_compare(c, logits, rows);
  }});
  // The host sampler draws what the op draws (first draws of their seeds).
  cases.push_back({"sample/matches_host_sampler", [](OpContext& c) {
    const TensorView logits = c.random_input(DType::f32, {64, 5000}, -8.0f, 8.0f);
    std::vector<RowCase> rows = random_rows(c, 64, 5000, 24);
    for (RowCase& r : rows) {
      r.params.counter = 0;
      if (r.params.top_p < 1e-6f) r.params.top_p = 1e-6f;  // the sampler's range
      if (r.params.repeat_penalty <= 0.0f) r.params.repeat_penalty = 1.0f;
    }
    run_and_compare(c, logits, rows, /*host_sampler=*/true);
  }});
  // Top-p edge values on one row: tiny (the most likely token), just below 1, and 1.
  cases.push_back({"sample/top_p_edges", [](OpContext& c) {
    const TensorView logits = c.random_input(DType::f32, {1, 50000}, -6.0f, 6.0f);
    const std::vector<double>& x = c.host(logits);
    std::vector<RowCase> rows;
    for (const float top_p : {1e-9f, 1e-3f, 0.5f, 0.999999f, 1.0f}) {
      rows.push_back(sampled(0.8f, 0, top_p, 0.0f, c.rng()(), rows.size()));
    }
    const TensorView five = c.input_from(DType::f32, {5, 50000}, [&] {
      std::vector<float> v;
      for (int i = 0; i < 5; ++i) v.insert(v.end(), x.begin(), x.end());
      return v;
    }());
    run_and_compare(c, five, rows);
  }});
}

// Seeds and counters: the same (seed, counter) gives the same u, and u spreads over [0, 1).
TEST(SampleRandom, CounterBasedUniform) {
  EXPECT_EQ(ops::sample_uniform(7, 3), ops::sample_uniform(7, 3));
  EXPECT_NE(ops::sample_uniform(7, 3), ops::sample_uniform(7, 4));
  EXPECT_NE(ops::sample_uniform(7, 3), ops::sample_uniform(8, 3));
  double sum = 0.0;
  int below_tenth = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = ops::sample_uniform(12345, static_cast<uint64_t>(i));
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    below_tenth += u < 0.1;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  EXPECT_NEAR(below_tenth / static_cast<double>(n), 0.1, 0.005);
}

TEST(SampleValidation, RejectsBadArguments) {
  const int64_t bytes = sizeof(ops::SampleParams);
  expect_op_error("sample", [&](GraphSession& s, Backend& b) {  // f16 logits
    ops::sample(s, b.alloc_tensor(DType::f16, {2, 10}), b.alloc_tensor(DType::u8, {2, bytes}), TensorView{},
                b.alloc_tensor(DType::i32, {2}));
  });
  expect_op_error("sample", [&](GraphSession& s, Backend& b) {  // params of one row for two
    ops::sample(s, b.alloc_tensor(DType::f32, {2, 10}), b.alloc_tensor(DType::u8, {1, bytes}), TensorView{},
                b.alloc_tensor(DType::i32, {2}));
  });
  expect_op_error("sample", [&](GraphSession& s, Backend& b) {  // out too short
    ops::sample(s, b.alloc_tensor(DType::f32, {2, 10}), b.alloc_tensor(DType::u8, {2, bytes}), TensorView{},
                b.alloc_tensor(DType::i32, {1}));
  });
  expect_op_error("sample", [&](GraphSession& s, Backend& b) {  // odd penalty row
    ops::sample(s, b.alloc_tensor(DType::f32, {2, 10}), b.alloc_tensor(DType::u8, {2, bytes}),
                b.alloc_tensor(DType::i32, {2, 3}), b.alloc_tensor(DType::i32, {2}));
  });
  expect_op_error("sample", [&](GraphSession& s, Backend& b) {  // too many penalties
    ops::sample(s, b.alloc_tensor(DType::f32, {2, 10}), b.alloc_tensor(DType::u8, {2, bytes}),
                b.alloc_tensor(DType::i32, {2, 2 * (ops::kSampleMaxPenalties + 1)}), b.alloc_tensor(DType::i32, {2}));
  });
}

}  // namespace onepass::testing
