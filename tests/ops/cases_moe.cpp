// Op cases: moe_route (random routers of real MoE shapes, explicit ties, NaN and infinite
// logits, both weightings) and moe_combine, against a float64 reference.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "onepass/ops/moe.h"
#include "support/op_harness.h"

namespace onepass::testing {
namespace {

struct Routes {
  std::vector<int32_t> ids;
  std::vector<double> weights;
};

// The `slots` largest logits of each row, descending, ties to the lower index, NaN last;
// weights by softmax over the chosen (selected) or over all experts, in float64.
Routes route_reference(const std::vector<double>& logits, int64_t tokens, int64_t experts, int64_t slots,
                       ops::MoeWeighting weighting) {
  Routes r;
  for (int64_t t = 0; t < tokens; ++t) {
    const double* l = logits.data() + t * experts;
    std::vector<int64_t> order(static_cast<size_t>(experts));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      if (std::isnan(l[a])) return false;
      if (std::isnan(l[b])) return true;
      return l[a] > l[b];
    });
    const double max = l[order[0]];
    double sum = 0.0;
    if (weighting == ops::MoeWeighting::softmax_all) {
      for (int64_t e = 0; e < experts; ++e) sum += std::exp(l[e] - max);
    } else {
      for (int64_t s = 0; s < slots; ++s) sum += std::exp(l[order[static_cast<size_t>(s)]] - max);
    }
    for (int64_t s = 0; s < slots; ++s) {
      const int64_t e = order[static_cast<size_t>(s)];
      r.ids.push_back(static_cast<int32_t>(e));
      r.weights.push_back(std::exp(l[e] - max) / sum);
    }
  }
  return r;
}

const char* weighting_name(ops::MoeWeighting w) {
  return w == ops::MoeWeighting::softmax_all ? "softmax_all" : "softmax_selected";
}

void expect_routes(OpContext& c, const TensorView& logits, int64_t tokens, int64_t experts, int64_t slots,
                   ops::MoeWeighting weighting) {
  TensorView ids = c.output(DType::i32, {tokens, slots});
  TensorView weights = c.output(DType::f32, {tokens, slots});
  ops::moe_route(c.session(), logits, ids, weights, weighting);
  c.run();
  const Routes want = route_reference(c.host(logits), tokens, experts, slots, weighting);
  c.expect_i32(ids, want.ids);
  c.expect_near(weights, want.weights, tolerance(DType::f32, 1e-5, 1e-7));
}

}  // namespace

ONEPASS_OP_CASES(moe) {
  constexpr ops::MoeWeighting kWeightings[] = {ops::MoeWeighting::softmax_selected, ops::MoeWeighting::softmax_all};
  // (tokens, experts, slots): Mixtral 8/2, OLMoE 64/8, Qwen3-MoE 128/8, odd sizes, the limits.
  const std::vector<std::array<int64_t, 3>> shapes = {{1, 8, 2},   {7, 8, 2},   {1, 64, 8},  {33, 64, 8},
                                                       {1, 128, 8}, {5, 128, 8}, {3, 61, 5},  {2, 37, 37},
                                                       {4, 1024, 64}, {2, 1, 1}};
  for (const ops::MoeWeighting w : kWeightings) {
    for (const auto& [tokens, experts, slots] : shapes) {
      cases.push_back({cat("moe_route/", weighting_name(w), "/", tokens, "x", experts, "_top", slots), [=](OpContext& c) {
        TensorView logits = c.random_input(DType::f32, {tokens, experts}, -4.0f, 4.0f);
        expect_routes(c, logits, tokens, experts, slots, w);
      }});
    }
    cases.push_back({cat("moe_route/", weighting_name(w), "/strided"), [=](OpContext& c) {
      TensorView logits = c.random_input_strided(DType::f32, {6, 40}, 3, -4.0f, 4.0f);
      expect_routes(c, logits, 6, 40, 4, w);
    }});
    // Ties go to the lower expert index; NaN is never chosen before a number; infinities.
    cases.push_back({cat("moe_route/", weighting_name(w), "/ties_nan_inf"), [=](OpContext& c) {
      constexpr int64_t kExperts = 40;  // more than a warp: lanes hold two experts each
      constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
      constexpr float kInf = std::numeric_limits<float>::infinity();
      std::vector<std::vector<float>> rows;
      auto row = [&](float fill) { return std::vector<float>(kExperts, fill); };
      rows.push_back(row(0.25f));  // all equal: 0, 1, 2
      rows.push_back(row(-1.0f));  // ties at 33, 7, 39 and 2: 7, 33, 39
      rows.back()[33] = rows.back()[7] = rows.back()[39] = 2.0f;
      rows.back()[2] = 1.5f;
      rows.push_back(row(0.0f));   // NaN at 0 and 5, the max at 31: 31, then 1, 2
      rows.back()[0] = rows.back()[5] = kNan;
      rows.back()[31] = 1.0f;
      rows.push_back(row(kNan));   // NaN but two numbers: 12, 3, then the first NaN (0)
      rows.back()[3] = -5.0f;
      rows.back()[12] = 0.0f;
      rows.push_back(row(-kInf));  // -inf but one number at 20: 20, 0, 1 (weights 1, 0, 0)
      rows.back()[20] = 3.0f;
      const std::vector<int32_t> want_ids = {0, 1, 2, 7, 33, 39, 31, 1, 2, 12, 3, 0, 20, 0, 1};
      std::vector<float> values;
      for (const auto& r : rows) values.insert(values.end(), r.begin(), r.end());
      TensorView logits = c.input_from(DType::f32, {5, kExperts}, values);
      TensorView ids = c.output(DType::i32, {5, 3});
      TensorView weights = c.output(DType::f32, {5, 3});
      ops::moe_route(c.session(), logits, ids, weights, w);
      c.run();
      ASSERT_EQ(route_reference(c.host(logits), 5, kExperts, 3, w).ids, want_ids);  // the reference agrees
      c.expect_i32(ids, want_ids);
      // A NaN among the logits a weight is computed from makes it NaN (row 3 picks a NaN
      // third; softmax_all also sums row 2's NaNs); every other weight matches.
      const Routes ref = route_reference(c.host(logits), 5, kExperts, 3, w);
      std::vector<float> got(ref.weights.size());
      c.backend().copy_to_host(got.data(), weights.data(), got.size() * sizeof(float));
      for (size_t i = 0; i < got.size(); ++i) {
        if (std::isnan(ref.weights[i])) {
          EXPECT_TRUE(std::isnan(got[i])) << "weight " << i << " is " << got[i] << ", expected NaN";
        } else {
          EXPECT_NEAR(got[i], ref.weights[i], 1e-6) << "weight " << i;
        }
      }
    }});
  }
  // moe_combine: out[t] = sum_s w[t, s] * y[t, s].
  const std::vector<std::array<int64_t, 3>> combine_shapes = {{1, 2, 4096}, {9, 2, 333}, {1, 8, 2048},
                                                               {17, 8, 768}, {3, 1, 100}, {2, 64, 300}};
  for (const auto& [tokens, slots, n] : combine_shapes) {
    cases.push_back({cat("moe_combine/", tokens, "x", slots, "x", n), [=](OpContext& c) {
      TensorView y = c.random_input(DType::f32, {tokens, slots, n}, -2.0f, 2.0f);
      TensorView w = c.random_input(DType::f32, {tokens, slots}, 0.0f, 1.0f);
      TensorView out = c.output(DType::f32, {tokens, n});
      ops::moe_combine(c.session(), y, w, out);
      c.run();
      const std::vector<double>& hy = c.host(y);
      const std::vector<double>& hw = c.host(w);
      std::vector<double> want(static_cast<size_t>(tokens * n), 0.0);
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t s = 0; s < slots; ++s) {
          for (int64_t i = 0; i < n; ++i) want[t * n + i] += hw[t * slots + s] * hy[(t * slots + s) * n + i];
        }
      }
      // f32 sums of `slots` products in order (a backend may contract them into FMAs):
      // the absolute error grows with the number of terms.
      c.expect_near(out, want, tolerance(DType::f32, 1e-5, 1e-6 * static_cast<double>(slots)));
    }});
  }
}

}  // namespace onepass::testing
