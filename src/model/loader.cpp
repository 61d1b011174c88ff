#include "onepass/model/loader.h"

#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "model/mlx_config_json.h"
#include "onepass/core/error.h"
#include "onepass/core/half.h"
#include "onepass/model/architecture.h"
#include "onepass/model/mlx_model.h"
#include "onepass/ops/quant.h"

namespace onepass::model {
namespace {

HostTensor host_tensor(const TensorInfo& t) {
  check(t.unsupported_type.empty(), "model", "tensor '", t.name, "' has type ", t.unsupported_type,
        ", which onepass cannot load (it computes with ", ops::weight_type_names(), ")");
  HostTensor h;
  h.name = t.name;
  h.dtype = t.dtype;
  h.shape = t.shape;
  h.data = t.data;
  h.bytes = t.bytes;
  return h;
}

// Llama 3.1 "llama3" RoPE scaling: per-frequency factors that stretch the low
// frequencies by `factor`, leave the high ones and interpolate between.
std::vector<float> llama3_rope_factors(int64_t rope_dims, float theta, float factor, float low_freq_factor,
                                       float high_freq_factor, float original_context) {
  std::vector<float> out(static_cast<size_t>(rope_dims / 2));
  const double low_wavelen = original_context / low_freq_factor;
  const double high_wavelen = original_context / high_freq_factor;
  for (int64_t i = 0; i < rope_dims / 2; ++i) {
    const double freq = std::pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / static_cast<double>(rope_dims));
    const double wavelen = 2.0 * M_PI / freq;
    double f = 1.0;
    if (wavelen > low_wavelen) {
      f = factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      f = 1.0 / ((1.0 - smooth) / factor + smooth);
    }
    out[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return out;
}

struct Llama3Scaling {
  float factor = 8.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  float original_context = 8192.0f;
};

// The block index of a per-layer tensor name ("blk.12.attn_q.weight" with prefix "blk."),
// or nullopt for other names.
std::optional<int64_t> block_of(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix)) return std::nullopt;
  name.remove_prefix(prefix.size());
  int64_t block = 0;
  size_t digits = 0;
  while (digits < name.size() && name[digits] >= '0' && name[digits] <= '9' && digits < 12) {
    block = block * 10 + (name[digits] - '0');
    ++digits;
  }
  if (digits == 0 || digits == name.size() || name[digits] != '.') return std::nullopt;
  return block;
}

// A file of more blocks than its configuration says would load as a shorter model.
void check_no_extra_blocks(const std::string& name, std::string_view prefix, int64_t layers,
                           std::string_view where, const std::string& source,
                           std::string_view key) {
  const std::optional<int64_t> block = block_of(name, prefix);
  check(!block || *block < layers, where, source, ": tensor '", name, "' belongs to block ",
        block.value_or(0), ", but ", key, " is ", layers, " (expected blocks 0..", layers - 1,
        ")");
}

// ---- GGUF --------------------------------------------------------------------------------

class GgufSource final : public ModelSource {
 public:
  explicit GgufSource(GgufFile file) : file_(std::move(file)) { config_ = config_from_gguf(file_); }

  const LlamaConfig& config() const override { return config_; }
  std::optional<HostTensor> find(std::string_view name) const override {
    const TensorInfo* t = file_.find_tensor(name);
    if (t == nullptr) return std::nullopt;
    return host_tensor(*t);
  }
  std::optional<std::vector<float>> rope_freq_factors() const override {
    const TensorInfo* t = file_.find_tensor("rope_freqs.weight");
    if (t == nullptr) return std::nullopt;
    check(t->dtype == DType::f32, "gguf", file_.source(), ": rope_freqs.weight must be f32");
    const auto* p = static_cast<const float*>(t->data);
    return std::vector<float>(p, p + t->shape.numel());
  }
  std::optional<TokenizerData> tokenizer_data() const override {
    if (!file_.has("tokenizer.ggml.model")) return std::nullopt;
    TokenizerData d = tokenizer_data_from_gguf(file_);
    // As llama.cpp: one token per embedding row. More tokens would name rows that do not
    // exist; fewer would let the model produce ids the vocabulary cannot print.
    check(static_cast<int64_t>(d.tokens.size()) == config_.vocab_size, "gguf", file_.source(),
          ": the vocabulary (tokenizer.ggml.tokens) has ", d.tokens.size(),
          " tokens, but the model has ", config_.vocab_size,
          " embedding rows; expected one token per row");
    file_.release_metadata_pages();  // the vocabulary is copied out: its pages need not stay resident
    return d;
  }
  std::string describe() const override { return file_.source(); }
  // Every tensor find() returns points into the file's mapping.
  void release(const HostTensor& tensor) const override {
    MappedFile::release_pages(tensor.data, tensor.bytes);
  }

 private:
  GgufFile file_;
  LlamaConfig config_;
};

// ---- MLX ---------------------------------------------------------------------------------

// GGUF tensor name -> mlx-lm (Hugging Face) module name.
std::string hf_name(std::string_view gguf) {
  static const std::map<std::string, std::string, std::less<>> kFixed = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},
  };
  if (auto it = kFixed.find(gguf); it != kFixed.end()) return it->second;
  static const std::map<std::string, std::string, std::less<>> kLayer = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
  };
  if (gguf.rfind("blk.", 0) == 0) {
    const size_t dot = gguf.find('.', 4);
    if (dot != std::string_view::npos) {
      const std::string_view layer = gguf.substr(4, dot - 4);
      if (auto it = kLayer.find(gguf.substr(dot + 1)); it != kLayer.end()) {
        return cat("model.layers.", layer, ".", it->second);
      }
    }
  }
  return std::string(gguf);
}

class MlxSource final : public ModelSource {
 public:
  explicit MlxSource(MlxModel model) : model_(std::move(model)) {
    const nlohmann::json& j = model_.config().json;
    const std::string where = "mlx";
    const std::string file = (model_.dir() / "config.json").string();
    // Typed reads that name the key and the file instead of nlohmann's bare message.
    auto shown = [](const nlohmann::json& v) {
      std::string text = v.dump();
      return text.size() > 40 ? text.substr(0, 40) + "..." : text;
    };
    auto integer = [&](const nlohmann::json& obj, const char* key,
                       std::optional<int64_t> fallback) -> int64_t {
      const auto it = obj.find(key);
      if (it == obj.end() || it->is_null()) {
        check(fallback.has_value(), where, file, ": missing integer '", key, "'");
        return *fallback;
      }
      check(it->is_number_integer(), where, file, ": '", key, "' is ", shown(*it),
            ", expected an integer");
      check(!it->is_number_unsigned() || it->get<uint64_t>() <= uint64_t{INT64_MAX}, where, file,
            ": '", key, "' is ", shown(*it), ", out of range");
      return it->get<int64_t>();
    };
    auto number = [&](const nlohmann::json& obj, const char* key, float fallback) -> float {
      const auto it = obj.find(key);
      if (it == obj.end() || it->is_null()) return fallback;
      check(it->is_number(), where, file, ": '", key, "' is ", shown(*it), ", expected a number");
      const double value = it->get<double>();
      check(std::isfinite(value) && std::abs(value) <= 3.0e38, where, file, ": '", key, "' is ",
            shown(*it), ", expected a finite number within the float range");
      return static_cast<float>(value);
    };
    auto boolean = [&](const char* key, bool fallback) -> bool {
      const auto it = j.find(key);
      if (it == j.end() || it->is_null()) return fallback;
      check(it->is_boolean(), where, file, ": '", key, "' is ", shown(*it),
            ", expected true or false");
      return it->get<bool>();
    };
    auto text = [&](const nlohmann::json& obj, const char* key, std::string fallback) {
      const auto it = obj.find(key);
      if (it == obj.end() || it->is_null()) return fallback;
      check(it->is_string(), where, file, ": '", key, "' is ", shown(*it), ", expected a string");
      return it->get<std::string>();
    };
    const std::string type = text(j, "model_type", "llama");
    check(type == "llama" || type == "mistral" || type == "qwen2", where, model_.dir().string(),
          ": model_type '", type, "' is not supported (llama, mistral, qwen2)");
    config_.architecture = type == "qwen2" ? "qwen2" : "llama";
    config_.vocab_size = integer(j, "vocab_size", std::nullopt);
    config_.hidden = integer(j, "hidden_size", std::nullopt);
    config_.ffn = integer(j, "intermediate_size", std::nullopt);
    config_.layers = integer(j, "num_hidden_layers", std::nullopt);
    config_.heads = integer(j, "num_attention_heads", std::nullopt);
    config_.kv_heads = integer(j, "num_key_value_heads", config_.heads);
    const bool head_dim_given = j.contains("head_dim") && !j["head_dim"].is_null();
    // Without head_dim, hidden = heads x head_dim; validate() rejects heads <= 0 first.
    config_.head_dim = head_dim_given ? integer(j, "head_dim", std::nullopt)
                       : config_.heads > 0 ? config_.hidden / config_.heads
                                           : 0;
    config_.rope_dims = config_.head_dim;
    config_.rope_theta = number(j, "rope_theta", 10000.0f);
    config_.norm_eps = number(j, "rms_norm_eps", 1e-5f);
    config_.train_context = integer(j, "max_position_embeddings", int64_t{4096});
    config_.rope_neox = true;  // Hugging Face layout: rotate_half
    config_.qkv_bias = type == "qwen2";
    config_.tied_output = boolean("tie_word_embeddings", false) || model_.find("lm_head.weight") == nullptr;
    std::optional<Llama3Scaling> llama3;
    if (const auto scaling = j.find("rope_scaling"); scaling != j.end() && !scaling->is_null()) {
      const nlohmann::json& s = *scaling;
      check(s.is_object(), where, file, ": 'rope_scaling' is ", shown(s), ", expected an object");
      const std::string kind = text(s, "rope_type", text(s, "type", std::string()));
      if (kind == "llama3") {
        llama3 = Llama3Scaling{number(s, "factor", 8.0f), number(s, "low_freq_factor", 1.0f),
                               number(s, "high_freq_factor", 4.0f),
                               number(s, "original_max_position_embeddings", 8192.0f)};
        check(llama3->factor > 0 && llama3->low_freq_factor > 0 && llama3->original_context > 0 &&
                  llama3->high_freq_factor > llama3->low_freq_factor,
              where, file, ": rope_scaling llama3 needs factor > 0, low_freq_factor > 0, "
              "high_freq_factor > low_freq_factor and original_max_position_embeddings > 0");
      } else if (kind == "linear") {
        const float factor = number(s, "factor", 1.0f);
        check(factor > 0, where, file, ": rope_scaling factor is ", factor,
              ", expected a positive number");
        config_.rope_freq_scale = 1.0f / factor;
      } else if (!kind.empty()) {
        fail(where, model_.dir().string(), ": rope scaling '", kind, "' is not supported (llama3, linear)");
      }
    }
    config_.validate(file);
    check(head_dim_given || config_.hidden % config_.heads == 0, where, file, ": hidden_size (",
          config_.hidden, ") is not a multiple of num_attention_heads (", config_.heads,
          ") and there is no head_dim");
    if (llama3) {
      rope_factors_ = llama3_rope_factors(config_.rope_dims, config_.rope_theta, llama3->factor,
                                          llama3->low_freq_factor, llama3->high_freq_factor,
                                          llama3->original_context);
    }
    for (const TensorInfo& t : model_.tensors()) {
      check_no_extra_blocks(t.name, "model.layers.", config_.layers, where, file,
                            "num_hidden_layers");
    }
    // Embedding lookups need a plain table: a quantised embedding is expanded to f16 once
    // (the LM head keeps using the quantised form when tied).
    if (model_.is_quantized("model.embed_tokens.weight")) {
      const MlxQuantizedWeight& q = model_.quantized("model.embed_tokens.weight");
      check(q.shape == Shape({config_.vocab_size, config_.hidden}), where, model_.dir().string(),
            ": tensor 'model.embed_tokens.weight' has shape ", q.shape.str(), ", expected [",
            config_.vocab_size, ", ", config_.hidden, "] (vocab_size, hidden_size)");
      const int64_t rows = q.shape[0];
      const int64_t cols = q.shape[1];
      std::vector<float> full(static_cast<size_t>(rows * cols));
      ops::affine_dequantize(q.format, static_cast<const uint32_t*>(q.weight->data),
                             static_cast<const uint16_t*>(q.scales->data),
                             static_cast<const uint16_t*>(q.biases->data), rows, cols, full.data());
      embedding_f16_.resize(full.size());
      ops::quantize(DType::f16, full.data(), static_cast<int64_t>(full.size()),
                    embedding_f16_.data());
    }
  }

  const LlamaConfig& config() const override { return config_; }

  std::optional<HostTensor> find(std::string_view name) const override {
    if (name == "token_embd.weight" && !embedding_f16_.empty()) {
      HostTensor h;
      h.name = std::string(name);
      h.dtype = DType::f16;
      h.shape = Shape{config_.vocab_size, config_.hidden};
      h.data = embedding_f16_.data();
      h.bytes = embedding_f16_.size() * 2;
      return h;
    }
    // A tied LM head is the (possibly quantised) embedding.
    const std::string module = (name == "output.weight" && config_.tied_output) ? std::string() : hf_name(name);
    if (module.empty()) return std::nullopt;
    if (model_.is_quantized(module)) {
      const MlxQuantizedWeight& q = model_.quantized(module);
      HostTensor h = host_tensor(*q.weight);
      h.name = std::string(name);
      h.affine = q.format;
      h.scales = q.scales->data;
      h.biases = q.biases->data;
      return h;
    }
    const TensorInfo* t = model_.find(module);
    if (t == nullptr) return std::nullopt;
    HostTensor h = host_tensor(*t);
    h.name = std::string(name);
    // Norm weights and biases are f32 in the model layer.
    if (h.shape.ndim() == 1 && h.dtype != DType::f32) {
      auto& converted = converted_[h.name];
      if (converted.empty()) {
        converted.resize(static_cast<size_t>(h.shape.numel()));
        ops::dequantize(h.dtype, h.data, h.shape.numel(), converted.data());
      }
      h.dtype = DType::f32;
      h.data = converted.data();
      h.bytes = converted.size() * 4;
    }
    return h;
  }

  std::optional<std::vector<float>> rope_freq_factors() const override { return rope_factors_; }
  std::optional<TokenizerData> tokenizer_data() const override {
    std::optional<TokenizerData> data = tokenizer_data_from_hf(model_.dir());
    if (!data) return data;
    // Embedding rows past the vocabulary (padding to a round size) get placeholder tokens
    // that never match text, as llama.cpp's conversion writes them.
    const auto rows = static_cast<size_t>(config_.vocab_size);
    check(data->tokens.size() <= rows, "mlx", data->source, ": the vocabulary has ",
          data->tokens.size(), " tokens, but the model has ", rows,
          " embedding rows (vocab_size); expected at most one token per row");
    for (size_t i = data->tokens.size(); i < rows; ++i) {
      data->tokens.push_back(cat("[onepass:unused ", i, "]"));
      data->token_types.push_back(static_cast<int32_t>(TokenType::kUnused));
    }
    return data;
  }
  std::string describe() const override { return model_.dir().string() + " (MLX)"; }
  std::string file_name(std::string_view name) const override {
    const std::string module = name == "output.weight" && config_.tied_output ? std::string() : hf_name(name);
    return module.empty() ? std::string(name) : module;
  }
  void release(const HostTensor& tensor) const override {
    // Only what points into a safetensors mapping: not the expanded embedding or the
    // converted norms, which live in this object.
    for (const TensorInfo& t : model_.tensors()) {
      const auto* begin = static_cast<const uint8_t*>(t.data);
      for (const void* p : {tensor.data, tensor.scales, tensor.biases}) {
        if (p == begin) MappedFile::release_pages(t.data, t.bytes);
      }
    }
  }

 private:
  MlxModel model_;
  LlamaConfig config_;
  std::optional<std::vector<float>> rope_factors_;
  std::vector<uint16_t> embedding_f16_;
  mutable std::map<std::string, std::vector<float>> converted_;
};

}  // namespace

LlamaConfig config_from_gguf(const GgufFile& f) {
  const std::string arch = f.architecture();
  const Architecture* family = find_architecture(arch);
  check(family != nullptr, "gguf", f.source(), ": architecture '", arch, "' is not supported (",
        architecture_names(), ")");
  LlamaConfig c;
  c.hidden = f.get_u32(f.arch_key("embedding_length"));
  c.ffn = f.get_u32(f.arch_key("feed_forward_length"));
  c.layers = f.get_u32(f.arch_key("block_count"));
  c.heads = f.get_u32(f.arch_key("attention.head_count"));
  c.kv_heads = f.find_u32(f.arch_key("attention.head_count_kv")).value_or(static_cast<uint32_t>(c.heads));
  const std::optional<uint32_t> key_length = f.find_u32(f.arch_key("attention.key_length"));
  // Without key_length, hidden = heads x head_dim; validate() rejects heads = 0 first.
  c.head_dim = key_length ? int64_t{*key_length} : c.hidden / std::max<int64_t>(c.heads, 1);
  c.rope_dims = f.find_u32(f.arch_key("rope.dimension_count")).value_or(static_cast<uint32_t>(c.head_dim));
  c.rope_theta = f.find_f32(f.arch_key("rope.freq_base")).value_or(10000.0f);
  c.norm_eps = f.find_f32(f.arch_key("attention.layer_norm_rms_epsilon")).value_or(1e-5f);
  c.train_context = f.find_u32(f.arch_key("context_length")).value_or(4096);
  apply_architecture(*family, c);
  c.architecture = arch == "mistral" ? "llama" : arch;
  c.sliding_window = f.find_u32(f.arch_key("attention.sliding_window")).value_or(0);
  if (c.sliding_window_period == 0) c.sliding_window = 0;  // families without local layers
  if (auto cap = f.find_f32(f.arch_key("attn_logit_softcapping"))) c.attn_softcap = *cap;
  if (auto cap = f.find_f32(f.arch_key("final_logit_softcapping"))) c.final_softcap = *cap;
  if (auto base = f.find_f32(f.arch_key("rope.local.freq_base"))) c.rope_theta_local = *base;
  // Mixture of experts (Mixtral, Qwen3-MoE, OLMoE): the expert count, the experts used per
  // token and one expert's feed-forward length (the dense one when the file has none).
  c.experts = f.find_u32(f.arch_key("expert_count")).value_or(0);
  if (c.experts > 0) {
    c.experts_used = f.find_u32(f.arch_key("expert_used_count")).value_or(0);
    c.expert_ffn = f.find_u32(f.arch_key("expert_feed_forward_length")).value_or(static_cast<uint32_t>(c.ffn));
  }
  // Gemma 2 and 3 scale q·k by 1/sqrt(query_pre_attn_scalar), which GGUF does not store: it
  // is key_length except in the 27B models (46 and 62 layers), where it is hidden / heads.
  if ((arch == "gemma2" && c.layers == 46) || (arch == "gemma3" && c.layers == 62)) {
    c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.hidden / std::max<int64_t>(c.heads, 1)));
  }
  if (const auto type = f.find_string(f.arch_key("rope.scaling.type")); type && *type != "none") {
    check(*type == "linear", "gguf", f.source(), ": rope scaling '", *type, "' is not supported (linear)");
    const float factor = f.find_f32(f.arch_key("rope.scaling.factor")).value_or(1.0f);
    check(factor > 0 && std::isfinite(factor), "gguf", f.source(), ": ",
          f.arch_key("rope.scaling.factor"), " is ", factor, ", expected a positive finite number");
    c.rope_freq_scale = 1.0f / factor;
  }
  const TensorInfo& embd = f.tensor("token_embd.weight");
  check(embd.shape.ndim() == 2, "gguf", f.source(), ": token_embd.weight must be 2-D");
  c.vocab_size = f.find_u32(f.arch_key("vocab_size")).value_or(static_cast<uint32_t>(embd.shape[0]));
  c.tied_output = f.find_tensor("output.weight") == nullptr;
  c.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  // A family's fused tensors are what its files hold; a file with the separate ones loads too.
  c.fused_qkv_tensor = c.fused_qkv_tensor && f.find_tensor("blk.0.attn_qkv.weight") != nullptr;
  c.fused_gate_up_tensor = c.fused_gate_up_tensor && f.find_tensor("blk.0.ffn_gate.weight") == nullptr;
  c.validate(f.source());
  check(key_length || c.hidden % c.heads == 0, "gguf", f.source(), ": ",
        f.arch_key("embedding_length"), " (", c.hidden, ") is not a multiple of ",
        f.arch_key("attention.head_count"), " (", c.heads, ") and there is no ",
        f.arch_key("attention.key_length"));
  for (const TensorInfo& t : f.tensors()) {
    check_no_extra_blocks(t.name, "blk.", c.layers, "gguf", f.source(), f.arch_key("block_count"));
  }
  return c;
}

TokenizerData tokenizer_data_from_gguf(const GgufFile& f) {
  TokenizerData d;
  d.source = f.source();
  d.model = f.get_string("tokenizer.ggml.model");
  d.pre = f.find_string("tokenizer.ggml.pre").value_or("default");
  d.tokens = f.get_strings("tokenizer.ggml.tokens");
  d.scores = f.find_f32s("tokenizer.ggml.scores").value_or(std::vector<float>{});
  d.token_types = f.find_i32s("tokenizer.ggml.token_type").value_or(std::vector<int32_t>{});
  d.merges = f.find_strings("tokenizer.ggml.merges").value_or(std::vector<std::string>{});
  auto id = [&](const char* key) { return f.find_i32(key).value_or(-1); };
  d.bos_id = id("tokenizer.ggml.bos_token_id");
  d.eos_id = id("tokenizer.ggml.eos_token_id");
  d.unk_id = id("tokenizer.ggml.unknown_token_id");
  d.pad_id = id("tokenizer.ggml.padding_token_id");
  if (auto eot = f.find_i32("tokenizer.ggml.eot_token_id")) d.eot_id = *eot;
  d.add_bos = f.find_bool("tokenizer.ggml.add_bos_token").value_or(d.model == "llama");
  d.add_eos = f.find_bool("tokenizer.ggml.add_eos_token").value_or(false);
  d.add_space_prefix = f.find_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  d.chat_template = f.find_string("tokenizer.chat_template").value_or("");
  // Files without a template (Gemma's often) get their family's turn format.
  const Architecture* family = find_architecture(f.architecture());
  if (d.chat_template.empty() && family != nullptr) d.chat_template = std::string(family->default_chat_template);
  return d;
}

std::unique_ptr<ModelSource> open_gguf_model(const std::filesystem::path& path) {
  return std::make_unique<GgufSource>(GgufFile::open(path));
}

std::unique_ptr<ModelSource> open_mlx_model(const std::filesystem::path& dir) {
  return std::make_unique<MlxSource>(MlxModel::open(dir));
}

std::unique_ptr<ModelSource> open_model(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return open_mlx_model(path);
  check(std::filesystem::exists(path, ec), "model", "no such file or directory: ", path.string());
  return open_gguf_model(path);
}

}  // namespace onepass::model
