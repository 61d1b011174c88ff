// Op cases: matmul_id (expert-routed matmul): both paths (one token: matrix-vector; more:
// grouped by expert through scratch), shared and per-slot inputs, and ids outside
// [0, E), which must give exact zeros. Reference and tolerance as in cases_matmul.cpp.
#include <climits>
#include <cmath>

#include "onepass/ops/ops.h"
#include "onepass/ops/matmul_id.h"
#include "onepass/ops/quant.h"
#include "ops/quant_cases.h"
#include "support/op_harness.h"

namespace onepass::testing {

namespace {

constexpr int32_t kExperts = 8;

void add_case(std::vector<OpCase>& cases, DType t, int64_t tokens, int64_t slots, bool per_slot,
              std::vector<int32_t> fixed_ids, const std::string& suffix) {
  const int64_t n = 33;
  const int64_t k = dtype_block_elems(t) == 1 ? 45 : 2 * dtype_block_elems(t);
  cases.push_back({cat("matmul_id/", dtype_name(t), "/t", tokens, "_s", slots,
                       per_slot ? "_perslot" : "_shared", suffix),
                   [=](OpContext& c) {
    std::vector<int32_t> ids = fixed_ids;
    if (ids.empty()) {
      for (int64_t p = 0; p < tokens * slots; ++p) ids.push_back(static_cast<int32_t>(c.rng()() % kExperts));
      // One id out of range (alternately past the end and negative) where there is room.
      if (tokens * slots > 1) ids.back() = (tokens + slots) % 2 ? kExperts : -1;
    }
    TensorView id_tensor = c.input_i32({tokens, slots}, ids);
    TensorView x = per_slot ? c.random_input(DType::f32, {tokens, slots, k})
                            : c.random_input_strided(DType::f32, {tokens, k}, 3);
    std::vector<double> w_values, offsets;
    TensorView w = quant_cases::weight_input(c, t, {kExperts, n, k}, w_values, offsets, false);
    TensorView out = c.output(DType::f32, {tokens, slots, n});
    const BufferView scratch = c.scratch(ops::matmul_id_scratch_bytes(tokens, slots, kExperts));
    ops::MatmulIdParams params;
    params.n_experts = kExperts;
    params.slots = static_cast<int32_t>(slots);
    params.per_slot_input = per_slot;
    ops::matmul_id(c.session(), x, w, id_tensor, out, scratch, params);
    c.run();

    std::vector<double> ref(static_cast<size_t>(tokens * slots * n), 0.0);
    double atol = 0;
    for (int64_t p = 0; p < tokens * slots; ++p) {
      const int32_t e = ids[static_cast<size_t>(p)];
      if (e < 0 || e >= kExperts) continue;
      const int64_t x_row = per_slot ? p : p / slots;
      const auto xs = c.host(x).begin() + x_row * k;
      const auto ws = w_values.begin() + e * n * k;
      const auto os = offsets.begin() + e * n * k;
      double row_atol = 0;
      const std::vector<double> r = quant_cases::matmul_reference(
          {xs, xs + k}, {ws, ws + n * k}, {os, os + n * k}, 1, n, k, row_atol);
      std::copy(r.begin(), r.end(), ref.begin() + p * n);
      atol = std::max(atol, row_atol);
    }
    c.expect_near(out, ref, Tolerance{atol, 0.0});
    const std::vector<float> got = download_floats(out);
    for (int64_t p = 0; p < tokens * slots; ++p) {
      const int32_t e = ids[static_cast<size_t>(p)];
      if (e >= 0 && e < kExperts) continue;
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_EQ(got[static_cast<size_t>(p * n + j)], 0.0f) << "pair " << p << " has id " << e;
      }
    }
  }});
}

}  // namespace

ONEPASS_OP_CASES(matmul_id) {
  for (DType t : quant_cases::weight_types()) {
    for (int64_t tokens : {1, 5}) {
      for (int64_t slots : {1, 2, 4}) {
        for (bool per_slot : {false, true}) add_case(cases, t, tokens, slots, per_slot, {}, "");
      }
    }
  }
  // Nothing but invalid ids, on both paths; and every pair on one expert.
  const std::vector<int32_t> invalid = {-1, kExperts, INT_MAX, INT_MIN, kExperts + 1, -7};
  add_case(cases, DType::q4_0, 3, 2, false, invalid, "_all_invalid");
  add_case(cases, DType::q4_k, 1, 2, true, {INT_MIN, kExperts}, "_all_invalid");
  add_case(cases, DType::q8_0, 4, 2, true, std::vector<int32_t>(8, 5), "_one_expert");

  cases.push_back({"matmul_id/errors", [](OpContext& c) {
    std::vector<double> values, offsets;
    TensorView w = quant_cases::weight_input(c, DType::q4_0, {4, 8, 64}, values, offsets, false);
    TensorView x = c.random_input(DType::f32, {5, 64});
    TensorView ids = c.input_i32({5, 2}, std::vector<int32_t>(10, 0));
    TensorView out = c.output(DType::f32, {5, 2, 8});
    ops::MatmulIdParams params;
    params.n_experts = 4;
    params.slots = 2;
    // Scratch too small for the grouped path.
    EXPECT_THROW(ops::matmul_id(c.session(), x, w, ids, out, c.scratch(8), params), Error);
    // Expert count that does not match w.
    params.n_experts = 5;
    const BufferView scratch = c.scratch(ops::matmul_id_scratch_bytes(5, 2, 5));
    EXPECT_THROW(ops::matmul_id(c.session(), x, w, ids, out, scratch, params), Error);
    // Per-slot input with a shared-input shape.
    params.n_experts = 4;
    params.per_slot_input = true;
    EXPECT_THROW(ops::matmul_id(c.session(), x, w, ids, out, scratch, params), Error);
    c.run();
  }});
}

}  // namespace onepass::testing
