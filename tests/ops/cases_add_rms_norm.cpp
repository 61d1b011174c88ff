// Op cases: add_rms_norm (residual add fused with the next RMS norm), including the
// in-place residual update (sum = a).
#include <cmath>

#include "support/op_harness.h"

namespace onepass::testing {
namespace {

struct AddNormReference {
  std::vector<double> sum;
  std::vector<double> out;
};

// sum is rounded to T before the norm, as the op specifies.
AddNormReference add_rms_norm_reference(DType t, const std::vector<double>& a,
                                        const std::vector<double>& b, const std::vector<double>& w,
                                        int64_t rows, int64_t cols, double eps) {
  AddNormReference ref;
  ref.sum.resize(a.size());
  for (size_t i = 0; i < a.size(); ++i) ref.sum[i] = a[i] + b[i];
  ref.sum = rounded(t, ref.sum);
  ref.out.resize(a.size());
  for (int64_t r = 0; r < rows; ++r) {
    double sq = 0;
    for (int64_t c = 0; c < cols; ++c) sq += ref.sum[r * cols + c] * ref.sum[r * cols + c];
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c) ref.out[r * cols + c] = ref.sum[r * cols + c] * inv * w[c];
  }
  return ref;
}

void run_add_rms_norm(OpContext& c, DType t, int64_t rows, int64_t cols, bool in_place,
                      int64_t pad) {
  TensorView a = c.random_input_strided(t, {rows, cols}, pad, -2.0f, 2.0f);
  TensorView b = c.random_input(t, {rows, cols}, -2.0f, 2.0f);
  TensorView w = c.random_input(DType::f32, {cols}, 0.5f, 1.5f);
  TensorView sum = in_place ? a : c.output(t, {rows, cols});
  TensorView out = c.output(t, {rows, cols});
  const AddNormReference ref =
      add_rms_norm_reference(t, c.host(a), c.host(b), c.host(w), rows, cols, 1e-5);
  ops::add_rms_norm(c.session(), a, b, sum, w, out, 1e-5f);
  c.run();
  // Bench mode replays the pass many times; in place, each replay adds b again.
  if (in_place && c.timing()) return;
  // The sum is one f32 add rounded to T: the reference rounding up to 1 ulp of T (a
  // double rounding through f32 can differ in the last place).
  c.expect_near(sum, ref.sum, tolerance(t, 1e-6), "sum");
  // As rms_norm: the norm of a row in f32 (tolerance() defaults).
  c.expect_near(out, ref.out, tolerance(t), "out");
}

}  // namespace

ONEPASS_OP_CASES(add_rms_norm) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1}, {1, 333}, {7, 333}, {3, 4097}, {64, 576}, {130, 31}};
  for (DType t : kFloatTypes) {
    for (auto [rows, cols] : shapes) {
      cases.push_back({cat("add_rms_norm/", dtype_name(t), "/", rows, "x", cols),
                       [=](OpContext& c) { run_add_rms_norm(c, t, rows, cols, false, 0); }});
    }
    cases.push_back({cat("add_rms_norm/", dtype_name(t), "/in_place_7x333"),
                     [=](OpContext& c) { run_add_rms_norm(c, t, 7, 333, true, 0); }});
    cases.push_back({cat("add_rms_norm/", dtype_name(t), "/strided_5x100"),
                     [=](OpContext& c) { run_add_rms_norm(c, t, 5, 100, false, 13); }});
  }
}

TEST(AddRmsNormValidation, RejectsBadArguments) {
  expect_op_error("add_rms_norm", [](GraphSession& s, Backend& b) {  // weight is f32
    TensorView x = b.alloc_tensor(DType::f16, {3, 10});
    ops::add_rms_norm(s, x, b.alloc_tensor(DType::f16, {3, 10}), b.alloc_tensor(DType::f16, {3, 10}),
                   b.alloc_tensor(DType::f16, {10}), b.alloc_tensor(DType::f16, {3, 10}), 1e-5f);
  });
  expect_op_error("add_rms_norm", [](GraphSession& s, Backend& b) {  // b has other rows
    ops::add_rms_norm(s, b.alloc_tensor(DType::f32, {3, 10}), b.alloc_tensor(DType::f32, {1, 10}),
                   b.alloc_tensor(DType::f32, {3, 10}), b.alloc_tensor(DType::f32, {10}),
                   b.alloc_tensor(DType::f32, {3, 10}), 1e-5f);
  });
  expect_op_error("add_rms_norm", [](GraphSession& s, Backend& b) {  // weight length
    ops::add_rms_norm(s, b.alloc_tensor(DType::f32, {3, 10}), b.alloc_tensor(DType::f32, {3, 10}),
                   b.alloc_tensor(DType::f32, {3, 10}), b.alloc_tensor(DType::f32, {9}),
                   b.alloc_tensor(DType::f32, {3, 10}), 1e-5f);
  });
}

// The fused kernel is a drop-in for add_<T> then rms_norm_<T> on the CPU: same bytes, so
// a fusion rule add + rms_norm -> add_rms_norm keeps optimised graphs bit-identical.
TEST(AddRmsNorm, MatchesUnfusedBitForBit) {
  auto backend = cpu_backend();
  for (DType t : kFloatTypes) {
    const Shape shape{9, 333};
    auto random = [&](DType type, Shape s, uint64_t seed) {
      TensorView view = backend->alloc_tensor(type, s);
      upload_floats(view, random_floats(static_cast<size_t>(s.numel()), seed, -2.0f, 2.0f));
      return view;
    };
    const TensorView a = random(t, shape, 1);
    const TensorView b = random(t, shape, 2);
    const TensorView w = random(DType::f32, {333}, 3);
    const TensorView sum_unfused = backend->alloc_tensor(t, shape);
    const TensorView out_unfused = backend->alloc_tensor(t, shape);
    const TensorView sum_fused = backend->alloc_tensor(t, shape);
    const TensorView out_fused = backend->alloc_tensor(t, shape);
    GraphExecutor executor(backend);
    GraphSession s = executor.begin();
    ops::add(s, a, b, sum_unfused);
    ops::rms_norm(s, sum_unfused, w, out_unfused, 1e-5f);
    ops::add_rms_norm(s, a, b, sum_fused, w, out_fused, 1e-5f);
    s.finish();
    EXPECT_EQ(sum_fused.view.read_as<uint8_t>(), sum_unfused.view.read_as<uint8_t>())
        << dtype_name(t);
    EXPECT_EQ(out_fused.view.read_as<uint8_t>(), out_unfused.view.read_as<uint8_t>())
        << dtype_name(t);
  }
}

}  // namespace onepass::testing
