// Op cases: softmax (plain, scaled, causal per row or per head of a score matrix).
#include <algorithm>
#include <cmath>
#include <limits>

#include "onepass/ops/ops.h"
#include "onepass/ops/softmax.h"
#include "support/op_harness.h"

namespace onepass::testing {
namespace {

std::vector<double> softmax_reference(const std::vector<double>& x, int64_t rows, int64_t cols,
                                      const ops::SoftmaxParams& p) {
  const int64_t queries = p.queries == 0 ? rows : p.queries;
  std::vector<double> out(x.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t limit = cols;
    if (p.causal) limit = std::clamp<int64_t>(r % queries + p.position_offset + 1, 0, cols);
    if (limit == 0) continue;  // fully masked: zeros
    double max = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < limit; ++c) max = std::max(max, x[r * cols + c] * p.scale);
    double sum = 0;
    for (int64_t c = 0; c < limit; ++c) sum += std::exp(x[r * cols + c] * p.scale - max);
    for (int64_t c = 0; c < limit; ++c) {
      out[r * cols + c] = std::exp(x[r * cols + c] * p.scale - max) / sum;
    }
  }
  return out;
}

// Outputs are probabilities, many far below 1, so the bound is relative. f32: the exp
// argument (|x * scale - max| <= 16) carries ~16 * 2^-24 absolute error, exp and the final
// multiply a few ulp, and the 8-lane (CPU) or tree (CUDA) sum of `cols` terms at most
// (cols / 8 + 8) roundings: rtol 1e-5 + (cols / 8 + 8) * 2^-24 * 2. f16 / bf16 add the
// half-ulp rounding of the stored result (2^-11, 2^-8); atol covers f16 subnormals.
Tolerance softmax_tolerance(DType t, int64_t cols) {
  const double f32 = 1e-5 + (static_cast<double>(cols) / 8.0 + 8.0) * std::ldexp(1.0, -23);
  switch (t) {
    case DType::f16: return {1e-7, f32 + 1e-3};
    case DType::bf16: return {1e-30, f32 + 8e-3};
    default: return {1e-30, f32};
  }
}

struct SoftmaxShape {
  int64_t rows;
  int64_t cols;
  ops::SoftmaxParams params;
  const char* name;
};

ops::SoftmaxParams make_params(float scale, bool causal, int32_t offset, int64_t queries) {
  ops::SoftmaxParams p;
  p.scale = scale;
  p.causal = causal;
  p.position_offset = offset;
  p.queries = queries;
  return p;
}

}  // namespace

ONEPASS_OP_CASES(softmax) {
  const std::vector<SoftmaxShape> shapes = {
      {1, 1, make_params(1.0f, false, 0, 0), "1x1"},
      {1, 333, make_params(1.0f, false, 0, 0), "1x333"},
      {7, 333, make_params(1.0f, false, 0, 0), "7x333"},
      {3, 4097, make_params(1.0f, false, 0, 0), "3x4097"},
      {130, 31, make_params(1.0f, false, 0, 0), "130x31"},
      {7, 333, make_params(0.125f, false, 0, 0), "7x333/scale"},
      {3, 4097, make_params(1.7f, false, 0, 0), "3x4097/scale"},
      // Square causal mask: row r sees columns 0..r.
      {33, 33, make_params(1.0f, true, 0, 0), "33x33/causal"},
      // Queries after 17 cached keys (prefill continuation), scaled.
      {33, 50, make_params(0.125f, true, 17, 0), "33x50/causal_offset17"},
      // Score matrix of 4 heads x 7 queries over 12 + 7 keys: the mask repeats per head.
      {28, 19, make_params(0.35f, true, 12, 7), "4x7x19/causal_heads"},
      // 3 heads x 5 queries over 300 keys, the last query seeing all of them.
      {15, 300, make_params(1.0f, true, 295, 5), "3x5x300/causal_heads"},
      // Negative offset: rows r % 3 == 0 and 1 see no column at all (zeros).
      {6, 10, make_params(1.0f, true, -2, 3), "2x3x10/fully_masked"},
  };
  for (DType t : kFloatTypes) {
    for (const SoftmaxShape& s : shapes) {
      cases.push_back({cat("softmax/", dtype_name(t), "/", s.name), [=](OpContext& c) {
        TensorView x = c.random_input(t, {s.rows, s.cols}, -8.0f, 8.0f);
        TensorView out = c.output(t, {s.rows, s.cols});
        ops::softmax(c.session(), x, out, s.params);
        c.run();
        c.expect_near(out, softmax_reference(c.host(x), s.rows, s.cols, s.params),
                      softmax_tolerance(t, s.cols));
      }});
    }
    cases.push_back({cat("softmax/", dtype_name(t), "/strided_9x77_causal"), [=](OpContext& c) {
      const ops::SoftmaxParams p = make_params(0.5f, true, 60, 9);
      TensorView x = c.random_input_strided(t, {9, 77}, 13, -8.0f, 8.0f);
      TensorView out = c.output(t, {9, 77});
      ops::softmax(c.session(), x, out, p);
      c.run();
      c.expect_near(out, softmax_reference(c.host(x), 9, 77, p), softmax_tolerance(t, 77));
    }});
  }
}

TEST(SoftmaxValidation, RejectsBadArguments) {
  expect_op_error("softmax", [](GraphSession& s, Backend& b) {
    ops::softmax(s, b.alloc_tensor(DType::f32, {6, 10}), b.alloc_tensor(DType::bf16, {6, 10}), {});
  });
  expect_op_error("softmax", [](GraphSession& s, Backend& b) {
    ops::SoftmaxParams p;
    p.causal = true;
    p.queries = 4;  // 6 rows are not a whole number of heads
    ops::softmax(s, b.alloc_tensor(DType::f32, {6, 10}), b.alloc_tensor(DType::f32, {6, 10}), p);
  });
  expect_op_error("softmax", [](GraphSession& s, Backend& b) {
    ops::SoftmaxParams p;
    p.scale = std::numeric_limits<float>::quiet_NaN();
    ops::softmax(s, b.alloc_tensor(DType::f32, {6, 10}), b.alloc_tensor(DType::f32, {6, 10}), p);
  });
}

}  // namespace onepass::testing
