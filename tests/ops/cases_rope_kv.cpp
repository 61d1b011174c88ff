// Op cases: rope_kv_write — the optional per-head q/k RMS norms, RoPE on q in place, RoPE'd
// k and v into the caches — against a float64 reference, with out-of-range positions (no
// cache write) and untouched rows.
#include <algorithm>
#include <cmath>

#include "onepass/ops/ops.h"
#include "onepass/ops/rope.h"
#include "support/op_harness.h"

namespace onepass::testing {
namespace {

struct RopeKvCase {
  const char* name;
  int64_t tokens, heads, kv_heads, head_dim;
  int32_t rotary;
  bool neox;
  bool factors;
  DType cache;
  bool qk_norm = false;  // per-head RMS norms of q and k before the rotation
};

// x * w / sqrt(mean(x^2) + eps) over each head row of v; f64.
void norm_heads(std::vector<double>& v, int64_t head_dim, const std::vector<double>& w, double eps) {
  for (size_t base = 0; base < v.size(); base += static_cast<size_t>(head_dim)) {
    double sum = 0;
    for (int64_t d = 0; d < head_dim; ++d) sum += v[base + static_cast<size_t>(d)] * v[base + static_cast<size_t>(d)];
    const double inv = 1.0 / std::sqrt(sum / static_cast<double>(head_dim) + eps);
    for (int64_t d = 0; d < head_dim; ++d) v[base + static_cast<size_t>(d)] *= inv * w[static_cast<size_t>(d)];
  }
}

// angle = p * freq_scale * theta^(-2i / rotary) / factor_i, rotation of pairs; f64.
// `given`: (cos, sin) per pair to rotate by instead (RopeCosSin::load).
void rotate(std::vector<double>& v, size_t base, int64_t head_dim, int64_t rotary, double position, bool neox,
            const std::vector<double>* factors, const std::vector<double>* given = nullptr) {
  (void)head_dim;
  const int64_t half = rotary / 2;
  for (int64_t i = 0; i < half; ++i) {
    double angle = position * std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(rotary));
    if (factors) angle /= (*factors)[static_cast<size_t>(i)];
    const double c = given ? (*given)[static_cast<size_t>(2 * i)] : std::cos(angle);
    const double s = given ? (*given)[static_cast<size_t>(2 * i + 1)] : std::sin(angle);
    const size_t i0 = base + static_cast<size_t>(neox ? i : 2 * i);
    const size_t i1 = base + static_cast<size_t>(neox ? i + half : 2 * i + 1);
    const double x0 = v[i0], x1 = v[i1];
    v[i0] = x0 * c - x1 * s;
    v[i1] = x0 * s + x1 * c;
  }
}

}  // namespace

ONEPASS_OP_CASES(rope_kv) {
  const std::vector<RopeKvCase> shapes = {
      {"decode_gqa4", 1, 32, 8, 64, 0, false, false, DType::f16},
      {"decode_neox_factors", 1, 9, 3, 64, 0, true, true, DType::f16},
      {"prefill_partial", 7, 6, 2, 80, 48, false, false, DType::f32},
      {"prefill_bf16", 5, 4, 4, 128, 0, true, false, DType::bf16},
      // Qwen3 and Gemma 3 (head_dim 256: the block loops twice over the head) decode steps,
      // and partial rotary dims that pass normalised values through.
      {"decode_neox_qk_norm", 1, 16, 8, 128, 0, true, false, DType::f16, true},
      {"decode_neox_qk_norm_hd256", 1, 4, 1, 256, 0, true, false, DType::bf16, true},
      {"prefill_partial_qk_norm", 7, 6, 2, 80, 48, false, false, DType::f32, true},
  };
  // One token's (cos, sin) per pair stored as computed, or loaded instead of computed; and
  // several tokens written at slots of a paged pool (a padding row's slot -1 writes nothing).
  struct Run {
    RopeKvCase s;
    ops::RopeCosSin use;
    bool slotted;
  };
  std::vector<Run> runs;
  for (const RopeKvCase& s : shapes) {
    runs.push_back({s, ops::RopeCosSin::none, false});
    if (s.tokens == 1) {
      runs.push_back({s, ops::RopeCosSin::store, false});
      runs.push_back({s, ops::RopeCosSin::load, false});
    } else {
      runs.push_back({s, ops::RopeCosSin::none, true});
    }
  }
  for (const auto& [s, use, slotted] : runs) {
    const char* suffix = use == ops::RopeCosSin::store  ? "_store_cos_sin"
                         : use == ops::RopeCosSin::load ? "_load_cos_sin"
                         : slotted                      ? "_slots"
                                                        : "";
    cases.push_back({cat("rope_kv_write/", s.name, suffix), [=](OpContext& c) {
      const int64_t ctx = 40;
      TensorView q = c.random_input(DType::f32, {s.tokens, s.heads, s.head_dim});
      TensorView k = c.random_input(DType::f32, {s.tokens, s.kv_heads, s.head_dim});
      TensorView v = c.random_input(DType::f32, {s.tokens, s.kv_heads, s.head_dim});
      // Caches start with random contents: rows nobody writes must keep them.
      TensorView kc = c.random_input(s.cache, {s.kv_heads, ctx, s.head_dim});
      TensorView vc = c.random_input(s.cache, {s.kv_heads, ctx, s.head_dim});
      std::vector<int32_t> pos(static_cast<size_t>(s.tokens));
      for (int64_t t = 0; t < s.tokens; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>((t * 7 + 3) % (ctx - 2));
      if (s.tokens > 2) pos[2] = static_cast<int32_t>(ctx + 5);  // out of range: q rotates, no cache write
      TensorView positions = c.input_i32({s.tokens}, pos);
      // Cache rows: slots apart from the positions, one padding row (-1), one past ctx.
      std::vector<int32_t> rows = pos;
      TensorView slots;
      if (slotted) {
        for (int64_t t = 0; t < s.tokens; ++t) rows[static_cast<size_t>(t)] = static_cast<int32_t>((t * 11 + 5) % ctx);
        rows[1] = -1;
        rows[2] = static_cast<int32_t>(ctx);
        slots = c.input_i32({s.tokens}, rows);
      }
      const int32_t rotary = s.rotary == 0 ? static_cast<int32_t>(s.head_dim) : s.rotary;
      ops::RopeParams p;
      p.layout = s.neox ? ops::RopeLayout::neox : ops::RopeLayout::normal;
      p.rotary_dims = s.rotary;
      p.theta = 10000.0f;
      std::vector<double> factor_values;
      if (s.factors) {
        p.freq_factors = c.random_input(DType::f32, {rotary / 2}, 1.0f, 8.0f);
        factor_values = c.host(p.freq_factors);
      }
      std::vector<double> given;  // RopeCosSin::load: arbitrary values, not unit rotations
      if (use != ops::RopeCosSin::none) {
        p.cos_sin = use == ops::RopeCosSin::load ? c.random_input(DType::f32, {rotary}, -1.0f, 1.0f)
                                                 : c.output(DType::f32, {rotary});
        p.cos_sin_use = use;
        if (use == ops::RopeCosSin::load) given = c.host(p.cos_sin);
      }
      const std::vector<double>* g = use == ops::RopeCosSin::load ? &given : nullptr;
      const std::vector<double> q0 = c.host(q), k0 = c.host(k);
      std::vector<double> want_q = q0, want_k = k0, want_kc = c.host(kc), want_vc = c.host(vc);
      const double eps = 1e-6;
      if (s.qk_norm) {
        p.q_norm = c.random_input(DType::f32, {s.head_dim}, 0.25f, 2.0f);
        p.k_norm = c.random_input(DType::f32, {s.head_dim}, 0.25f, 2.0f);
        p.qk_norm_eps = static_cast<float>(eps);
        norm_heads(want_q, s.head_dim, c.host(p.q_norm), eps);
        norm_heads(want_k, s.head_dim, c.host(p.k_norm), eps);
      }
      const std::vector<double>& vv = c.host(v);
      ops::rope_kv_write(c.session(), q, k, v, kc, vc, positions, p, slots);
      c.run();
      const std::vector<double>* f = s.factors ? &factor_values : nullptr;
      for (int64_t t = 0; t < s.tokens; ++t) {
        const double position = pos[static_cast<size_t>(t)];
        for (int64_t h = 0; h < s.heads; ++h) {
          const auto base = static_cast<size_t>((t * s.heads + h) * s.head_dim);
          rotate(want_q, base, s.head_dim, rotary, position, s.neox, f, g);
        }
        for (int64_t h = 0; h < s.kv_heads; ++h) {
          const auto base = static_cast<size_t>((t * s.kv_heads + h) * s.head_dim);
          rotate(want_k, base, s.head_dim, rotary, position, s.neox, f, g);
        }
        const int32_t row = rows[static_cast<size_t>(t)];
        if (row < 0 || row >= ctx) continue;
        for (int64_t h = 0; h < s.kv_heads; ++h) {
          for (int64_t d = 0; d < s.head_dim; ++d) {
            const size_t src = static_cast<size_t>((t * s.kv_heads + h) * s.head_dim + d);
            const size_t dst = static_cast<size_t>((h * ctx + row) * s.head_dim + d);
            want_kc[dst] = round_to(s.cache, static_cast<float>(want_k[src]));
            want_vc[dst] = round_to(s.cache, static_cast<float>(vv[src]));
          }
        }
      }
      // f32 angles: |error| <= 8 ulp of the largest angle, times the pair's magnitude.
      // Normalised heads reach |x| * w <= sqrt(head_dim) * 2; their values carry the f32
      // rounding of the norm (relative).
      const double magnitude = s.qk_norm ? 2 * std::sqrt(static_cast<double>(s.head_dim)) : 1.0;
      const double angle_tol = 8 * 0x1p-24 * static_cast<double>(ctx + 5) * std::sqrt(2.0) * magnitude;
      const double value_rtol = s.qk_norm ? 1e-5 : 1e-6;
      c.expect_near(q, want_q, Tolerance{angle_tol + 1e-6, value_rtol}, "q");
      c.expect_near(k, k0, Tolerance{}, "k (left as it was)");
      const Tolerance cache_tol = tolerance(s.cache, value_rtol, angle_tol + 1e-6);
      c.expect_near(kc, want_kc, cache_tol, "k_cache");
      c.expect_near(vc, want_vc, cache_tol, "v_cache");
      if (use == ops::RopeCosSin::store) {
        std::vector<double> want_cs(static_cast<size_t>(rotary));
        for (int64_t i = 0; i < rotary / 2; ++i) {
          double angle = pos[0] * std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(rotary));
          if (f) angle /= (*f)[static_cast<size_t>(i)];
          want_cs[static_cast<size_t>(2 * i)] = std::cos(angle);
          want_cs[static_cast<size_t>(2 * i + 1)] = std::sin(angle);
        }
        c.expect_near(p.cos_sin, want_cs, Tolerance{angle_tol + 1e-6, 1e-6}, "cos_sin");
      }
    }});
  }
}

}  // namespace onepass::testing
