// The Llama forward pass against an independent float64 host implementation, prefill
// against decode, replayed against re-encoded decoding, and GPU against CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <ostream>
#include <random>
#include <span>

#include "onepass/core/error.h"
#include "onepass/model/architecture.h"
#include "onepass/model/llama.h"
#include "onepass/model/loader.h"
#include "onepass/model/model_maker.h"
#include "onepass/model/sampler.h"
#include "onepass/model/tokenizer.h"
#include "onepass/ops/quant.h"
#include "support/testing.h"
// The AMX products on the model of the tiles (tests only), and the instruction set in use.
#include "backends/cpu/kernels/matmul/amx_tiles.h"
#include "backends/cpu/kernels/quant_blocks.h"

namespace onepass::model {
namespace {

using Matrix = std::vector<double>;  // row-major

// ---- float64 reference ---------------------------------------------------------------

Matrix weights(const ModelSource& src, const std::string& name, int64_t* rows = nullptr, int64_t* cols = nullptr) {
  const HostTensor t = src.require(name);
  std::vector<float> f(static_cast<size_t>(t.shape.numel()));
  ops::dequantize(t.dtype, t.data, t.shape.numel(), f.data());
  if (rows) *rows = t.shape.rows();
  if (cols) *cols = t.shape.cols();
  Matrix m(f.begin(), f.end());
  // Norm weights stored as w - offset (Gemma's HF convention).
  if (name.find("norm.weight") != std::string::npos) {
    for (double& e : m) e += src.config().norm_weight_offset;
  }
  return m;
}

std::vector<double> matvec(const Matrix& w, int64_t rows, int64_t cols, const std::vector<double>& x) {
  std::vector<double> y(static_cast<size_t>(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0;
    for (int64_t c = 0; c < cols; ++c) acc += w[static_cast<size_t>(r * cols + c)] * x[static_cast<size_t>(c)];
    y[static_cast<size_t>(r)] = acc;
  }
  return y;
}

std::vector<double> rms_norm(const std::vector<double>& x, const Matrix& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
  return y;
}

// Per-head RMS norm of `heads` consecutive head_dim slices.
void head_norm(std::vector<double>& v, int64_t heads, int64_t hd, const Matrix& w, double eps) {
  for (int64_t h = 0; h < heads; ++h) {
    const std::vector<double> part(v.begin() + h * hd, v.begin() + (h + 1) * hd);
    const std::vector<double> normed = rms_norm(part, w, eps);
    std::copy(normed.begin(), normed.end(), v.begin() + h * hd);
  }
}

double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

void rope(std::vector<double>& v, int64_t heads, const LlamaConfig& c, int64_t pos, double theta) {
  const int64_t hd = c.head_dim;
  const int64_t half = c.rope_dims / 2;
  for (int64_t h = 0; h < heads; ++h) {
    double* x = v.data() + h * hd;
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(pos) * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(c.rope_dims));
      const int64_t a = c.rope_neox ? i : 2 * i;
      const int64_t b = c.rope_neox ? i + half : 2 * i + 1;
      const double x0 = x[a], x1 = x[b];
      x[a] = x0 * std::cos(angle) - x1 * std::sin(angle);
      x[b] = x0 * std::sin(angle) + x1 * std::cos(angle);
    }
  }
}

// What the reference's MoE layers may change and report. The tests of quantized experts
// round each expert product's input as a backend does (CUDA: int8 per 32 values for one
// token, f16 for several) to see how far correct kernels move the logits, and read the
// router's margins to keep every token's expert choice away from a tie.
struct MoeReferenceOptions {
  // Applied to the input of every expert product (the normed x of gate and up, the
  // activations of down); none: exact.
  std::function<void(std::vector<double>&)> round_expert_input;
  // Applied to the dequantized experts' weights (CUDA's grouped products: f16); none: exact.
  std::function<void(std::vector<double>&)> round_expert_weights;
  // Per token: the smallest, over the MoE layers, of the experts_used-th largest router
  // logit minus the next one (how far the expert choice is from a tie).
  std::vector<double>* router_gaps = nullptr;
};

// One layer's router and experts (blk.N.ffn_*_exps), loaded once for all its tokens.
struct MoeWeights {
  Matrix router, gate, up, down;
  int64_t experts = 0, hidden = 0, ffn = 0;
};

MoeWeights moe_weights(const ModelSource& src, const std::string& p) {
  MoeWeights m;
  m.router = weights(src, p + "ffn_gate_inp.weight", &m.experts, &m.hidden);
  m.gate = weights(src, p + "ffn_gate_exps.weight");
  m.up = weights(src, p + "ffn_up_exps.weight");
  m.down = weights(src, p + "ffn_down_exps.weight");
  m.ffn = static_cast<int64_t>(m.gate.size()) / (m.experts * m.hidden);
  return m;
}

// A mixture-of-experts FFN of one token: the router's logits pick the `used` largest (ties
// to the lower expert), weighted by a softmax over all experts (OLMoE) or over the selected
// ones (Mixtral, Qwen3-MoE), each expert a SiLU-gated FFN. *gap: the used-th largest logit
// minus the next.
std::vector<double> moe_ffn(const LlamaConfig& c, const MoeWeights& m, const std::vector<double>& x,
                            const MoeReferenceOptions& options, double* gap) {
  const int64_t experts = m.experts, h = m.hidden, f = m.ffn;
  const int64_t used = c.experts_used;
  const std::vector<double> logits = matvec(m.router, experts, h, x);
  std::vector<int64_t> order(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e) order[static_cast<size_t>(e)] = e;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  *gap = used < experts ? logits[order[used - 1]] - logits[order[used]] : INFINITY;
  const double mx = logits[order[0]];
  const bool over_all = c.architecture == "olmoe";
  double sum = 0;
  for (int64_t i = 0; i < (over_all ? experts : used); ++i) sum += std::exp(logits[order[i]] - mx);
  std::vector<double> xr = x;
  if (options.round_expert_input) options.round_expert_input(xr);
  // Rows [first, first + rows) of a [*, cols] matrix times v.
  auto rows_times = [](const Matrix& w, int64_t first, int64_t rows, int64_t cols,
                       const std::vector<double>& v) {
    std::vector<double> y(static_cast<size_t>(rows), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const double* row = w.data() + (first + r) * cols;
      double acc = 0;
      for (int64_t j = 0; j < cols; ++j) acc += row[j] * v[static_cast<size_t>(j)];
      y[static_cast<size_t>(r)] = acc;
    }
    return y;
  };
  std::vector<double> out(static_cast<size_t>(h), 0.0);
  for (int64_t i = 0; i < used; ++i) {
    const int64_t e = order[static_cast<size_t>(i)];
    const double weight = std::exp(logits[e] - mx) / sum;
    const auto g = rows_times(m.gate, e * f, f, h, xr), u = rows_times(m.up, e * f, f, h, xr);
    std::vector<double> a(g.size());
    for (size_t j = 0; j < g.size(); ++j) a[j] = g[j] / (1.0 + std::exp(-g[j])) * u[j];
    if (options.round_expert_input) options.round_expert_input(a);
    const auto d = rows_times(m.down, e * h, h, f, a);
    for (int64_t j = 0; j < h; ++j) out[j] += weight * d[j];
  }
  return out;
}

// Logits after each of `tokens` (one row per token).
std::vector<std::vector<double>> reference_logits(const ModelSource& src,
                                                  const std::vector<int32_t>& tokens, DType kv_type,
                                                  const MoeReferenceOptions& moe_options = {}) {
  const LlamaConfig& c = src.config();
  const auto n = static_cast<int64_t>(tokens.size());
  int64_t v_rows, h;
  const Matrix embd = weights(src, "token_embd.weight", &v_rows, &h);
  std::vector<std::vector<double>> x(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    x[static_cast<size_t>(t)].assign(embd.begin() + tokens[static_cast<size_t>(t)] * h, embd.begin() + (tokens[static_cast<size_t>(t)] + 1) * h);
    // Gemma: sqrt(hidden), computed here rather than taken from the config.
    const bool gemma = c.architecture.starts_with("gemma");
    if (gemma) {
      for (double& e : x[static_cast<size_t>(t)]) e *= std::sqrt(static_cast<double>(h));
    }
  }
  const int64_t hd = c.head_dim;
  const int64_t group = c.heads / c.kv_heads;
  if (moe_options.router_gaps) moe_options.router_gaps->assign(static_cast<size_t>(n), INFINITY);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = cat("blk.", l, ".");
    const bool local = c.sliding_window > 0 &&
                       (c.sliding_window_period == 0 || l % c.sliding_window_period != c.sliding_window_period - 1);
    const double theta = local && c.rope_theta_local > 0 ? c.rope_theta_local : c.rope_theta;
    const int64_t qd = c.q_dim(), kd = c.kv_dim(), fr = c.ffn;
    // Separate or fused (Phi-3) projections, as rows of one matrix each.
    Matrix wq, wk, wv, wg, wu;
    if (src.find(p + "attn_qkv.weight")) {
      const Matrix qkv = weights(src, p + "attn_qkv.weight");
      wq.assign(qkv.begin(), qkv.begin() + qd * h);
      wk.assign(qkv.begin() + qd * h, qkv.begin() + (qd + kd) * h);
      wv.assign(qkv.begin() + (qd + kd) * h, qkv.end());
    } else {
      wq = weights(src, p + "attn_q.weight");
      wk = weights(src, p + "attn_k.weight");
      wv = weights(src, p + "attn_v.weight");
    }
    const bool moe = src.find(p + "ffn_gate_inp.weight").has_value();
    MoeWeights experts;
    if (moe) {
      experts = moe_weights(src, p);
      if (moe_options.round_expert_weights) {
        for (Matrix* m : {&experts.gate, &experts.up, &experts.down}) {
          moe_options.round_expert_weights(*m);
        }
      }
    } else if (src.find(p + "ffn_gate.weight")) {
      wg = weights(src, p + "ffn_gate.weight");
      wu = weights(src, p + "ffn_up.weight");
    } else {
      const Matrix gate_up = weights(src, p + "ffn_up.weight");
      wg.assign(gate_up.begin(), gate_up.begin() + fr * h);
      wu.assign(gate_up.begin() + fr * h, gate_up.end());
    }
    const Matrix wo = weights(src, p + "attn_output.weight"), wd = moe ? Matrix{} : weights(src, p + "ffn_down.weight"),
                 n1 = weights(src, p + "attn_norm.weight"), n2 = weights(src, p + "ffn_norm.weight");
    const bool qk_norm = src.find(p + "attn_q_norm.weight").has_value();
    const bool post_norms = src.find(p + "post_attention_norm.weight").has_value();
    const Matrix qn = qk_norm ? weights(src, p + "attn_q_norm.weight") : Matrix{};
    const Matrix kn = qk_norm ? weights(src, p + "attn_k_norm.weight") : Matrix{};
    const Matrix pn1 = post_norms ? weights(src, p + "post_attention_norm.weight") : Matrix{};
    const Matrix pn2 = post_norms ? weights(src, p + "post_ffw_norm.weight") : Matrix{};
    std::vector<std::vector<double>> qs, ks, vs;
    for (int64_t t = 0; t < n; ++t) {
      const auto xn = rms_norm(x[static_cast<size_t>(t)], n1, c.norm_eps);
      auto q = matvec(wq, qd, h, xn), k = matvec(wk, kd, h, xn), v = matvec(wv, kd, h, xn);
      if (c.qkv_bias) {
        const Matrix bq = weights(src, p + "attn_q.bias"), bk = weights(src, p + "attn_k.bias"), bv = weights(src, p + "attn_v.bias");
        for (size_t i = 0; i < q.size(); ++i) q[i] += bq[i];
        for (size_t i = 0; i < k.size(); ++i) {
          k[i] += bk[i];
          v[i] += bv[i];
        }
      }
      if (qk_norm && static_cast<int64_t>(qn.size()) == qd) {  // OLMoE: over the whole vectors
        q = rms_norm(q, qn, c.norm_eps);
        k = rms_norm(k, kn, c.norm_eps);
      } else if (qk_norm) {
        head_norm(q, c.heads, hd, qn, c.norm_eps);
        head_norm(k, c.kv_heads, hd, kn, c.norm_eps);
      }
      rope(q, c.heads, c, t, theta);
      rope(k, c.kv_heads, c, t, theta);
      // The model keeps K and V in a cache of kv_type.
      for (double& e : k) e = testing::round_to(kv_type, static_cast<float>(e));
      for (double& e : v) e = testing::round_to(kv_type, static_cast<float>(e));
      qs.push_back(q);
      ks.push_back(k);
      vs.push_back(v);
    }
    const double scale = c.attention_scale > 0 ? c.attention_scale : 1.0 / std::sqrt(static_cast<double>(hd));
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> attn(static_cast<size_t>(c.q_dim()), 0.0);
      const int64_t first = local ? std::max<int64_t>(0, t - c.sliding_window + 1) : 0;
      for (int64_t hh = 0; hh < c.heads; ++hh) {
        const int64_t kvh = hh / group;
        std::vector<double> scores(static_cast<size_t>(t + 1), 0.0);
        double mx = -1e300;
        for (int64_t j = first; j <= t; ++j) {
          double s = 0;
          for (int64_t d = 0; d < hd; ++d) s += qs[t][hh * hd + d] * ks[j][kvh * hd + d];
          s *= scale;
          if (c.attn_softcap > 0) s = c.attn_softcap * std::tanh(s / c.attn_softcap);
          scores[j] = s;
          mx = std::max(mx, scores[j]);
        }
        double sum = 0;
        for (int64_t j = first; j <= t; ++j) sum += (scores[j] = std::exp(scores[j] - mx));
        for (int64_t j = first; j <= t; ++j) {
          for (int64_t d = 0; d < hd; ++d) attn[hh * hd + d] += scores[j] / sum * vs[j][kvh * hd + d];
        }
      }
      auto o = matvec(wo, h, c.q_dim(), attn);
      if (post_norms) o = rms_norm(o, pn1, c.norm_eps);
      auto& xt = x[static_cast<size_t>(t)];
      for (int64_t i = 0; i < h; ++i) xt[i] += o[i];
      const auto hn = rms_norm(xt, n2, c.norm_eps);
      if (moe) {
        double gap = 0;
        auto d = moe_ffn(c, experts, hn, moe_options, &gap);
        if (moe_options.router_gaps) {
          double& g = (*moe_options.router_gaps)[static_cast<size_t>(t)];
          g = std::min(g, gap);
        }
        if (post_norms) d = rms_norm(d, pn2, c.norm_eps);
        for (int64_t i = 0; i < h; ++i) xt[i] += d[i];
        continue;
      }
      const auto g = matvec(wg, fr, h, hn), u = matvec(wu, fr, h, hn);
      std::vector<double> a(g.size());
      for (size_t i = 0; i < g.size(); ++i) {
        const double act = c.activation == FfnActivation::gelu_tanh ? gelu_tanh(g[i]) : g[i] / (1.0 + std::exp(-g[i]));
        a[i] = act * u[i];
      }
      auto d = matvec(wd, h, fr, a);
      if (post_norms) d = rms_norm(d, pn2, c.norm_eps);
      for (int64_t i = 0; i < h; ++i) xt[i] += d[i];
    }
  }
  const Matrix out_norm = weights(src, "output_norm.weight");
  const Matrix head = src.find("output.weight") ? weights(src, "output.weight") : embd;
  std::vector<std::vector<double>> logits;
  for (int64_t t = 0; t < n; ++t) {
    auto row = matvec(head, c.vocab_size, h, rms_norm(x[static_cast<size_t>(t)], out_norm, c.norm_eps));
    if (c.final_softcap > 0) {
      for (double& e : row) e = c.final_softcap * std::tanh(e / c.final_softcap);
    }
    logits.push_back(std::move(row));
  }
  return logits;
}

// ---- tests -------------------------------------------------------------------------------

LlamaConfig tiny(bool neox = false, bool bias = false, int64_t kv_heads = 2, bool tied = false) {
  LlamaConfig c;
  c.architecture = bias ? "qwen2" : "llama";
  c.vocab_size = 97;
  c.hidden = 64;
  c.ffn = 96;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = kv_heads;
  c.head_dim = 16;
  c.rope_dims = 16;
  c.rope_theta = 10000.0f;
  c.rope_neox = neox;
  c.norm_eps = 1e-5f;
  c.tied_output = tied;
  c.qkv_bias = bias;
  return c;
}

// A small model of another family: its table entry, with windows and softcaps small enough
// to matter over a few tokens.
LlamaConfig family(const char* name) {
  LlamaConfig c = tiny();
  apply_architecture(*find_architecture(name), c);
  if (c.sliding_window_period > 0) {
    c.layers = 3;
    c.sliding_window = 3;
    c.sliding_window_period = 2;  // layers 0 and 2 local, layer 1 global
  }
  if (c.rope_theta_local > 0) c.rope_theta = 1e6f;
  if (c.attn_softcap > 0) c.attn_softcap = 0.8f;   // random scores reach ~1-2
  if (c.final_softcap > 0) c.final_softcap = 1.5f;
  return c;
}

LlamaConfig with_norm_offset(LlamaConfig c) {
  c.norm_weight_offset = 1.0f;
  c.attention_scale = 0.2f;
  return c;
}

// Block formats with 256-value blocks need 256-multiple rows.
LlamaConfig wide() {
  LlamaConfig c = tiny();
  c.hidden = 256;
  c.ffn = 512;
  c.heads = 4;
  c.head_dim = 64;
  c.rope_dims = 64;
  return c;
}

void expect_logits_near(std::span<const float> got, const std::vector<double>& want, double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rtol * scale) << what << " logit " << i;
  }
}

// Pearson correlation of two backends' logits: near 1 when they differ only by rounding,
// far below when a wiring error (layout, head mapping, routing) changes them.
double logit_correlation(std::span<const float> got, std::span<const double> want) {
  double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
  const double n = static_cast<double>(want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const double x = got[i], y = want[i];
    sx += x; sy += y; sxx += x * x; syy += y * y; sxy += x * y;
  }
  return (n * sxy - sx * sy) / std::sqrt((n * sxx - sx * sx) * (n * syy - sy * sy));
}

std::vector<int32_t> some_tokens(int n, uint64_t seed, int vocab) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

struct Variant {
  const char* name;
  LlamaConfig config;
  DType weights;
  DType kv_type;
  double rtol;
};

class LlamaVsReference : public ::testing::TestWithParam<Variant> {};

TEST_P(LlamaVsReference, PrefillAndDecodeMatchFloat64) {
  const Variant& v = GetParam();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  auto src = make_random_source(v.config, v.weights, seed);
  const auto tokens = some_tokens(9, seed, static_cast<int>(v.config.vocab_size));
  const auto want = reference_logits(*src, tokens, v.kv_type);
  auto backend = testing::cpu_backend();
  // The SIMD CPU paths round x to int16 per 256 values in the integer matrix-vector
  // products (up to 2^-16 of the group's largest |x|): 5e-4 through the layers. q4_k's
  // integer part d · sc · q reaches twice the weight where its min cancels half of it (the
  // largest error seen over 60 seeds: 3.6e-4).
  const bool int16_x = testing::cpu_rounds_x_to_int16(*backend, v.weights);
  const double rtol = int16_x ? std::max(v.rtol, 5e-4) : v.rtol;
  LoadOptions o;
  o.kv_type = v.kv_type;
  o.context = 32;
  o.max_batch = 4;  // several prefill chunks
  LlamaModel model(backend, *src, o);
  // Prefill all but the last token, then decode the last: both paths.
  const std::vector<int32_t> head(tokens.begin(), tokens.end() - 1);
  expect_logits_near(model.prefill(head), want[head.size() - 1], rtol, "prefill");
  expect_logits_near(model.decode(tokens.back()), want.back(), rtol, "decode");
  EXPECT_EQ(model.position(), 9);
  // Token by token from the start.
  model.reset();
  for (size_t t = 0; t < tokens.size(); ++t) {
    expect_logits_near(model.decode(tokens[t]), want[t], rtol, cat("decode step ", t));
  }
  // Every position's logits at once (chunks of max_batch), after one prefilled token.
  model.reset();
  model.prefill(std::span(tokens).first(1));
  const auto all = model.evaluate(std::span(tokens).subspan(1));
  const auto vocab = static_cast<size_t>(v.config.vocab_size);
  ASSERT_EQ(all.size(), (tokens.size() - 1) * vocab);
  for (size_t t = 1; t < tokens.size(); ++t) {
    expect_logits_near(all.subspan((t - 1) * vocab, vocab), want[t], rtol, cat("evaluate position ", t));
  }
  EXPECT_EQ(model.position(), 9);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, LlamaVsReference,
    // f32 arithmetic over a few hundred terms per value: 1e-5 of the largest logit. With
    // an f16 cache the reference rounds K and V too, but values within f32 rounding of a
    // half-way point may round the other way: 2e-4 (a few f16 ulps through two layers).
    ::testing::Values(Variant{"llama_f32", tiny(), DType::f32, DType::f32, 1e-5},
                      Variant{"llama_f16_cache", tiny(), DType::f32, DType::f16, 2e-4},
                      Variant{"qwen2_bias_neox", tiny(true, true), DType::f32, DType::f32, 1e-5},
                      Variant{"mha_tied", tiny(false, false, 4, true), DType::f32, DType::f32, 1e-5},
                      Variant{"gqa4_f16", tiny(false, false, 1), DType::f16, DType::f32, 1e-5},
                      Variant{"q8_0", tiny(), DType::q8_0, DType::f32, 1e-5},
                      Variant{"q4_k", wide(), DType::q4_k, DType::f32, 1e-5},
                      Variant{"qwen3_qk_norm", family("qwen3"), DType::f32, DType::f32, 1e-5},
                      Variant{"gemma3_local_global", family("gemma3"), DType::f32, DType::f32, 1e-5},
                      Variant{"gemma3_q8_0_f16_cache", family("gemma3"), DType::q8_0, DType::f16, 2e-4},
                      Variant{"gemma2_softcaps", family("gemma2"), DType::f32, DType::f32, 1e-5},
                      Variant{"gemma2_norm_offset_scale", with_norm_offset(family("gemma2")), DType::f32, DType::f32, 1e-5},
                      Variant{"phi3_fused_tensors", family("phi3"), DType::f32, DType::f32, 1e-5}),
    [](const auto& p) { return std::string(p.param.name); });

TEST(Llama, ReplayedDecodeEqualsReencodedDecodeBitForBit) {
  const uint64_t seed = testing::fresh_seed();
  auto src = make_random_source(tiny(), DType::f16, seed);
  auto backend = testing::cpu_backend();
  LoadOptions replay;
  replay.context = 40;
  LoadOptions direct = replay;
  direct.replay = false;
  LlamaModel c(backend, *src, replay), d(backend, *src, direct);
  const auto tokens = some_tokens(20, seed, 97);
  const auto pc = c.prefill(std::span(tokens).first(5));
  const std::vector<float> prefill_copy(pc.begin(), pc.end());
  const auto pd = d.prefill(std::span(tokens).first(5));
  ASSERT_EQ(std::memcmp(prefill_copy.data(), pd.data(), prefill_copy.size() * 4), 0);
  for (size_t t = 5; t < tokens.size(); ++t) {
    const auto lc = c.decode(tokens[t]);
    const std::vector<float> copy(lc.begin(), lc.end());
    const auto ld = d.decode(tokens[t]);
    ASSERT_EQ(std::memcmp(copy.data(), ld.data(), copy.size() * 4), 0) << "step " << t;
  }
  ASSERT_NE(c.decode_graph(), nullptr);
  EXPECT_GT(c.decode_dispatches(), 10u);
}

TEST(Llama, ReplayedPrefillChunksEqualReencodedChunksBitForBit) {
  const uint64_t seed = testing::fresh_seed();
  auto src = make_random_source(tiny(), DType::q8_0, seed);
  auto backend = testing::cpu_backend();
  LoadOptions replay{.context = 40, .max_batch = 3};
  LoadOptions direct = replay;
  direct.replay = false;
  LlamaModel c(backend, *src, replay), d(backend, *src, direct);
  const auto tokens = some_tokens(30, seed, 97);
  // Chunks of 3, 3, 3, 2 tokens, then 3, 1 after a reset: each length's graph is
  // recorded once, then replayed at other positions with other tokens.
  const std::span<const int32_t> prompts[] = {std::span(tokens).first(11), std::span(tokens).subspan(11, 4),
                                              std::span(tokens).subspan(15, 1)};
  for (int round = 0; round < 3; ++round) {
    if (round == 1) {
      c.reset();
      d.reset();
    }
    const auto lc = c.prefill(prompts[round]);
    const std::vector<float> copy(lc.begin(), lc.end());
    const auto ld = d.prefill(prompts[round]);
    ASSERT_EQ(std::memcmp(copy.data(), ld.data(), copy.size() * 4), 0) << "prompt " << round;
    ASSERT_EQ(c.position(), d.position());
  }
  EXPECT_EQ(c.prefill_graphs(), 3u);  // lengths 3, 2 and 1
  EXPECT_EQ(d.prefill_graphs(), 0u);
  // The decode after replayed prefills reads the cache they wrote.
  const auto lc = c.decode(tokens[20]);
  const std::vector<float> copy(lc.begin(), lc.end());
  ASSERT_EQ(std::memcmp(copy.data(), d.decode(tokens[20]).data(), copy.size() * 4), 0);
}

// The families' fused ops (rope_kv_write with the per-head q/k norms, ...) against their
// unfused sequences. A Qwen3 with the normal RoPE layout offers rope_kv_write to the Q/K/V
// product's epilogue, which must keep the norms.
TEST(Llama, FusedOpsMatchTheUnfusedSequence) {
  const uint64_t seed = testing::fresh_seed();
  LlamaConfig qwen3_normal = family("qwen3");
  qwen3_normal.rope_neox = false;
  const std::pair<const char*, LlamaConfig> configs[] = {{"qwen2", tiny(true, true)},
                                                         {"qwen3", family("qwen3")},
                                                         {"qwen3_normal_rope", qwen3_normal},
                                                         {"gemma3", family("gemma3")},
                                                         {"gemma2", with_norm_offset(family("gemma2"))}};
  for (const auto& [name, config] : configs) {
    SCOPED_TRACE(name);
    auto src = make_random_source(config, DType::f16, seed);
    auto backend = testing::cpu_backend();
    LoadOptions fused{.context = 24};
    LoadOptions unfused = fused;
    unfused.fused_ops = false;
    LlamaModel a(backend, *src, fused), b(backend, *src, unfused);
    const auto tokens = some_tokens(10, seed, 97);
    const auto pa = a.prefill(std::span(tokens).first(4));
    const std::vector<float> copy(pa.begin(), pa.end());
    // Same f32 arithmetic in the same order: bit for bit on the CPU.
    ASSERT_EQ(std::memcmp(copy.data(), b.prefill(std::span(tokens).first(4)).data(), copy.size() * 4), 0);
    for (size_t t = 4; t < tokens.size(); ++t) {
      const auto la = a.decode(tokens[t]);
      const std::vector<float> lc(la.begin(), la.end());
      ASSERT_EQ(std::memcmp(lc.data(), b.decode(tokens[t]).data(), lc.size() * 4), 0) << "step " << t;
    }
    EXPECT_LT(a.decode_dispatches(), b.decode_dispatches());
  }
}

// The fused decode step of the QK-norm and post-norm families leaves no RMS norm, residual
// add or gated activation of its own: the Q/K norms run in rope_kv_write, each Gemma
// post-norm with its residual add in one rms_norm_add, the others (and GELU x up) in the
// products.
TEST(Llama, FusedDecodeStepHasNoSeparateNormOrAdd) {
  for (const char* name : {"qwen3", "gemma3", "gemma2"}) {
    SCOPED_TRACE(name);
    const LlamaConfig c = family(name);
    auto src = make_random_source(c, DType::f16, 7);
    LlamaModel m(testing::cpu_backend(), *src, LoadOptions{.context = 16});
    m.prefill(std::vector<int32_t>{1, 2});
    m.decode(3);
    std::map<std::string, size_t> ops;
    for (const Node& n : m.decode_graph()->graph().nodes()) {
      if (const Dispatch* d = as_dispatch(n)) ++ops[std::string(d->op)];
    }
    EXPECT_EQ(ops["rms_norm"], 0u);
    EXPECT_EQ(ops["add"], 0u);
    EXPECT_EQ(ops["gelu_mul"] + ops["silu_mul"], 0u);
    EXPECT_EQ(ops["rms_norm_add"], c.post_norms ? 2 * static_cast<size_t>(c.layers) : 0u);
    EXPECT_EQ(ops[c.rope_neox ? "rope_kv_write_neox" : "rope_kv_write"], static_cast<size_t>(c.layers));
  }
}

TEST(Llama, GreedyDecodeMatchesHostArgmax) {
  auto src = make_random_source(tiny(), DType::f32, 3);
  auto backend = testing::cpu_backend();
  LlamaModel a(backend, *src, LoadOptions{.context = 16});
  LlamaModel b(backend, *src, LoadOptions{.context = 16});
  int32_t t = 1;
  for (int i = 0; i < 8; ++i) {
    const auto logits = a.decode(t);
    const int32_t expected = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    t = b.decode_greedy(t);
    EXPECT_EQ(t, expected);
  }
}

// decode_greedy_run feeds each step from the previous one on the device: the same tokens
// and the same state afterwards as a loop of decode_greedy (bit for bit on the CPU).
TEST(Llama, GreedyRunContinuesLikeDecodeGreedy) {
  auto src = make_random_source(tiny(), DType::f32, 5);
  auto backend = testing::cpu_backend();
  LlamaModel a(backend, *src, LoadOptions{.context = 32});
  // Three fed steps per graph: runs of 4 and 7 steps replay it (after the first step, which
  // the host feeds), a run of 3 the one-step graph only, and a run of 6 both.
  LlamaModel b(backend, *src, LoadOptions{.context = 32, .fed_steps_per_graph = 3});
  const auto prompt = some_tokens(5, 11, 97);
  const int32_t first = model::argmax(a.prefill(prompt));
  ASSERT_EQ(first, model::argmax(b.prefill(prompt)));
  int32_t t = first;
  std::vector<int32_t> expected;
  for (int i = 0; i < 21; ++i) expected.push_back(t = a.decode_greedy(t));
  // Each run starts from the last token of the one before.
  std::vector<int32_t> got;
  t = first;
  for (int64_t run : {1, 4, 3, 7, 6}) {
    const std::vector<int32_t> part = b.decode_greedy_run(t, run);
    ASSERT_EQ(part.size(), static_cast<size_t>(run));
    got.insert(got.end(), part.begin(), part.end());
    t = part.back();
  }
  EXPECT_EQ(got, expected);
  EXPECT_EQ(b.position(), a.position());
  // The cache the runs wrote serves the next step exactly as a's.
  const auto la = a.decode(t);
  const std::vector<float> want(la.begin(), la.end());
  const auto lb = b.decode(t);
  ASSERT_EQ(std::memcmp(want.data(), lb.data(), want.size() * 4), 0);
  EXPECT_THROW(b.decode_greedy_run(t, 32), Error);  // past the context
}

TEST(Llama, BadInputIsAClearError) {
  auto src = make_random_source(tiny(), DType::f32, 3);
  auto backend = testing::cpu_backend();
  LlamaModel m(backend, *src, LoadOptions{.context = 4});
  EXPECT_THROW(m.decode(97), Error);  // outside the vocabulary
  EXPECT_THROW(m.prefill(std::vector<int32_t>{}), Error);
  m.prefill(std::vector<int32_t>{1, 2, 3, 4});
  try {
    m.decode(1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context full"), std::string::npos) << e.what();
  }
  LlamaConfig bad = tiny();
  bad.heads = 3;
  EXPECT_THROW(make_random_source(bad, DType::f32, 1), Error);
}

// Prefills 3 tokens into both models, then decodes the rest: the logits of every step are
// the same bits.
void expect_same_decode_bits(LlamaModel& a, LlamaModel& b, const std::vector<int32_t>& tokens) {
  a.prefill(std::span(tokens).first(3));
  b.prefill(std::span(tokens).first(3));
  for (size_t t = 3; t < tokens.size(); ++t) {
    const auto la = a.decode(tokens[t]);
    const std::vector<float> got(la.begin(), la.end());
    ASSERT_EQ(std::memcmp(got.data(), b.decode(tokens[t]).data(), got.size() * 4), 0) << "step " << t;
  }
}

// The CPU's fused decode step (mv_fused: norm, residual, SiLU x up, RoPE + KV write) does
// the unfused kernels' arithmetic value for value: the same logits bit for bit, with
// every fusion of the step applied.
TEST(Llama, CpuFusedDecodeGraphMatchesUnfusedBitForBit) {
  const uint64_t seed = testing::fresh_seed();
  for (DType type : {DType::f16, DType::q4_1}) {
    SCOPED_TRACE(dtype_name(type));
    const LlamaConfig c = wide();
    auto src = make_random_source(c, type, seed);
    auto backend = testing::cpu_backend();
    LoadOptions fused{.context = 64};
    LoadOptions plain = fused;
    plain.capture.fuse = false;
    LlamaModel a(backend, *src, fused), b(backend, *src, plain);
    expect_same_decode_bits(a, b, some_tokens(8, seed, 97));
    ASSERT_FALSE(c.rope_neox);
    EXPECT_EQ(a.decode_graph()->stats().fusions, static_cast<uint32_t>(6 * c.layers + 2));
    EXPECT_EQ(b.decode_graph()->stats().fusions, 0u);
  }
}

// The families' fused decode graphs (Q/K norms in rope_kv_write, rms_norm_add, GELU x up
// in the gate/up product) against the same graph unfused: bit for bit on the CPU.
TEST(Llama, CpuFusedDecodeGraphOfTheFamiliesMatchesUnfusedBitForBit) {
  const uint64_t seed = testing::fresh_seed();
  for (const char* name : {"qwen3", "gemma3", "gemma2"}) {
    SCOPED_TRACE(name);
    const LlamaConfig c = family(name);
    auto src = make_random_source(c, DType::q8_0, seed);
    auto backend = testing::cpu_backend();
    LoadOptions fused{.context = 32};
    LoadOptions plain = fused;
    plain.capture.fuse = false;
    LlamaModel a(backend, *src, fused), b(backend, *src, plain);
    expect_same_decode_bits(a, b, some_tokens(8, seed, 97));
    EXPECT_GT(a.decode_graph()->stats().fusions, 0u);
  }
}

TEST(Llama, GpuFusedDecodeGraphMatchesUnfused) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device available";
  const uint64_t seed = testing::fresh_seed();
  for (DType type : {DType::f16, DType::q4_0}) {
    SCOPED_TRACE(dtype_name(type));
    const LlamaConfig c = wide();
    auto src = make_random_source(c, type, seed);
    auto gpu = make_cuda_backend(0, testing::test_options());
    LoadOptions fused{.context = 64};
    LoadOptions plain = fused;
    plain.capture.fuse = false;
    LlamaModel a(gpu, *src, fused), b(gpu, *src, plain);
    const auto tokens = some_tokens(8, seed, 97);
    a.prefill(std::span(tokens).first(3));
    b.prefill(std::span(tokens).first(3));
    for (size_t t = 3; t < tokens.size(); ++t) {
      const auto la = a.decode(tokens[t]);
      const std::vector<float> got(la.begin(), la.end());
      const auto lb = b.decode(tokens[t]);
      // Dense weights: the fused norm rounds its output once less. Block formats: both
      // quantize x to int8, but the fused kernels quantize x * w and scale their sums by
      // 1 / rms afterwards (the deferred norm), so some int8 values round the other way
      // than after the unfused norm kernel; in these small random models one such value
      // moves the logits by a few % of the largest, compounding over the steps through the
      // KV cache (300 runs on an H200: half the first steps identical, p99 3.2-4.0% and
      // at most 5.0% per step; 3e-2 failed 2 runs in 60). A wrong scale or a lost norm
      // is off by far more, and one fused product is checked at 2e-3 by
      // CudaFusion.FusedMatvecMatchesTheUnfusedSequence (tests/cuda).
      const double rtol = dtype_is_quantized(type) ? 8e-2 : 2e-3;
      expect_logits_near(got, std::vector<double>(lb.begin(), lb.end()), rtol, cat("step ", t));
    }
    // Per layer: norm->QKV, QKV->RoPE + KV write (normal layout), O->residual,
    // norm->gate/up, gate/up->SiLU, down->residual; the final norm into the LM head, and
    // the argmax into feed_token.
    ASSERT_FALSE(c.rope_neox);
    EXPECT_EQ(a.decode_graph()->stats().fusions, static_cast<uint32_t>(6 * c.layers + 2));
    EXPECT_EQ(b.decode_graph()->stats().fusions, 0u);
    EXPECT_EQ(a.decode_dispatches() + 6 * static_cast<size_t>(c.layers) + 2, b.decode_dispatches());
  }
}

// The device-fed greedy run on the GPU: the same kernels on the same inputs as step by
// step, so the same tokens, and a next step with the same logits bit for bit.
TEST(Llama, GpuGreedyRunMatchesStepByStepGreedy) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device available";
  const uint64_t seed = testing::fresh_seed();
  for (DType type : {DType::f16, DType::q4_0}) {
    SCOPED_TRACE(dtype_name(type));
    auto src = make_random_source(wide(), type, seed);
    auto gpu = make_cuda_backend(0, testing::test_options());
    LlamaModel a(gpu, *src, LoadOptions{.context = 64});
    LlamaModel b(gpu, *src, LoadOptions{.context = 64});
    const auto prompt = some_tokens(6, seed, 97);
    const int32_t first = model::argmax(a.prefill(prompt));
    ASSERT_EQ(first, model::argmax(b.prefill(prompt)));
    int32_t t = first;
    std::vector<int32_t> expected;
    for (int i = 0; i < 20; ++i) expected.push_back(t = a.decode_greedy(t));
    std::vector<int32_t> got = b.decode_greedy_run(first, 3);
    const std::vector<int32_t> rest = b.decode_greedy_run(got.back(), 17);
    got.insert(got.end(), rest.begin(), rest.end());
    EXPECT_EQ(got, expected);
    EXPECT_EQ(b.position(), a.position());
    const auto la = a.decode(t);
    const std::vector<float> want(la.begin(), la.end());
    const auto lb = b.decode(t);
    EXPECT_EQ(std::memcmp(want.data(), lb.data(), want.size() * 4), 0);
  }
}

TEST(Llama, GpuLogitsMatchCpuLogits) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device available";
  const uint64_t seed = testing::fresh_seed();
  for (DType type : {DType::f16, DType::q4_0, DType::q4_k}) {
    SCOPED_TRACE(dtype_name(type));
    LlamaConfig c = tiny();
    c.hidden = 256;
    c.ffn = 512;
    c.head_dim = 64;
    c.rope_dims = 64;
    auto src = make_random_source(c, type, seed);
    auto cpu = testing::cpu_backend();
    auto gpu = make_cuda_backend(0, testing::test_options());
    LlamaModel a(cpu, *src, LoadOptions{.context = 64});
    LlamaModel b(gpu, *src, LoadOptions{.context = 64});
    const auto tokens = some_tokens(12, seed, 97);
    const auto pa = a.prefill(tokens);
    const std::vector<float> prefill_cpu(pa.begin(), pa.end());
    const auto pb = b.prefill(tokens);
    std::vector<double> want(prefill_cpu.begin(), prefill_cpu.end());
    // The GPU's quantized matrix-vector kernels round activations to int8 per 32 values
    // (llama.cpp does the same): up to ~0.4% per product, compounding through the layers
    // and the LM head (the prefill's too), so logits of quantized models agree within a
    // few percent of the largest one and stay almost perfectly correlated, while a wiring
    // error (layout, head mapping, rope) breaks both. Dense weights keep f32 activations.
    const bool quantized = dtype_is_quantized(type);
    const double rtol = quantized ? 6e-2 : 1e-3;
    auto compare = [&](std::span<const float> gpu_logits, const std::vector<double>& cpu_logits, const std::string& what) {
      expect_logits_near(gpu_logits, cpu_logits, rtol, what);
      EXPECT_GT(logit_correlation(gpu_logits, cpu_logits), quantized ? 0.995 : 0.99999) << what;
    };
    compare(pb, want, "prefill");
    for (int i = 0; i < 5; ++i) {
      const auto la = a.decode(tokens[static_cast<size_t>(i)]);
      want.assign(la.begin(), la.end());
      compare(b.decode(tokens[static_cast<size_t>(i)]), want, cat("decode ", i));
    }
  }
}

// Every family's features on the GPU (QK norm, post-norms, GELU, sliding windows with their
// own RoPE base, softcaps, fused tensors) against the CPU, which the float64 reference
// checks: dense f16 weights, prefill past the window and decode steps after it.
TEST(Llama, GpuFamiliesMatchCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device available";
  const uint64_t seed = testing::fresh_seed();
  for (const char* name : {"qwen3", "gemma3", "gemma2", "phi3"}) {
    SCOPED_TRACE(name);
    LlamaConfig c = family(name);
    c.hidden = 256;
    c.ffn = 512;
    c.head_dim = 64;
    c.rope_dims = 64;
    auto src = make_random_source(c, DType::f16, seed);
    LlamaModel a(testing::cpu_backend(), *src, LoadOptions{.context = 64});
    LlamaModel b(make_cuda_backend(0, testing::test_options()), *src, LoadOptions{.context = 64});
    const auto tokens = some_tokens(12, seed, 97);
    const auto pa = a.prefill(tokens);
    const std::vector<double> want(pa.begin(), pa.end());
    expect_logits_near(b.prefill(tokens), want, 1e-3, "prefill");
    for (int i = 0; i < 5; ++i) {
      const auto la = a.decode(tokens[static_cast<size_t>(i)]);
      const std::vector<double> step(la.begin(), la.end());
      expect_logits_near(b.decode(tokens[static_cast<size_t>(i)]), step, 1e-3, cat("decode ", i));
    }
  }
}

// ---- mixture of experts -------------------------------------------------------------------

// A small MoE model of a family: Mixtral is "llama" with experts, Qwen3-MoE and OLMoE their
// own entries (QK norms per head and over the whole vectors, softmax over the selected
// experts or over all).
LlamaConfig moe(const char* name, int64_t experts = 8, int64_t used = 2) {
  LlamaConfig c = tiny();
  apply_architecture(*find_architecture(name), c);
  c.experts = experts;
  c.experts_used = used;
  c.expert_ffn = 32;
  return c;
}

// A source with some f32 tensors' values replaced (same shape).
class OverriddenSource : public ModelSource {
 public:
  explicit OverriddenSource(std::unique_ptr<ModelSource> inner) : inner_(std::move(inner)) {}
  const LlamaConfig& config() const override { return inner_->config(); }
  std::optional<HostTensor> find(std::string_view name) const override {
    std::optional<HostTensor> t = inner_->find(name);
    auto it = values_.find(std::string(name));
    if (t && it != values_.end()) t->data = it->second.data();
    return t;
  }
  std::string describe() const override { return inner_->describe(); }
  std::vector<float>& values(const std::string& name) {
    const HostTensor t = inner_->require(name);
    auto& v = values_[name];
    v.assign(static_cast<const float*>(t.data), static_cast<const float*>(t.data) + t.shape.numel());
    return v;
  }

 private:
  std::unique_ptr<ModelSource> inner_;
  std::map<std::string, std::vector<float>> values_;
};

INSTANTIATE_TEST_SUITE_P(
    Moe, LlamaVsReference,
    ::testing::Values(Variant{"mixtral", moe("llama"), DType::f32, DType::f32, 1e-5},
                      Variant{"mixtral_q8_0", moe("llama", 8, 2), DType::q8_0, DType::f32, 1e-5},
                      Variant{"qwen3moe", moe("qwen3moe", 8, 3), DType::f32, DType::f32, 1e-5},
                      Variant{"olmoe", moe("olmoe", 8, 2), DType::f32, DType::f32, 1e-5},
                      Variant{"olmoe_f16_cache", moe("olmoe", 6, 4), DType::f16, DType::f16, 2e-4}),
    [](const auto& p) { return std::string(p.param.name); });

// Prefill (replayed chunks of 4 tokens) and replayed decode of a MoE model against the
// float64 reference, on `src`.
void expect_moe_matches_reference(const ModelSource& src, uint64_t seed, int64_t max_batch) {
  const auto tokens = some_tokens(10, seed, 97);
  const auto want = reference_logits(src, tokens, DType::f32);
  LoadOptions o;
  o.context = 16;
  o.max_batch = max_batch;
  o.kv_type = DType::f32;  // as the reference keeps K and V
  LlamaModel model(testing::cpu_backend(), src, o);
  expect_logits_near(model.prefill(std::span(tokens).first(7)), want[6], 1e-5, "prefill");
  for (size_t t = 7; t < tokens.size(); ++t) expect_logits_near(model.decode(tokens[t]), want[t], 1e-5, cat("decode ", t));
}

// 16 experts, one per token, chunks of 4 tokens: at least 12 experts receive no token in
// every prefill chunk (their groups are empty).
TEST(LlamaMoe, ExpertsWithoutTokensInAChunk) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for (const char* name : {"llama", "olmoe"}) {
    SCOPED_TRACE(name);
    auto src = make_random_source(moe(name, 16, 1), DType::f32, seed);
    expect_moe_matches_reference(*src, seed, 4);
  }
}

// Router rows repeated in pairs (expert 2i + 1's row is expert 2i's): equal logits, where
// the lower expert wins the tie. With 3 of 8 experts used, the third is one of a tied pair.
TEST(LlamaMoe, TiedRouterLogitsChooseTheLowerExpert) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for (const char* name : {"qwen3moe", "olmoe"}) {
    SCOPED_TRACE(name);
    const LlamaConfig c = moe(name, 8, 3);
    OverriddenSource src(make_random_source(c, DType::f32, seed));
    for (int64_t l = 0; l < c.layers; ++l) {
      std::vector<float>& router = src.values(cat("blk.", l, ".ffn_gate_inp.weight"));
      for (int64_t e = 1; e < c.experts; e += 2) {
        std::copy_n(router.begin() + (e - 1) * c.hidden, c.hidden, router.begin() + e * c.hidden);
      }
    }
    expect_moe_matches_reference(src, seed, 3);
  }
}

TEST(LlamaMoe, BadExpertConfigurationsAndTensorsAreClearErrors) {
  LlamaConfig c = moe("llama");
  c.experts_used = 9;
  EXPECT_THROW(c.validate(), Error);
  c = moe("llama");
  c.experts = 2000;
  EXPECT_THROW(c.validate(), Error);
  c = moe("llama", 80, 65);
  EXPECT_THROW(c.validate(), Error);
  c = moe("llama");
  c.expert_ffn = 0;
  EXPECT_THROW(c.validate(), Error);
  // A file whose config says 16 experts holds 8.
  auto src8 = make_random_source(moe("llama"), DType::f32, 1);
  class Misconfigured : public ModelSource {
   public:
    explicit Misconfigured(const ModelSource& inner) : inner_(inner), config_(inner.config()) { config_.experts = 16; }
    const LlamaConfig& config() const override { return config_; }
    std::optional<HostTensor> find(std::string_view n) const override { return inner_.find(n); }
    std::string describe() const override { return "misconfigured"; }

   private:
    const ModelSource& inner_;
    LlamaConfig config_;
  } bad(*src8);
  try {
    LlamaModel m(testing::cpu_backend(), bad, LoadOptions{.context = 8});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.ffn_gate_inp.weight"), std::string::npos) << e.what();
  }
}

// A decoded token reads the router and experts_used / experts of the experts' weights.
TEST(LlamaMoe, WeightBytesCountTheUsedExperts) {
  const LlamaConfig c = moe("llama", 8, 2);
  auto src = make_random_source(c, DType::f32, 5);
  LlamaModel m(testing::cpu_backend(), *src, LoadOptions{.context = 8});
  const size_t per_layer_experts = 3 * static_cast<size_t>(c.expert_ffn * c.hidden) * 4 * 2;  // 2 of 8 experts
  const size_t router = static_cast<size_t>(c.experts * c.hidden) * 4;
  const size_t attention = static_cast<size_t>((c.q_dim() + 2 * c.kv_dim()) * c.hidden + c.hidden * c.q_dim()) * 4;
  const size_t output = static_cast<size_t>(c.vocab_size * c.hidden) * 4;  // the LM head (the embedding is gathered)
  EXPECT_EQ(m.weight_bytes(), static_cast<size_t>(c.layers) * (per_layer_experts + router + attention) + output);
}

class LlamaMoeFile : public testing::TempDirTest {
 protected:
  LlamaMoeFile() : TempDirTest("onepass_moe_") {}
};

// A MoE GGUF file as make-model writes it (llama.cpp's tensor layout: expert-major
// [experts, rows, cols], the router in f32), read through the GGUF loader, against the
// float64 reference on the same file's tensors.
TEST_F(LlamaMoeFile, GgufMoeModelsMatchTheReference) {
  for (const char* name : {"qwen3moe-small", "olmoe-1b-7b", "mixtral-8x7b"}) {
    SCOPED_TRACE(name);
    ModelShape shape = *find_model_shape(name);
    shape.hidden = 64;
    shape.ffn = 64;
    shape.layers = 2;
    shape.heads = 4;
    shape.kv_heads = 2;
    shape.head_dim = shape.head_dim > 0 ? 32 : 0;
    shape.vocab = 300;
    shape.context = 64;
    shape.experts = 8;
    shape.experts_used = 2;
    shape.expert_ffn = shape.expert_ffn > 0 ? 32 : 0;
    const auto file = path(cat(name, ".gguf"));
    make_model(shape, DType::q8_0, file, {.seed = 11});
    const std::unique_ptr<ModelSource> src = open_model(file);
    ASSERT_EQ(src->config().experts, 8);
    const auto tokens = some_tokens(8, 11, 300);
    const auto want = reference_logits(*src, tokens, DType::f32);
    LoadOptions o;
    o.context = 16;
    o.max_batch = 4;
    o.kv_type = DType::f32;
    auto backend = testing::cpu_backend();
    // The SIMD paths round x to int16 per 256 values in the dense q8_0 products (as
    // LlamaVsReference allows).
    const double rtol = backend->info().isa != "portable" ? 2e-4 : 1e-5;
    LlamaModel model(backend, *src, o);
    expect_logits_near(model.prefill(std::span(tokens).first(6)), want[5], rtol, "prefill");
    for (size_t t = 6; t < tokens.size(); ++t) expect_logits_near(model.decode(tokens[t]), want[t], rtol, cat("decode ", t));
  }
}

// A source whose routers give every token well-separated expert logits: router row e is
// (e + 1) times one random vector, so the order of the experts depends only on the sign of
// that vector's product with x and consecutive logits differ by |v . x|: backends whose
// router inputs differ by f32 rounding choose the same experts unless v . x is that close to
// 0, where random routers have a near tie between some two experts far more often.
class SeparatedRouters : public ModelSource {
 public:
  SeparatedRouters(const ModelSource& inner, uint64_t seed) : inner_(inner) {
    const LlamaConfig& c = inner.config();
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(c.hidden));
    for (float& e : v) e = u(rng) / std::sqrt(static_cast<float>(c.hidden));
    router_.resize(static_cast<size_t>(c.experts * c.hidden));
    for (int64_t e = 0; e < c.experts; ++e) {
      for (int64_t i = 0; i < c.hidden; ++i) router_[static_cast<size_t>(e * c.hidden + i)] = static_cast<float>(e + 1) * v[static_cast<size_t>(i)];
    }
  }
  const LlamaConfig& config() const override { return inner_.config(); }
  std::optional<HostTensor> find(std::string_view name) const override {
    std::optional<HostTensor> t = inner_.find(name);
    if (t && name.ends_with("ffn_gate_inp.weight")) {
      t->dtype = DType::f32;
      t->data = router_.data();
      t->bytes = router_.size() * sizeof(float);
    }
    return t;
  }
  std::string describe() const override { return inner_.describe() + " (separated routers)"; }

 private:
  const ModelSource& inner_;
  std::vector<float> router_;
};

// MoE families on the GPU against the CPU (which the float64 reference checks) with f16
// experts, which both backends multiply with f32 activations: 16 experts with 4 used, two
// layers, prefill chunks of 8 tokens where most experts get no token, replayed decode
// steps, all within 1e-4 of the largest logit. Block-format experts: the
// GpuQuantizedExperts tests.
TEST(LlamaMoe, GpuMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device available";
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for (const char* name : {"llama", "qwen3moe", "olmoe"}) {
    SCOPED_TRACE(name);
    LlamaConfig c = moe(name, 16, 4);
    c.hidden = 256;
    c.expert_ffn = 256;
    c.head_dim = 64;
    c.rope_dims = 64;
    auto random = make_random_source(c, DType::f16, seed);
    const SeparatedRouters src(*random, seed);
    const LoadOptions o{.context = 64, .max_batch = 8};
    LlamaModel a(testing::cpu_backend(), src, o);
    LlamaModel b(make_cuda_backend(0, testing::test_options()), src, o);
    const auto tokens = some_tokens(20, seed, 97);
    auto compare = [&](std::span<const float> got, std::span<const float> want_f32,
                       const std::string& what) {
      const std::vector<double> want(want_f32.begin(), want_f32.end());
      expect_logits_near(got, want, 1e-4, what);
    };
    const auto pa = a.prefill(tokens);
    const std::vector<float> want(pa.begin(), pa.end());
    compare(b.prefill(tokens), want, "prefill");
    for (int i = 0; i < 5; ++i) {
      const auto la = a.decode(tokens[static_cast<size_t>(i)]);
      const std::vector<float> step(la.begin(), la.end());
      compare(b.decode(tokens[static_cast<size_t>(i)]), step, cat("decode ", i));
    }
  }
}

// ---- block-format experts ------------------------------------------------------------------
//
// The backends round the inputs of block-format expert products differently (CUDA: int8 per
// 32 values for one token, f16 for several; the CPU: hardly at all), so their logits
// differ by ~1%, and at a near tie of the router's logits that is enough to choose another
// expert, after which nothing compares. The model here cannot choose differently: one
// layer, every matrix but the experts f16 (the router f32), so the router's input comes
// from attention and embedding products that both backends compute to ~1e-6; and tokens
// chosen (against the float64 reference) so that at every position the experts_used-th
// router logit beats the next by kMinRouterGap, far more than that ~1e-6 can move it. With
// one layer the experts' output reaches only the logits of its own position, so a wrong
// product shows at the positions that use it and nowhere else.

// Router logits are O(1) (random rows of variance 1 / hidden times a normed x).
constexpr double kMinRouterGap = 1e-2;

// Experts (blk.N.ffn_{gate,up,down}_exps) of a block format, every other matrix f16 and
// the routers f32 (as GGUF files keep them).
class QuantizedExpertsSource : public ModelSource {
 public:
  QuantizedExpertsSource(const LlamaConfig& c, DType expert_type, uint64_t seed)
      : dense_(make_random_source(c, DType::f16, seed)),
        experts_(make_random_source(c, expert_type, seed)),
        expert_type_(expert_type) {}
  const LlamaConfig& config() const override { return dense_->config(); }
  std::optional<HostTensor> find(std::string_view name) const override {
    return (name.ends_with("_exps.weight") ? experts_ : dense_)->find(name);
  }
  std::string describe() const override {
    return cat(dense_->describe(), " (", dtype_name(expert_type_), " experts)");
  }

 private:
  std::unique_ptr<ModelSource> dense_, experts_;
  DType expert_type_;
};

// What every quantized-experts run does, position by position: evaluate() of the first 16
// tokens in chunks of 8 (the logits of every position), prefill chunks of 8, 8, 2 and 2
// tokens (the second chunk of each length replays the first's graph; a chunk of 2 gives at
// most 8 of the 32 experts a token), then 16 replayed decode steps. Every chunk has several
// tokens, so its expert products are the grouped ones (CUDA: mm_id_tc); a decode step has
// one (CUDA: mv_id_x8).
constexpr int kMoeEvaluated = 16;
constexpr int kMoePrefillChunks[] = {8, 8, 2, 2};
constexpr int kMoeDecodeSteps = 16;
constexpr int kMoeTokens = kMoeEvaluated + 8 + 8 + 2 + 2 + kMoeDecodeSteps;

LlamaConfig quantized_moe_config(const char* family) {
  LlamaConfig c = moe(family, 32, 4);
  c.layers = 1;
  c.hidden = 256;
  c.expert_ffn = 256;
  c.head_dim = 64;
  c.rope_dims = 64;
  return c;
}

const LoadOptions kQuantizedMoeLoad{.context = 64, .max_batch = 8, .kv_type = DType::f32};

// kMoeTokens tokens from `seed`, the token of every position within kMinRouterGap of a
// router tie (in the float64 reference) moved on until none is. A token changes the routing
// of its own and later positions only; the routing does not depend on the experts' weights
// (one layer), so one choice serves every expert type of a family.
std::vector<int32_t> tokens_away_from_router_ties(const LlamaConfig& c, uint64_t seed) {
  // QuantizedExpertsSource's dense tensors, which alone decide the routing.
  const auto src = make_random_source(c, DType::f16, seed);
  const auto vocab = static_cast<int32_t>(c.vocab_size);
  std::vector<int32_t> tokens = some_tokens(kMoeTokens, seed, vocab);
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::vector<double> gaps;
    reference_logits(*src, tokens, DType::f32, {.router_gaps = &gaps});
    bool moved = false;
    for (size_t t = 0; t < tokens.size(); ++t) {
      if (gaps[t] < kMinRouterGap) {
        tokens[t] = (tokens[t] + 1) % vocab;
        moved = true;
      }
    }
    if (!moved) return tokens;
  }
  ADD_FAILURE() << "no tokens keep every router choice of " << src->describe() << " "
                << kMinRouterGap << " from a tie";
  return tokens;
}

// Rows of logits and the positions they follow.
struct LogitRows {
  std::vector<int64_t> positions;
  std::vector<std::vector<double>> rows;
  void add(int64_t position, std::span<const float> logits) {
    positions.push_back(position);
    rows.emplace_back(logits.begin(), logits.end());
  }
};

struct MoeRunLogits {
  LogitRows prefill, decode;  // grouped expert products; one-token ones
};

MoeRunLogits run_quantized_moe(LlamaModel& model, const std::vector<int32_t>& tokens) {
  const int64_t vocab = model.config().vocab_size;
  const std::span<const int32_t> all(tokens);
  MoeRunLogits r;
  const auto evaluated = model.evaluate(all.first(kMoeEvaluated));
  for (int64_t p = 0; p < kMoeEvaluated; ++p) {
    r.prefill.add(p, evaluated.subspan(static_cast<size_t>(p * vocab), static_cast<size_t>(vocab)));
  }
  size_t next = kMoeEvaluated;
  for (int chunk : kMoePrefillChunks) {
    const auto logits = model.prefill(all.subspan(next, static_cast<size_t>(chunk)));
    next += static_cast<size_t>(chunk);
    r.prefill.add(static_cast<int64_t>(next) - 1, logits);
  }
  for (; next < tokens.size(); ++next) {
    r.decode.add(static_cast<int64_t>(next), model.decode(tokens[next]));
  }
  return r;
}

// The reference's rows at `like`'s positions.
LogitRows reference_rows(const std::vector<std::vector<double>>& reference, const LogitRows& like) {
  LogitRows r;
  r.positions = like.positions;
  for (int64_t p : like.positions) r.rows.push_back(reference[static_cast<size_t>(p)]);
  return r;
}

// How far rows of logits are from the wanted ones: the lowest correlation of a row and the
// largest error of one logit relative to its row's largest |logit|, with their positions.
struct LogitDistance {
  double correlation = 1;
  int64_t correlation_at = -1;
  double relative_error = 0;
  int64_t relative_error_at = -1;
};

LogitDistance logit_distance(const LogitRows& got, const LogitRows& want) {
  EXPECT_EQ(got.positions, want.positions);
  LogitDistance d;
  for (size_t i = 0; i < got.rows.size() && i < want.rows.size(); ++i) {
    const std::vector<float> row(got.rows[i].begin(), got.rows[i].end());
    const std::vector<double>& w = want.rows[i];
    const double correlation = logit_correlation(row, w);
    if (correlation < d.correlation) {
      d.correlation = correlation;
      d.correlation_at = got.positions[i];
    }
    double scale = 0, err = 0;
    for (size_t j = 0; j < w.size(); ++j) {
      scale = std::max(scale, std::abs(w[j]));
      err = std::max(err, std::abs(got.rows[i][j] - w[j]));
    }
    if (err / scale > d.relative_error) {
      d.relative_error = err / scale;
      d.relative_error_at = got.positions[i];
    }
  }
  return d;
}

std::ostream& operator<<(std::ostream& os, const LogitDistance& d) {
  return os << "lowest correlation 1 - " << 1 - d.correlation << " (position " << d.correlation_at
            << "), largest relative error " << d.relative_error << " (position "
            << d.relative_error_at << ")";
}

// Bars of one path of the expert products between two backends.
struct LogitBars {
  double correlation;
  double relative_error;
};

void expect_within(const LogitDistance& d, const LogitBars& bars, const std::string& what) {
  EXPECT_GT(d.correlation, bars.correlation) << what << ": " << d;
  EXPECT_LT(d.relative_error, bars.relative_error) << what << ": " << d;
}

// CUDA against the CPU, per path. Prefill's grouped products round x and the dequantized
// weights to f16; a decode step's round x to int8 per 32 values (d = amax / 127).
// QuantizedExpertsMatchTheReference checks that the float64 reference with that rounding
// stays within a third of these bars (its largest relative error is ~4e-4 with f16, ~1e-2
// with int8), while an expert whose weights are another's, or 64 rows of one expert zeroed,
// cross both paths' bars at every expert type (the 64 zeroed rows by 1 - correlation of
// 1e-3 or more). On an H200 the decode path's lowest correlation over the positions of one
// seed was 1 - 2.0e-4, above what the simulated rounding gives (2.4e-5 over 12 seeds), so
// its bar is 1 - 5e-4.
constexpr LogitBars kMoePrefillBars{0.999999, 3e-3};
constexpr LogitBars kMoeDecodeBars{0.9995, 5e-2};

// Within a third of `bars`.
void expect_well_within(const LogitDistance& d, const LogitBars& bars, const std::string& what) {
  EXPECT_LT(1 - d.correlation, (1 - bars.correlation) / 3) << what << ": " << d;
  EXPECT_LT(d.relative_error, bars.relative_error / 3) << what << ": " << d;
}

// Rounds each 32 values to int8 with scale amax / 127, as CUDA's one-token expert products
// stage x.
void round_to_int8_blocks(std::vector<double>& v) {
  for (size_t b = 0; b < v.size(); b += 32) {
    const size_t end = std::min(v.size(), b + 32);
    float amax = 0;
    for (size_t i = b; i < end; ++i) amax = std::max(amax, std::abs(static_cast<float>(v[i])));
    if (amax == 0) continue;
    const float d = amax / 127.0f, inv = 127.0f / amax;
    for (size_t i = b; i < end; ++i) {
      v[i] = std::nearbyint(static_cast<float>(v[i]) * inv) * static_cast<double>(d);
    }
  }
}

void round_to_f16(std::vector<double>& v) {
  for (double& e : v) e = testing::round_to(DType::f16, static_cast<float>(e));
}

constexpr DType kQuantizedExpertTypes[] = {DType::q8_0, DType::q4_0, DType::q4_k};
constexpr const char* kMoeFamilies[] = {"llama", "qwen3moe", "olmoe"};

// The CPU on block-format experts against the float64 reference (the GPU tests compare
// with the CPU), every position of both paths; and the GPU bars against the rounding of
// correct CUDA kernels: the reference with CUDA's rounding of the expert inputs (and, for
// the grouped products, of the weights) stays well within them.
TEST(LlamaMoe, QuantizedExpertsMatchTheReference) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for (const char* name : kMoeFamilies) {
    const LlamaConfig c = quantized_moe_config(name);
    const auto tokens = tokens_away_from_router_ties(c, seed);
    for (DType type : kQuantizedExpertTypes) {
      SCOPED_TRACE(cat(name, " ", dtype_name(type), " experts"));
      const QuantizedExpertsSource src(c, type, seed);
      const auto reference = reference_logits(src, tokens, DType::f32);
      LlamaModel model(testing::cpu_backend(), src, kQuantizedMoeLoad);
      const MoeRunLogits cpu = run_quantized_moe(model, tokens);
      // The CPU's expert products take f32 x: ~4e-7 of the largest logit from float64.
      constexpr LogitBars kCpuBars{1 - 1e-8, 1e-5};
      expect_within(logit_distance(cpu.prefill, reference_rows(reference, cpu.prefill)), kCpuBars,
                    "CPU prefill");
      expect_within(logit_distance(cpu.decode, reference_rows(reference, cpu.decode)), kCpuBars,
                    "CPU decode");
      const auto f16 = reference_logits(
          src, tokens, DType::f32,
          {.round_expert_input = round_to_f16, .round_expert_weights = round_to_f16});
      const auto int8 =
          reference_logits(src, tokens, DType::f32, {.round_expert_input = round_to_int8_blocks});
      expect_well_within(
          logit_distance(reference_rows(f16, cpu.prefill), reference_rows(reference, cpu.prefill)),
          kMoePrefillBars, "f16 rounding of the grouped products");
      expect_well_within(
          logit_distance(reference_rows(int8, cpu.decode), reference_rows(reference, cpu.decode)),
          kMoeDecodeBars, "int8 rounding of the one-token products");
    }
  }
}

// Both GPU tests: the quantized-experts run on the CPU and on CUDA, per family and type.
void for_each_quantized_moe_on_gpu(
    const std::function<void(const MoeRunLogits& gpu, const MoeRunLogits& cpu)>& check) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for (const char* name : kMoeFamilies) {
    const LlamaConfig c = quantized_moe_config(name);
    const auto tokens = tokens_away_from_router_ties(c, seed);
    for (DType type : kQuantizedExpertTypes) {
      SCOPED_TRACE(cat(name, " ", dtype_name(type), " experts"));
      const QuantizedExpertsSource src(c, type, seed);
      LlamaModel a(testing::cpu_backend(), src, kQuantizedMoeLoad);
      LlamaModel b(make_cuda_backend(0, testing::test_options()), src, kQuantizedMoeLoad);
      const MoeRunLogits cpu = run_quantized_moe(a, tokens);
      check(run_quantized_moe(b, tokens), cpu);
    }
  }
}

// The grouped expert products of several tokens (CUDA: mm_id_tc) against the CPU: every
// position of evaluate() and the last of each prefill chunk.
TEST(LlamaMoe, GpuQuantizedExpertsPrefillMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device available";
  for_each_quantized_moe_on_gpu([](const MoeRunLogits& gpu, const MoeRunLogits& cpu) {
    expect_within(logit_distance(gpu.prefill, cpu.prefill), kMoePrefillBars,
                  "prefill (grouped products)");
  });
}

// The one-token expert products of decode steps (CUDA: mv_id_x8) against the CPU.
TEST(LlamaMoe, GpuQuantizedExpertsDecodeMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device available";
  for_each_quantized_moe_on_gpu([](const MoeRunLogits& gpu, const MoeRunLogits& cpu) {
    expect_within(logit_distance(gpu.decode, cpu.decode), kMoeDecodeBars,
                  "decode (one-token products)");
  });
}


// Mean KL of the next-token distributions of `got` ([tokens, vocab] logits) against `want`.
double mean_kl(const std::vector<std::vector<double>>& want, std::span<const float> got, size_t vocab) {
  double total = 0;
  for (size_t t = 0; t < want.size(); ++t) {
    const std::vector<double>& r = want[t];
    const std::span<const float> g = got.subspan(t * vocab, vocab);
    const double r_max = *std::max_element(r.begin(), r.end());
    const double g_max = *std::max_element(g.begin(), g.end());
    double r_sum = 0, g_sum = 0;
    for (size_t i = 0; i < vocab; ++i) {
      r_sum += std::exp(r[i] - r_max);
      g_sum += std::exp(static_cast<double>(g[i]) - g_max);
    }
    double kl = 0;
    for (size_t i = 0; i < vocab; ++i) {
      const double p = r[i] - r_max - std::log(r_sum), q = static_cast<double>(g[i]) - g_max - std::log(g_sum);
      kl += std::exp(p) * (p - q);
    }
    total += kl;
  }
  return total / static_cast<double>(want.size());
}

// The default model (q4_1, a q8_0 LM head) prefilling English text in one chunk, so every
// product is a matrix-matrix one, against the float64 reference: the CPU's own path (on AMX
// machines the tiles, x in int16 per 32 values) and the AMX path on the plain C++ model of
// the tiles (src/backends/cpu/kernels/matmul/amx_tiles.inl) both within mean KL 1e-4.
TEST(DefaultModelPrefill, StaysWithinTheKlBoundOfFloat64) {
  const char* path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not installed (scripts/setup)";
  auto src = open_model(path);
  Tokenizer tok(*src->tokenizer_data());
  const std::vector<int32_t> tokens = tok.encode(
      "The river rises in the hills to the north of the town and flows south for about forty miles before it "
      "reaches the sea. For most of the year it is slow and shallow, and children wade across it in the summer "
      "to reach the woods on the far bank. In the spring the water rises quickly.");
  ASSERT_GT(tokens.size(), static_cast<size_t>(ops::kMatmulMvMaxRows));
  const auto want = reference_logits(*src, tokens, DType::f32);
  const auto vocab = static_cast<size_t>(src->config().vocab_size);
  auto backend = testing::cpu_backend(Options::defaults());
  auto kl_of_run = [&] {
    LlamaModel model(backend, *src, LoadOptions{.context = 128, .kv_type = DType::f32});
    return mean_kl(want, model.evaluate(tokens), vocab);
  };
  const double own = kl_of_run();
  cpu::set_amx_emulation(true);
  const double emulated = kl_of_run();
  cpu::set_amx_emulation(false);
  std::printf("[kl] default model, %zu tokens in one prefill: mean KL vs float64 %.3g (ISA path %s), %.3g (AMX, emulated)\n",
              tokens.size(), own, backend->info().isa.c_str(), emulated);
  EXPECT_LE(own, 1e-4);
  EXPECT_LE(emulated, 1e-4);
}

// Random q4_0, q4_1 and q8_0 models (every matrix in the format, the LM head included)
// prefilling 40 tokens in one chunk (mm products of 40 rows: two full panels of 16 and a
// partial one) on the AMX path, the tiles where this CPU has them, else their model: every
// position's logits against the float64 reference within the tolerance of the int16 x of
// LlamaVsReference (x per 32 values is within its per-256 bound), and not the bits of the
// vector set's products (so the AMX path ran).
TEST(AmxPrefill, RandomModelsMatchFloat64) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const bool tiles = cpu::isa_supported(cpu::Isa::amx);
  const cpu::Isa saved = cpu::active_isa();
  const cpu::Isa vector = cpu::vector_isa(saved);
  LlamaConfig c = tiny();
  c.hidden = 128;
  c.ffn = 192;
  c.vocab_size = 300;
  c.head_dim = 32;
  c.rope_dims = 32;
  for (DType t : {DType::q4_0, DType::q4_1, DType::q8_0}) {
    SCOPED_TRACE(dtype_name(t));
    auto src = make_random_source(c, t, seed);
    const auto tokens = some_tokens(40, seed, static_cast<int>(c.vocab_size));
    const auto want = reference_logits(*src, tokens, DType::f32);
    auto backend = testing::cpu_backend();
    auto run = [&] {
      LlamaModel model(backend, *src, LoadOptions{.context = 64, .kv_type = DType::f32});
      const std::span<const float> logits = model.evaluate(tokens);
      return std::vector<float>(logits.begin(), logits.end());
    };
    std::vector<float> amx;
    if (tiles) {
      cpu::set_active_isa(cpu::Isa::amx);
      amx = run();
    } else {
      cpu::set_amx_emulation(true);
      amx = run();
      cpu::set_amx_emulation(false);
    }
    cpu::set_active_isa(vector);
    const std::vector<float> vector_logits = run();
    cpu::set_active_isa(saved);
    const auto vocab = static_cast<size_t>(c.vocab_size);
    ASSERT_EQ(amx.size(), tokens.size() * vocab);
    for (size_t p = 0; p < tokens.size(); ++p) {
      expect_logits_near(std::span<const float>(amx).subspan(p * vocab, vocab), want[p], 5e-4, cat("position ", p));
    }
    EXPECT_NE(std::memcmp(amx.data(), vector_logits.data(), amx.size() * sizeof(float)), 0)
        << "the AMX path gave the vector set's bits";
    std::printf("[amx] random %s model, %zu tokens in one prefill on %s: mean KL vs float64 %.3g\n", std::string(dtype_name(t)).c_str(),
                tokens.size(), tiles ? "the tiles" : "the model of the tiles", mean_kl(want, amx, vocab));
  }
}
}  // namespace
}  // namespace onepass::model
