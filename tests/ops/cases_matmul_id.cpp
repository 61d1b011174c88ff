// Op cases: matmul_id (expert-routed matmul): both paths (one token: matrix-vector; more:
// grouped by expert through scratch), shared and per-slot inputs, and ids outside
// [0, E), which must give exact zeros. Reference and tolerance as in cases_matmul.cpp
// (int8 x for one token on CUDA, the tensor cores' input rounding for more).
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

// The model shape's sizes: experts, output columns and K (0: the small defaults).
struct Sizes {
  int32_t experts = kExperts;
  int64_t n = 33;
  int64_t k = 0;
};

void add_case(std::vector<OpCase>& cases, DType t, int64_t tokens, int64_t slots, bool per_slot,
              std::vector<int32_t> fixed_ids, const std::string& suffix, Sizes sizes = {}) {
  const int32_t experts = sizes.experts;
  const int64_t n = sizes.n;
  const int64_t k = sizes.k > 0 ? sizes.k : dtype_block_elems(t) == 1 ? 45 : 2 * dtype_block_elems(t);
  cases.push_back({cat("matmul_id/", dtype_name(t), "/t", tokens, "_s", slots,
                       per_slot ? "_perslot" : "_shared", suffix),
                   [=](OpContext& c) {
    std::vector<int32_t> ids = fixed_ids;
    if (ids.empty()) {
      for (int64_t p = 0; p < tokens * slots; ++p) ids.push_back(static_cast<int32_t>(c.rng()() % experts));
      // One id out of range (alternately past the end and negative) where there is room.
      if (tokens * slots > 1) ids.back() = (tokens + slots) % 2 ? experts : -1;
    }
    TensorView id_tensor = c.input_i32({tokens, slots}, ids);
    TensorView x = per_slot ? c.random_input(DType::f32, {tokens, slots, k})
                            : c.random_input_strided(DType::f32, {tokens, k}, 3);
    std::vector<double> w_values, offsets;
    TensorView w = quant_cases::weight_input(c, t, {experts, n, k}, w_values, offsets, false);
    TensorView out = c.output(DType::f32, {tokens, slots, n});
    const BufferView scratch = c.scratch(ops::matmul_id_scratch_bytes(tokens, slots, experts));
    ops::MatmulIdParams params;
    params.n_experts = experts;
    params.slots = static_cast<int32_t>(slots);
    params.per_slot_input = per_slot;
    ops::matmul_id(c.session(), x, w, id_tensor, out, scratch, params);
    c.run();

    std::vector<double> ref(static_cast<size_t>(tokens * slots * n), 0.0);
    double atol = 0;
    // One token on CUDA with block-format weights: x quantized to int8 (mv_id_x8).
    const bool cuda = c.backend().kind() == BackendKind::cuda;
    // One token on CUDA with block formats: the decode kernel's 8-bit x blocks (the CPU's
    // expert products keep f32 x).
    const quant_cases::XRounding x_rounding = cuda && dtype_is_quantized(t) && tokens <= ops::kMatmulIdMvMaxTokens
                                                  ? quant_cases::kXInt8PerBlock
                                                  : quant_cases::kXF32;
    // More tokens on CUDA with block formats, or more than the mv kernels' rows with f16 and
    // bf16: the tensor-core grouped product (mm_id_tc), whose input rounding is the dense
    // tensor-core kernels' (cases_matmul.cpp).
    double input_rounding = 0;
    if (cuda && tokens > ops::kMatmulIdMvMaxTokens && t != DType::f32 &&
        (dtype_is_quantized(t) || tokens > ops::kMatmulMvMaxRows)) {
      input_rounding = (t == DType::bf16 ? 0x1p-8 : 0x1p-11) + (dtype_is_quantized(t) ? 0x1p-11 : 0.0);
    }
    for (int64_t p = 0; p < tokens * slots; ++p) {
      const int32_t e = ids[static_cast<size_t>(p)];
      if (e < 0 || e >= experts) continue;
      const int64_t x_row = per_slot ? p : p / slots;
      const auto xs = c.host(x).begin() + x_row * k;
      const auto ws = w_values.begin() + e * n * k;
      const auto os = offsets.begin() + e * n * k;
      double row_atol = 0;
      const std::vector<double> r = quant_cases::matmul_reference(
          {xs, xs + k}, {ws, ws + n * k}, {os, os + n * k}, 1, n, k, row_atol, x_rounding, input_rounding);
      std::copy(r.begin(), r.end(), ref.begin() + p * n);
      atol = std::max(atol, row_atol);
    }
    c.expect_near(out, ref, Tolerance{atol, 0.0});
    const std::vector<float> got = download_floats(out);
    for (int64_t p = 0; p < tokens * slots; ++p) {
      const int32_t e = ids[static_cast<size_t>(p)];
      if (e >= 0 && e < experts) continue;
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
  // The MoE models' shapes: 128 experts, 8 slots; a 512-token prefill chunk (most experts
  // get many pairs, sorted by the parallel grouping) and a decode step with a long K (two
  // units per lane) and an odd column count (a warp's missing second row).
  for (bool per_slot : {false, true}) {
    add_case(cases, DType::q4_k, 512, 8, per_slot, {}, "_e128", Sizes{128, 33, 256});
  }
  // f16 and bf16 on the tensor cores (more tokens than the mv kernels' rows), K = 45.
  for (DType t : {DType::f16, DType::bf16}) add_case(cases, t, 37, 8, true, {}, "_e128", Sizes{128, 33, 0});
  // More experts than the CUDA grouping keeps counts for in shared memory (1024).
  add_case(cases, DType::q8_0, 40, 8, false, {}, "_e1100", Sizes{1100, 8, 0});
  for (DType t : {DType::q4_k, DType::q6_k, DType::q8_0, DType::q4_0}) {
    add_case(cases, t, 37, 8, true, {}, "_e128", Sizes{128, 33, 256});
    for (bool per_slot : {false, true}) add_case(cases, t, 1, 8, per_slot, {}, "_e128_k2048", Sizes{128, 37, 2048});
  }
  // LlamaMoe.GpuMatchesCpu's shapes: 16 experts, 4 slots, K = N = 256 (gate and up with x
  // shared by the slots, down per slot), prefill chunks of 8 and 4 tokens and a decode
  // step; random ids, and the ids its separated routers give (every token on experts
  // 15, 14, 13, 12 or 0, 1, 2, 3, so an expert holds at most one pair per token).
  for (DType t : {DType::q8_0, DType::q4_k}) {
    for (int64_t tokens : {8, 4, 1}) {
      std::vector<int32_t> split;
      for (int64_t i = 0; i < tokens; ++i) {
        for (int32_t s = 0; s < 4; ++s) split.push_back((i * 7 + 3) % 5 < 2 ? s : 15 - s);
      }
      for (bool per_slot : {false, true}) {
        add_case(cases, t, tokens, 4, per_slot, {}, "_llamamoe", Sizes{16, 256, 256});
        add_case(cases, t, tokens, 4, per_slot, split, "_llamamoe_split", Sizes{16, 256, 256});
      }
    }
  }

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
