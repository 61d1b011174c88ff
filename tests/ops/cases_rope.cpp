// Op cases: rope, normal and NeoX layouts, partial rotary dims, frequency factors and
// scaling, random non-contiguous positions, in place.
#include <algorithm>
#include <cmath>

#include "onepass/ops/ops.h"
#include "onepass/ops/rope.h"
#include "support/op_harness.h"

namespace onepass::testing {
namespace {

struct RopeCase {
  const char* name;
  int64_t tokens;
  int64_t heads;
  int64_t head_dim;
  int32_t rotary_dims;  // 0 = whole head
  float theta;
  float freq_scale;
  bool factors;
  bool far;  // positions up to ~8192 (else below 100)
};

// Positions: 0 first, then (far) one near 8000, then random values; shuffled so they
// are neither sorted nor contiguous.
std::vector<int32_t> random_positions(OpContext& c, int64_t tokens, bool far) {
  std::uniform_int_distribution<int32_t> dist(1, far ? 8191 : 99);
  std::vector<int32_t> p(static_cast<size_t>(tokens));
  for (auto& v : p) v = dist(c.rng());
  p[0] = 0;
  if (far && tokens > 1) p[1] = 8000 + dist(c.rng()) % 192;
  std::shuffle(p.begin(), p.end(), c.rng());
  return p;
}

std::vector<double> rope_reference(const std::vector<double>& x, const std::vector<int32_t>& pos,
                                   const std::vector<double>* factors, int64_t heads,
                                   int64_t head_dim, int64_t rotary_dims, double theta,
                                   double freq_scale, bool neox) {
  std::vector<double> out = x;
  const int64_t half = rotary_dims / 2;
  for (size_t t = 0; t < pos.size(); ++t) {
    for (int64_t i = 0; i < half; ++i) {
      double angle = pos[t] * freq_scale * std::pow(theta, -2.0 * static_cast<double>(i) /
                                                              static_cast<double>(rotary_dims));
      if (factors) angle /= (*factors)[static_cast<size_t>(i)];
      const double cs = std::cos(angle);
      const double sn = std::sin(angle);
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t base = (static_cast<int64_t>(t) * heads + h) * head_dim;
        const int64_t i0 = base + (neox ? i : 2 * i);
        const int64_t i1 = base + (neox ? i + half : 2 * i + 1);
        out[i0] = x[i0] * cs - x[i1] * sn;
        out[i1] = x[i0] * sn + x[i1] * cs;
      }
    }
  }
  return out;
}

// Kernels compute the angle in f32 (as the GPU does); the reference in float64. The f32
// angle p * freq_scale * theta^(-2i/d) / f carries a relative error of about 7 * 2^-24
// (powf up to 2 ulp on CUDA, one rounding each for the scale, the factor and p), plus
// the rounding of the exponent -2i/d, which adds at most 0.37 * 2^-24 * p * freq_scale / f
// (max of u * e^-u over u = |exponent| * ln theta). So the angle is off by at most
// 8 * 2^-24 * max_angle, where max_angle = max p * freq_scale / min f (pair 0), and the
// rotated pair (norm <= sqrt 2 for inputs in [-1, 1]) by that times sqrt 2: 5.5e-3 at
// p = 8191, 7e-5 below p = 100. The f32 rotation itself adds a few ulp (rtol), f16/bf16
// the rounding of the stored result (tolerance()).
Tolerance rope_tolerance(DType t, double max_angle) {
  Tolerance tol = tolerance(t, 1e-5, 1e-6);
  tol.atol += 8.0 * std::ldexp(1.0, -24) * max_angle * std::sqrt(2.0);
  return tol;
}

void run_rope(OpContext& c, DType t, const RopeCase& rc, ops::RopeLayout layout, bool in_place) {
  const Shape shape{rc.tokens, rc.heads, rc.head_dim};
  TensorView x = c.random_input(t, shape);
  TensorView out = in_place ? x : c.output(t, shape);
  const std::vector<int32_t> pos = random_positions(c, rc.tokens, rc.far);
  TensorView positions = c.input_i32({rc.tokens}, pos);
  const int64_t rotary = rc.rotary_dims == 0 ? rc.head_dim : rc.rotary_dims;
  ops::RopeParams p;
  p.layout = layout;
  p.rotary_dims = rc.rotary_dims;
  p.theta = rc.theta;
  p.freq_scale = rc.freq_scale;
  double min_factor = 1.0;
  if (rc.factors) {
    // Llama-3-style factors: 1 for high frequencies up to 8 for low ones.
    p.freq_factors = c.random_input(DType::f32, {rotary / 2}, 1.0f, 8.0f);
    min_factor = *std::min_element(c.host(p.freq_factors).begin(), c.host(p.freq_factors).end());
  }
  const std::vector<double> x_host = c.host(x);  // a copy: in place overwrites x
  ops::rope(c.session(), x, out, positions, p);
  c.run();
  // Bench mode replays the pass many times; in place, each replay rotates again.
  if (in_place && c.timing()) return;
  const double max_angle =
      static_cast<double>(*std::max_element(pos.begin(), pos.end())) * rc.freq_scale / min_factor;
  c.expect_near(out,
                rope_reference(x_host, pos, rc.factors ? &c.host(p.freq_factors) : nullptr,
                               rc.heads, rc.head_dim, rotary, rc.theta, rc.freq_scale,
                               layout == ops::RopeLayout::neox),
                rope_tolerance(t, max_angle));
}

}  // namespace

ONEPASS_OP_CASES(rope) {
  const RopeCase rope_cases[] = {
      {"7x3x64", 7, 3, 64, 0, 10000.0f, 1.0f, false, true},
      {"7x3x64/near", 7, 3, 64, 0, 10000.0f, 1.0f, false, false},
      {"5x4x64/rot32", 5, 4, 64, 32, 10000.0f, 1.0f, false, true},
      {"9x2x128/factors", 9, 2, 128, 0, 500000.0f, 1.0f, true, true},
      {"3x5x80/rot48_scale", 3, 5, 80, 48, 1000000.0f, 0.25f, false, true},
      {"1x1x64", 1, 1, 64, 0, 10000.0f, 1.0f, false, true},
      {"33x2x80/rot64_factors_near", 33, 2, 80, 64, 10000.0f, 1.0f, true, false},
  };
  for (DType t : kFloatTypes) {
    for (auto [layout_name, layout] : {std::pair{"normal", ops::RopeLayout::normal},
                                       std::pair{"neox", ops::RopeLayout::neox}}) {
      for (const RopeCase& rc : rope_cases) {
        cases.push_back({cat("rope/", dtype_name(t), "/", layout_name, "/", rc.name),
                         [=](OpContext& c) { run_rope(c, t, rc, layout, false); }});
      }
      const RopeCase in_place = {"5x4x64/rot32", 5, 4, 64, 32, 10000.0f, 1.0f, true, true};
      cases.push_back({cat("rope/", dtype_name(t), "/", layout_name, "/in_place_", in_place.name),
                       [=](OpContext& c) { run_rope(c, t, in_place, layout, true); }});
    }
  }
}

TEST(RopeValidation, RejectsBadArguments) {
  auto rope = [](int32_t rotary, Shape x_shape, int64_t n_pos, int64_t n_factors) {
    return [=](GraphSession& s, Backend& b) {
      TensorView x = b.alloc_tensor(DType::f32, x_shape);
      ops::RopeParams p;
      p.rotary_dims = rotary;
      if (n_factors > 0) p.freq_factors = b.alloc_tensor(DType::f32, {n_factors});
      ops::rope(s, x, x, b.alloc_tensor(DType::i32, {n_pos}), p);
    };
  };
  expect_op_error("rope", rope(31, {3, 2, 64}, 3, 0));     // odd rotary dims
  expect_op_error("rope", rope(96, {3, 2, 64}, 3, 0));     // more than head_dim
  expect_op_error("rope", rope(0, {3, 2, 64}, 4, 0));      // one position per token
  expect_op_error("rope", rope(32, {3, 2, 64}, 3, 32));    // rotary_dims / 2 factors
  expect_op_error("rope", rope(0, {6, 64}, 6, 0));         // [tokens, heads, head_dim]
  expect_op_error("rope", [](GraphSession& s, Backend& b) {  // stored angles are rope_kv_write's
    TensorView x = b.alloc_tensor(DType::f32, {1, 2, 64});
    ops::RopeParams p;
    p.cos_sin = b.alloc_tensor(DType::f32, {64});
    p.cos_sin_use = ops::RopeCosSin::store;
    ops::rope(s, x, x, b.alloc_tensor(DType::i32, {1}), p);
  });
  expect_op_error("rope", [](GraphSession& s, Backend& b) {
    // out overlaps x shifted by one row: neither in place nor disjoint
    TensorView all = b.alloc_tensor(DType::f32, {4, 2, 64});
    TensorView x = all.rows_slice(0, 6).reshaped({3, 2, 64});
    TensorView out = all.rows_slice(2, 6).reshaped({3, 2, 64});
    ops::rope(s, x, out, b.alloc_tensor(DType::i32, {3}), {});
  });
}

// rope_kv_write's stored or loaded angles (RopeParams::cos_sin): one token, f32
// [rotary_dims], a buffer when used.
TEST(RopeKvValidation, RejectsBadCosSin) {
  struct Setup {
    int64_t tokens = 1;
    DType type = DType::f32;
    int64_t values = 32;  // rotary_dims 32 of a 64-value head
    bool buffer = true;
  };
  auto write = [](Setup u) {
    return [=](GraphSession& s, Backend& b) {
      const int64_t t = u.tokens;
      ops::RopeParams p;
      p.rotary_dims = 32;
      if (u.buffer) p.cos_sin = b.alloc_tensor(u.type, {u.values});
      p.cos_sin_use = ops::RopeCosSin::load;
      ops::rope_kv_write(s, b.alloc_tensor(DType::f32, {t, 4, 64}), b.alloc_tensor(DType::f32, {t, 2, 64}),
                      b.alloc_tensor(DType::f32, {t, 2, 64}), b.alloc_tensor(DType::f16, {2, 16, 64}),
                      b.alloc_tensor(DType::f16, {2, 16, 64}), b.alloc_tensor(DType::i32, {t}), p);
    };
  };
  {  // the valid call
    GraphExecutor executor(cpu_backend());
    GraphSession session = executor.begin();
    EXPECT_NO_THROW(write({})(session, executor.backend()));
  }
  expect_op_error("rope_kv_write", write({.tokens = 2}));        // one token's angles
  expect_op_error("rope_kv_write", write({.type = DType::f16}));  // f32
  expect_op_error("rope_kv_write", write({.values = 64}));        // rotary_dims values
  expect_op_error("rope_kv_write", write({.buffer = false}));     // a buffer to use
}

// rope_kv_write's per-head q/k norms (RopeParams::q_norm, k_norm): both, f32 [head_dim].
TEST(RopeKvValidation, RejectsBadQkNorm) {
  struct Setup {
    bool q = true;
    bool k = true;
    DType type = DType::f32;
    int64_t values = 64;  // head_dim
  };
  auto write = [](Setup u) {
    return [=](GraphSession& s, Backend& b) {
      ops::RopeParams p;
      if (u.q) p.q_norm = b.alloc_tensor(u.type, {u.values});
      if (u.k) p.k_norm = b.alloc_tensor(DType::f32, {64});
      ops::rope_kv_write(s, b.alloc_tensor(DType::f32, {1, 4, 64}), b.alloc_tensor(DType::f32, {1, 2, 64}),
                      b.alloc_tensor(DType::f32, {1, 2, 64}), b.alloc_tensor(DType::f16, {2, 16, 64}),
                      b.alloc_tensor(DType::f16, {2, 16, 64}), b.alloc_tensor(DType::i32, {1}), p);
    };
  };
  {  // the valid call
    GraphExecutor executor(cpu_backend());
    GraphSession session = executor.begin();
    EXPECT_NO_THROW(write({})(session, executor.backend()));
  }
  expect_op_error("rope_kv_write", write({.q = false}));          // both norms or neither
  expect_op_error("rope_kv_write", write({.k = false}));
  expect_op_error("rope_kv_write", write({.type = DType::f16}));  // f32
  expect_op_error("rope_kv_write", write({.values = 32}));        // head_dim values
}

}  // namespace onepass::testing
