#include "onepass/model/model_source.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "onepass/core/error.h"
#include "onepass/core/half.h"
#include "onepass/model/architecture.h"
#include "onepass/ops/quant.h"

namespace onepass::model {

void LlamaConfig::validate(std::string_view source) const {
  const char* where = "model";
  const std::string in = source.empty() ? std::string() : cat(source, ": ");
  check(find_architecture(architecture) != nullptr, where, in, "unsupported architecture '", architecture,
        "' (supported: ", architecture_names(), ")");
  auto in_range = [&](const char* what, int64_t value, int64_t max) {
    check(value >= 1 && value <= max, where, in, what, " is ", value, ", expected 1..", max);
  };
  in_range("the vocabulary size", vocab_size, kMaxVocab);
  in_range("hidden (the embedding length)", hidden, kMaxHidden);
  in_range("ffn (the feed-forward length)", ffn, kMaxFfn);
  in_range("the layer count", layers, kMaxLayers);
  in_range("the head count", heads, kMaxHeads);
  in_range("the key/value head count", kv_heads, kMaxHeads);
  check(heads % kv_heads == 0, where, in, "heads (", heads, ") must be a multiple of kv_heads (",
        kv_heads, ")");
  check(head_dim > 0 && head_dim % 2 == 0 && head_dim <= 256, where, in,
        "head_dim must be even and in 2..256, got ", head_dim);
  check(rope_dims > 0 && rope_dims % 2 == 0 && rope_dims <= head_dim, where, in,
        "rope dims must be even and in 2..head_dim (", head_dim, "), got ", rope_dims);
  check(train_context > 0, where, in, "the training context must be positive, got ",
        train_context);
  check(norm_eps > 0 && std::isfinite(norm_eps), where, in,
        "norm epsilon must be positive and finite, got ", norm_eps);
  check(rope_theta > 0 && std::isfinite(rope_theta), where, in,
        "rope theta must be positive and finite, got ", rope_theta);
  check(rope_freq_scale > 0 && std::isfinite(rope_freq_scale), where, in,
        "the rope frequency scale (1 / linear factor) must be positive and finite, got ",
        rope_freq_scale);
  auto finite_nonnegative = [&](const char* what, float value) {
    check(value >= 0 && std::isfinite(value), where, in, what, " must be finite and >= 0, got ", value);
  };
  finite_nonnegative("the attention scale", attention_scale);
  finite_nonnegative("the attention softcap", attn_softcap);
  finite_nonnegative("the final logit softcap", final_softcap);
  finite_nonnegative("the local rope theta", rope_theta_local);
  check(embedding_scale > 0 && std::isfinite(embedding_scale), where, in,
        "the embedding scale must be positive and finite, got ", embedding_scale);
  check(std::isfinite(norm_weight_offset), where, in, "the norm weight offset must be finite, got ",
        norm_weight_offset);
  check(!(qkv_bias && fused_qkv_tensor), where, in, "a Q/K/V bias with a fused attn_qkv tensor is not supported");
  check(sliding_window >= 0 && sliding_window <= (int64_t{1} << 30), where, in,
        "the sliding window must be in 0..2^30, got ", sliding_window);
  check(sliding_window_period >= 0 && sliding_window_period <= kMaxLayers, where, in,
        "the sliding-window period must be in 0..", kMaxLayers, ", got ", sliding_window_period);
  check(!qk_norm_whole || qk_norm, where, in, "a whole-vector QK norm needs qk_norm");
  check(experts >= 0 && experts <= kMaxExperts, where, in, "the expert count must be in 0..", kMaxExperts,
        ", got ", experts);
  if (experts > 0) {
    in_range("the used expert count", experts_used, std::min(experts, kMaxExpertsUsed));
    in_range("expert_ffn (the expert feed-forward length)", expert_ffn, kMaxFfn);
    check(!fused_gate_up_tensor, where, in, "experts with a fused gate/up tensor are not supported");
  }
}

float LlamaConfig::attention_scale_or_default() const {
  return attention_scale > 0 ? attention_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

std::string LlamaConfig::describe() const {
  return cat(architecture, ": vocab ", vocab_size, ", hidden ", hidden, ", ffn ", ffn, ", layers ", layers,
             ", heads ", heads, "/", kv_heads, " (dim ", head_dim, ", rope ", rope_dims, rope_neox ? " neox" : "",
             ", theta ", rope_theta, ")", tied_output ? ", tied output" : "", qkv_bias ? ", qkv bias" : "",
             qk_norm ? ", qk norm" : "", post_norms ? ", post norms" : "",
             activation == FfnActivation::gelu_tanh ? ", gelu" : "",
             sliding_window > 0 ? cat(", window ", sliding_window, "/", sliding_window_period) : std::string(),
             experts > 0 ? cat(", experts ", experts_used, "/", experts, " (ffn ", expert_ffn,
                               expert_weighting == ExpertWeighting::softmax_all ? ", softmax over all)" : ")")
                         : std::string());
}

HostTensor ModelSource::require(std::string_view name) const {
  std::optional<HostTensor> t = find(name);
  check(t.has_value(), "model", describe(), " has no tensor '", file_name(name), "'");
  return *t;
}

namespace {

class RandomSource final : public ModelSource {
 public:
  RandomSource(const LlamaConfig& config, DType type, uint64_t seed) : config_(config), rng_(seed) {
    config_.validate();
    const int64_t h = config_.hidden;
    add_linear("token_embd.weight", type, config_.vocab_size, h, 1.0f);
    for (int64_t l = 0; l < config_.layers; ++l) {
      const std::string p = cat("blk.", l, ".");
      add_norm(p + "attn_norm.weight", h);
      if (config_.fused_qkv_tensor) {
        add_linear(p + "attn_qkv.weight", type, config_.q_dim() + 2 * config_.kv_dim(), h);
      } else {
        add_linear(p + "attn_q.weight", type, config_.q_dim(), h);
        add_linear(p + "attn_k.weight", type, config_.kv_dim(), h);
        add_linear(p + "attn_v.weight", type, config_.kv_dim(), h);
      }
      if (config_.qk_norm) {
        add_norm(p + "attn_q_norm.weight", config_.qk_norm_whole ? config_.q_dim() : config_.head_dim);
        add_norm(p + "attn_k_norm.weight", config_.qk_norm_whole ? config_.kv_dim() : config_.head_dim);
      }
      add_linear(p + "attn_output.weight", type, h, config_.q_dim());
      if (config_.post_norms) {
        add_norm(p + "post_attention_norm.weight", h);
        add_norm(p + "post_ffw_norm.weight", h);
      }
      if (config_.qkv_bias) {
        add_vector(p + "attn_q.bias", config_.q_dim(), 0.1f);
        add_vector(p + "attn_k.bias", config_.kv_dim(), 0.1f);
        add_vector(p + "attn_v.bias", config_.kv_dim(), 0.1f);
      }
      add_norm(p + "ffn_norm.weight", h);
      if (config_.moe()) {
        const int64_t e = config_.experts, f = config_.expert_ffn;
        add_linear(p + "ffn_gate_inp.weight", DType::f32, e, h);  // the router stays f32, as in GGUF files
        add_experts(p + "ffn_gate_exps.weight", type, e, f, h);
        add_experts(p + "ffn_up_exps.weight", type, e, f, h);
        add_experts(p + "ffn_down_exps.weight", type, e, h, f);
      } else if (config_.fused_gate_up_tensor) {
        add_linear(p + "ffn_up.weight", type, 2 * config_.ffn, h);
      } else {
        add_linear(p + "ffn_gate.weight", type, config_.ffn, h);
        add_linear(p + "ffn_up.weight", type, config_.ffn, h);
      }
      if (!config_.moe()) add_linear(p + "ffn_down.weight", type, h, config_.ffn);
    }
    add_norm("output_norm.weight", h);
    if (!config_.tied_output) add_linear("output.weight", type, config_.vocab_size, h);
  }

  const LlamaConfig& config() const override { return config_; }
  std::optional<HostTensor> find(std::string_view name) const override {
    auto it = tensors_.find(std::string(name));
    if (it == tensors_.end()) return std::nullopt;
    HostTensor t = it->second.info;
    t.data = it->second.bytes.data();
    return t;
  }
  std::string describe() const override { return "random model (" + config_.describe() + ")"; }

 private:
  struct Stored {
    HostTensor info;
    std::vector<uint8_t> bytes;
  };

  std::vector<float> uniform(size_t n, float scale) {
    std::uniform_real_distribution<float> d(-scale, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng_);
    return v;
  }

  void store(const std::string& name, DType type, Shape shape, const std::vector<float>& values) {
    Stored s;
    s.info.name = name;
    s.info.dtype = type;
    s.info.shape = shape;
    s.info.bytes = static_cast<size_t>(shape.rows()) * dtype_bytes(type, shape.cols());
    s.bytes.resize(s.info.bytes);
    ops::quantize(type, values.data(), static_cast<int64_t>(values.size()), s.bytes.data());
    tensors_[name] = std::move(s);
  }

  // Weights uniform with variance 1/in (scale sqrt(3/in)) keep activations O(1).
  void add_linear(const std::string& name, DType type, int64_t out, int64_t in, float scale = 0.0f) {
    const float s = scale > 0 ? scale : std::sqrt(3.0f / static_cast<float>(in));
    store(name, type, Shape{out, in}, uniform(static_cast<size_t>(out * in), s));
  }
  // Experts' weights [experts, out, in], each expert like a linear layer [out, in].
  void add_experts(const std::string& name, DType type, int64_t experts, int64_t out, int64_t in) {
    const float s = std::sqrt(3.0f / static_cast<float>(in));
    store(name, type, Shape{experts, out, in}, uniform(static_cast<size_t>(experts * out * in), s));
  }
  void add_norm(const std::string& name, int64_t n) {
    std::vector<float> v = uniform(static_cast<size_t>(n), 0.2f);
    for (float& x : v) x += 1.0f;
    store(name, DType::f32, Shape{n}, v);
  }
  void add_vector(const std::string& name, int64_t n, float scale) {
    store(name, DType::f32, Shape{n}, uniform(static_cast<size_t>(n), scale));
  }

  LlamaConfig config_;
  std::mt19937_64 rng_;
  std::map<std::string, Stored> tensors_;
};

}  // namespace

std::unique_ptr<ModelSource> make_random_source(const LlamaConfig& config, DType weight_type, uint64_t seed) {
  return std::make_unique<RandomSource>(config, weight_type, seed);
}

}  // namespace onepass::model
