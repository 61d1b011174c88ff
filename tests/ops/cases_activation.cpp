// Op cases: gelu (tanh form), silu, silu_mul, gelu_mul, softcap.
#include <cmath>
#include <numbers>

#include "support/op_harness.h"

namespace onepass::testing {
namespace {

// One element, one row, odd sizes, a size past the CPU block (4096) and many short rows.
const std::vector<std::pair<int64_t, int64_t>> kActivationShapes = {
    {1, 1}, {1, 333}, {7, 333}, {3, 4097}, {130, 31}};

double gelu_ref(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
double silu_ref(double x) { return x / (1.0 + std::exp(-x)); }

// f32: tanh/exp cost a few ulp (rtol 1e-5); for gelu's negative tail 1 + tanh cancels, so
// the error is absolute, about |x| * 2^-24 (atol 2e-6 for |x| <= 8). f16/bf16: the
// storage rounding of the result (tolerance()).
Tolerance activation_tolerance(DType t) { return tolerance(t, 1e-5, 2e-6); }

enum class Unary { gelu, silu, softcap };
constexpr float kCap = 30.0f;

void run_unary(OpContext& c, Unary op, DType t, int64_t rows, int64_t cols, int64_t pad) {
  // gelu/silu: [-8, 8] covers both tails; softcap: well past the cap on both sides.
  const float range = op == Unary::softcap ? 100.0f : 8.0f;
  TensorView x = c.random_input_strided(t, {rows, cols}, pad, -range, range);
  TensorView out = c.output(t, {rows, cols});
  switch (op) {
    case Unary::gelu: ops::gelu(c.session(), x, out); break;
    case Unary::silu: ops::silu(c.session(), x, out); break;
    case Unary::softcap: ops::softcap(c.session(), x, kCap, out); break;
  }
  c.run();
  std::vector<double> ref = c.host(x);
  for (double& v : ref) {
    switch (op) {
      case Unary::gelu: v = gelu_ref(v); break;
      case Unary::silu: v = silu_ref(v); break;
      case Unary::softcap: v = std::tanh(v / kCap) * kCap; break;
    }
  }
  c.expect_near(out, ref, activation_tolerance(t));
}

void run_gated_mul(OpContext& c, bool gelu, DType t, int64_t rows, int64_t cols, int64_t pad) {
  TensorView a = c.random_input_strided(t, {rows, cols}, pad, -8.0f, 8.0f);
  TensorView b = c.random_input(t, {rows, cols}, -2.0f, 2.0f);
  TensorView out = c.output(t, {rows, cols});
  if (gelu) {
    ops::gelu_mul(c.session(), a, b, out);
  } else {
    ops::silu_mul(c.session(), a, b, out);
  }
  c.run();
  std::vector<double> ref(c.host(a).size());
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = (gelu ? gelu_ref(c.host(a)[i]) : silu_ref(c.host(a)[i])) * c.host(b)[i];
  // One more f32 multiply than silu: the same tolerance holds.
  c.expect_near(out, ref, activation_tolerance(t));
}

}  // namespace

ONEPASS_OP_CASES(activation) {
  const std::pair<const char*, Unary> unaries[] = {
      {"gelu", Unary::gelu}, {"silu", Unary::silu}, {"softcap", Unary::softcap}};
  for (DType t : kFloatTypes) {
    for (auto [rows, cols] : kActivationShapes) {
      const std::string shape = cat(rows, "x", cols);
      for (auto [name, op] : unaries) {
        cases.push_back({cat(name, "/", dtype_name(t), "/", shape),
                         [=](OpContext& c) { run_unary(c, op, t, rows, cols, 0); }});
      }
      for (const bool gelu : {false, true}) {
        cases.push_back({cat(gelu ? "gelu_mul/" : "silu_mul/", dtype_name(t), "/", shape),
                         [=](OpContext& c) { run_gated_mul(c, gelu, t, rows, cols, 0); }});
      }
    }
    // Strided input rows (padding between rows), as a slice of a wider tensor would be.
    for (auto [name, op] : unaries) {
      cases.push_back({cat(name, "/", dtype_name(t), "/strided_9x77"),
                       [=](OpContext& c) { run_unary(c, op, t, 9, 77, 11); }});
    }
    for (const bool gelu : {false, true}) {
      cases.push_back({cat(gelu ? "gelu_mul/" : "silu_mul/", dtype_name(t), "/strided_9x77"),
                       [=](OpContext& c) { run_gated_mul(c, gelu, t, 9, 77, 11); }});
    }
  }
}

TEST(ActivationValidation, RejectsBadArguments) {
  expect_op_error("gelu", [](GraphSession& s, Backend& b) {
    ops::gelu(s, b.alloc_tensor(DType::f32, {4, 8}), b.alloc_tensor(DType::f16, {4, 8}));
  });
  expect_op_error("silu", [](GraphSession& s, Backend& b) {
    ops::silu(s, b.alloc_tensor(DType::f32, {4, 8}), b.alloc_tensor(DType::f32, {4, 9}));
  });
  expect_op_error("silu_mul", [](GraphSession& s, Backend& b) {
    ops::silu_mul(s, b.alloc_tensor(DType::f32, {4, 8}), b.alloc_tensor(DType::f32, {1, 8}),
               b.alloc_tensor(DType::f32, {4, 8}));
  });
  expect_op_error("softcap", [](GraphSession& s, Backend& b) {
    ops::softcap(s, b.alloc_tensor(DType::f32, {4, 8}), 0.0f, b.alloc_tensor(DType::f32, {4, 8}));
  });
}

}  // namespace onepass::testing
