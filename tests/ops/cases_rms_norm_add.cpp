// Op cases: rms_norm_add (a post-norm fused with the residual add after it, Gemma's
// x += rms_norm(proj) * w), into a fresh output and in place on the residual, against a
// float64 reference; and the fusion rule rms_norm -> add that emits it.
#include <cmath>

#include "onepass/exec/graph_session.h"
#include "support/op_harness.h"

namespace onepass::testing {
namespace {

// The normalised value is rounded to T before the add, as the op specifies.
std::vector<double> rms_norm_add_reference(DType t, const std::vector<double>& x,
                                           const std::vector<double>& w,
                                           const std::vector<double>& residual, int64_t rows,
                                           int64_t cols, double eps) {
  std::vector<double> normed(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double sq = 0;
    for (int64_t c = 0; c < cols; ++c) sq += x[r * cols + c] * x[r * cols + c];
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c) normed[r * cols + c] = x[r * cols + c] * inv * w[c];
  }
  normed = rounded(t, normed);
  for (size_t i = 0; i < normed.size(); ++i) normed[i] += residual[i];
  return normed;
}

void run_rms_norm_add(OpContext& c, DType t, int64_t rows, int64_t cols, bool in_place,
                      int64_t pad) {
  TensorView x = c.random_input_strided(t, {rows, cols}, pad, -2.0f, 2.0f);
  TensorView w = c.random_input(DType::f32, {cols}, 0.5f, 1.5f);
  TensorView residual = c.random_input(t, {rows, cols}, -4.0f, 4.0f);
  TensorView out = in_place ? residual : c.output(t, {rows, cols});
  const std::vector<double> want =
      rms_norm_add_reference(t, c.host(x), c.host(w), c.host(residual), rows, cols, 1e-5);
  ops::rms_norm_add(c.session(), x, w, residual, out, 1e-5f);
  c.run();
  // Bench mode replays the pass many times; in place, each replay adds again.
  if (in_place && c.timing()) return;
  // The norm in f32 rounded to T, then one add rounded to T: relative to the residual's
  // magnitude (4), the norm's f32 error plus an ulp of T.
  const Tolerance tol = tolerance(t);
  c.expect_near(out, want, Tolerance{tol.atol + 4 * tol.rtol, tol.rtol}, "out");
}

}  // namespace

ONEPASS_OP_CASES(rms_norm_add) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1}, {1, 640}, {7, 333}, {3, 4097}, {64, 576}, {130, 31}};
  for (DType t : kFloatTypes) {
    for (auto [rows, cols] : shapes) {
      cases.push_back({cat("rms_norm_add/", dtype_name(t), "/", rows, "x", cols),
                       [=](OpContext& c) { run_rms_norm_add(c, t, rows, cols, false, 0); }});
    }
    cases.push_back({cat("rms_norm_add/", dtype_name(t), "/in_place_7x333"),
                     [=](OpContext& c) { run_rms_norm_add(c, t, 7, 333, true, 0); }});
    cases.push_back({cat("rms_norm_add/", dtype_name(t), "/strided_5x100"),
                     [=](OpContext& c) { run_rms_norm_add(c, t, 5, 100, false, 13); }});
  }
}

TEST(RmsNormAddValidation, RejectsBadArguments) {
  expect_op_error("rms_norm_add", [](GraphSession& s, Backend& b) {  // weight is f32
    ops::rms_norm_add(s, b.alloc_tensor(DType::f16, {3, 10}), b.alloc_tensor(DType::f16, {10}),
                      b.alloc_tensor(DType::f16, {3, 10}), b.alloc_tensor(DType::f16, {3, 10}),
                      1e-5f);
  });
  expect_op_error("rms_norm_add", [](GraphSession& s, Backend& b) {  // residual of other rows
    ops::rms_norm_add(s, b.alloc_tensor(DType::f32, {3, 10}), b.alloc_tensor(DType::f32, {10}),
                      b.alloc_tensor(DType::f32, {1, 10}), b.alloc_tensor(DType::f32, {3, 10}),
                      1e-5f);
  });
  expect_op_error("rms_norm_add", [](GraphSession& s, Backend& b) {  // residual of another type
    ops::rms_norm_add(s, b.alloc_tensor(DType::f32, {3, 10}), b.alloc_tensor(DType::f32, {10}),
                      b.alloc_tensor(DType::f16, {3, 10}), b.alloc_tensor(DType::f32, {3, 10}),
                      1e-5f);
  });
  expect_op_error("rms_norm_add", [](GraphSession& s, Backend& b) {  // out shifted on residual
    TensorView all = b.alloc_tensor(DType::f32, {4, 10});
    ops::rms_norm_add(s, b.alloc_tensor(DType::f32, {3, 10}), b.alloc_tensor(DType::f32, {10}),
                      all.rows_slice(0, 3), all.rows_slice(1, 3), 1e-5f);
  });
}

// rms_norm (in place, as the model emits it) -> add(residual, normed) -> residual: the fuse
// pass makes it one rms_norm_add dispatch, bit-identical on the CPU to the unfused pair,
// with either operand order of the add.
TEST(RmsNormAdd, FusedPairMatchesUnfusedBitForBit) {
  auto backend = cpu_backend();
  for (DType t : kFloatTypes) {
    for (bool normed_first : {false, true}) {
      SCOPED_TRACE(cat(dtype_name(t), normed_first ? " add(normed, x)" : " add(x, normed)"));
      const Shape shape{3, 333};
      auto random = [&](DType type, Shape s, uint64_t seed, float scale) {
        TensorView view = backend->alloc_tensor(type, s);
        upload_floats(view, random_floats(static_cast<size_t>(s.numel()), seed, -scale, scale));
        return view;
      };
      const TensorView w = random(DType::f32, {333}, 3, 1.5f);
      std::vector<uint8_t> results[2];
      uint32_t fusions[2] = {};
      for (int fuse = 0; fuse < 2; ++fuse) {
        const TensorView proj = random(t, shape, 1, 2.0f);
        const TensorView x = random(t, shape, 2, 4.0f);
        GraphExecutor executor(backend);
        GraphSession s = executor.begin_recorded();
        ops::rms_norm(s, proj, w, proj, 1e-5f);
        if (normed_first) {
          ops::add(s, proj, x, x);
        } else {
          ops::add(s, x, proj, x);
        }
        const FinishStats stats = s.finish({.fuse = fuse == 1, .encoding = Encoding::dataflow});
        fusions[fuse] = stats.fusions;
        results[fuse] = x.view.read_as<uint8_t>();
      }
      EXPECT_EQ(fusions[0], 0u);
      EXPECT_EQ(fusions[1], 1u);
      EXPECT_EQ(results[1], results[0]);
    }
  }
}

}  // namespace onepass::testing
