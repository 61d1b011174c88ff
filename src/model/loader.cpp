#include "onepass/model/loader.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "model/affine_relayout.h"
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
  void release_all() const override {
    for (const TensorInfo& t : file_.tensors()) MappedFile::release_pages_touching(t.data, t.bytes);
  }

 private:
  GgufFile file_;
  LlamaConfig config_;
};

// ---- MLX ---------------------------------------------------------------------------------

// An mlx-lm (Hugging Face) model_type and the GGUF family of architecture.h it runs as.
struct MlxFamily {
  std::string_view model_type;
  std::string_view architecture;
};

constexpr MlxFamily kMlxFamilies[] = {
    {"llama", "llama"},        {"mistral", "llama"},      {"qwen2", "qwen2"},   {"qwen3", "qwen3"},
    {"gemma2", "gemma2"},      {"gemma3_text", "gemma3"}, {"gemma3", "gemma3"}, {"phi3", "phi3"},
    {"qwen3_moe", "qwen3moe"}, {"mixtral", "llama"},      {"olmoe", "olmoe"},
};

std::string mlx_model_types() {
  std::string out;
  for (const MlxFamily& f : kMlxFamilies)
    out += (out.empty() ? "" : ", ") + std::string(f.model_type);
  return out;
}

// The values Hugging Face's Gemma2Config / Gemma3TextConfig assume for keys a config.json
// leaves out (the multimodal Gemma 3 checkpoints write only what differs from them).
nlohmann::json family_defaults(std::string_view architecture) {
  if (architecture == "gemma2") {
    return {{"num_attention_heads", 8},
            {"num_key_value_heads", 4},
            {"head_dim", 256},
            {"rms_norm_eps", 1e-6},
            {"rope_theta", 10000.0},
            {"query_pre_attn_scalar", 256},
            {"sliding_window", 4096},
            {"final_logit_softcapping", 30.0},
            {"attn_logit_softcapping", 50.0},
            {"hidden_activation", "gelu_pytorch_tanh"},
            {"tie_word_embeddings", true}};
  }
  if (architecture == "gemma3") {
    return {{"num_attention_heads", 8},
            {"num_key_value_heads", 4},
            {"head_dim", 256},
            {"rms_norm_eps", 1e-6},
            {"rope_theta", 1000000.0},
            {"rope_local_base_freq", 10000.0},
            {"query_pre_attn_scalar", 256},
            {"sliding_window", 4096},
            {"hidden_activation", "gelu_pytorch_tanh"},
            {"tie_word_embeddings", true}};
  }
  return nlohmann::json::object();
}

// Where a directory keeps the text model's tensors: "model." for the causal-LM checkpoints,
// "language_model.model." or "model.language_model." for multimodal ones (whose vision
// tensors are not read), and how the family names its layer tensors.
struct MlxLayout {
  std::string model = "model.";
  std::string lm_head = "lm_head.weight";
  bool gemma_norms = false;    // pre/post attention and feed-forward norms (Gemma 2, 3)
  bool fused_gate_up = false;  // gate_up_proj (Phi-3)
  // A mixture of experts' module: "mlp." (Qwen3-MoE, OLMoE) or "block_sparse_moe." (Mixtral),
  // whose "gate" is the router and whose "switch_mlp" holds the experts stacked [experts, out,
  // in] (mlx-lm), or whose "experts.E." hold one tensor per expert (Hugging Face): gate_proj,
  // up_proj, down_proj, or Mixtral's w1, w3, w2.
  std::string moe = "mlp.";
  std::string expert_gate = "gate_proj", expert_up = "up_proj", expert_down = "down_proj";
};

// The part of a GGUF experts tensor ("blk.3.ffn_up_exps.weight" -> "up"), or "".
std::string_view experts_part(std::string_view gguf) {
  const std::optional<int64_t> block = block_of(gguf, "blk.");
  if (!block) return {};
  const std::string_view rest = gguf.substr(gguf.find('.', 4) + 1);
  for (const std::string_view part : {"gate", "up", "down"}) {
    if (rest == cat("ffn_", part, "_exps.weight")) return part;
  }
  return {};
}

// The Hugging Face name of expert `expert`'s share of a GGUF experts tensor.
std::string per_expert_name(std::string_view gguf, int64_t expert, const MlxLayout& layout) {
  const std::string_view part = experts_part(gguf);
  const std::string_view module = part == "gate" ? layout.expert_gate
                                  : part == "up" ? layout.expert_up
                                                 : layout.expert_down;
  return cat(layout.model, "layers.", *block_of(gguf, "blk."), ".", layout.moe, "experts.", expert,
             ".", module, ".weight");
}

// The expert a Hugging Face per-expert tensor belongs to ("model.layers.3.mlp.experts.12.w1.weight"
// -> 12), or nullopt for other names.
std::optional<int64_t> expert_of(std::string_view name, const MlxLayout& layout) {
  const std::string layers = layout.model + "layers.";
  const std::optional<int64_t> block = block_of(name, layers);
  if (!block) return std::nullopt;
  name.remove_prefix(name.find('.', layers.size()) + 1);
  return block_of(name, layout.moe + "experts.");
}

// GGUF tensor name -> mlx-lm (Hugging Face) tensor name; "" for none.
std::string hf_name(std::string_view gguf, const MlxLayout& layout) {
  if (gguf == "token_embd.weight") return layout.model + "embed_tokens.weight";
  if (gguf == "output_norm.weight") return layout.model + "norm.weight";
  if (gguf == "output.weight") return layout.lm_head;
  const std::optional<int64_t> block = block_of(gguf, "blk.");
  if (!block) return std::string(gguf);
  const std::string_view rest = gguf.substr(gguf.find('.', 4) + 1);
  static const std::map<std::string, std::string, std::less<>> kLayer = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_qkv.weight", "self_attn.qkv_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
      {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"},
  };
  std::string module;
  if (rest == "ffn_norm.weight") {
    // Hugging Face's "post_attention_layernorm" is Llama's pre-FFN norm but Gemma's norm of
    // the attention output.
    module =
        layout.gemma_norms ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight";
  } else if (rest == "post_attention_norm.weight") {
    module = layout.gemma_norms ? "post_attention_layernorm.weight" : "";
  } else if (rest == "ffn_up.weight") {
    module = layout.fused_gate_up ? "mlp.gate_up_proj.weight" : "mlp.up_proj.weight";
  } else if (rest == "ffn_gate_inp.weight") {
    module = layout.moe + "gate.weight";
  } else if (rest == "ffn_gate_exps.weight" || rest == "ffn_up_exps.weight" ||
             rest == "ffn_down_exps.weight") {
    const std::string_view part = rest.substr(4, rest.find('_', 4) - 4);  // gate, up, down
    module = cat(layout.moe, "switch_mlp.", part, "_proj.weight");
  } else if (auto it = kLayer.find(rest); it != kLayer.end()) {
    module = it->second;
  }
  if (module.empty()) return std::string(gguf);
  return cat(layout.model, "layers.", *block, ".", module);
}

class MlxSource final : public ModelSource {
 public:
  explicit MlxSource(MlxModel model) : model_(std::move(model)) {
    const nlohmann::json& root = model_.config().json;
    const std::string where = "mlx";
    const std::string file = (model_.dir() / "config.json").string();
    // Typed reads that name the key and the file instead of nlohmann's bare message.
    auto shown = [](const nlohmann::json& v) {
      std::string text = v.dump();
      return text.size() > 40 ? text.substr(0, 40) + "..." : text;
    };
    auto text = [&](const nlohmann::json& obj, const char* key, std::string fallback) {
      const auto it = obj.find(key);
      if (it == obj.end() || it->is_null()) return fallback;
      check(it->is_string(), where, file, ": '", key, "' is ", shown(*it), ", expected a string");
      return it->get<std::string>();
    };
    const std::string type = text(root, "model_type", "llama");
    const bool moe = type == "qwen3_moe" || type == "mixtral" || type == "olmoe";
    const MlxFamily* family = nullptr;
    for (const MlxFamily& f : kMlxFamilies) {
      if (f.model_type == type) family = &f;
    }
    check(family != nullptr, where, model_.dir().string(), ": model_type '", type,
          "' is not supported (", mlx_model_types(), ")");
    const Architecture& arch = *find_architecture(family->architecture);

    // Multimodal checkpoints nest the language model's keys in text_config.
    nlohmann::json j = root;
    if (const auto nested = root.find("text_config"); nested != root.end() && !nested->is_null()) {
      check(nested->is_object(), where, file, ": 'text_config' is ", shown(*nested),
            ", expected an object");
      j = *nested;
      for (const char* key : {"tie_word_embeddings", "vocab_size"}) {
        if (!j.contains(key) && root.contains(key)) j[key] = root[key];
      }
    }
    const nlohmann::json defaults = family_defaults(arch.name);
    for (const auto& [key, value] : defaults.items()) {
      if (!j.contains(key)) j[key] = value;
    }
    auto integer = [&](const char* key, std::optional<int64_t> fallback) -> int64_t {
      const auto it = j.find(key);
      if (it == j.end() || it->is_null()) {
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

    // The text model's tensors.
    for (const char* prefix : {"model.", "language_model.model.", "model.language_model."}) {
      const std::string embedding = cat(prefix, "embed_tokens.weight");
      if (model_.find(embedding) != nullptr || model_.is_quantized(embedding)) {
        layout_.model = prefix;
        break;
      }
    }
    if (layout_.model == "language_model.model.") layout_.lm_head = "language_model.lm_head.weight";
    layout_.gemma_norms = arch.post_norms;
    if (type == "mixtral") {
      layout_.moe = "block_sparse_moe.";
      layout_.expert_gate = "w1";
      layout_.expert_up = "w3";
      layout_.expert_down = "w2";
    }
    auto has = [&](const std::string& name) {
      return model_.find(name) != nullptr || model_.is_quantized(name);
    };

    config_.hidden = integer("hidden_size", std::nullopt);
    config_.ffn = integer("intermediate_size", std::nullopt);
    config_.layers = integer("num_hidden_layers", std::nullopt);
    config_.heads = integer("num_attention_heads", std::nullopt);
    config_.kv_heads = integer("num_key_value_heads", config_.heads);
    // Without vocab_size (a multimodal config's text part), the embedding's rows.
    std::optional<int64_t> embedding_rows;
    const std::string embedding_name = layout_.model + "embed_tokens.weight";
    if (model_.is_quantized(embedding_name)) {
      embedding_rows = model_.quantized(embedding_name).shape[0];
    } else if (const TensorInfo* t = model_.find(embedding_name);
               t != nullptr && t->shape.ndim() == 2) {
      embedding_rows = t->shape[0];
    }
    config_.vocab_size = integer("vocab_size", embedding_rows);
    apply_architecture(arch,
                       config_);  // after hidden_size: Gemma's embedding scale is sqrt(hidden)
    config_.architecture = std::string(arch.name);
    const bool head_dim_given = j.contains("head_dim") && !j["head_dim"].is_null();
    // Without head_dim, hidden = heads x head_dim; validate() rejects heads <= 0 first.
    config_.head_dim = head_dim_given      ? integer("head_dim", std::nullopt)
                       : config_.heads > 0 ? config_.hidden / config_.heads
                                           : 0;
    config_.rope_dims = config_.head_dim;
    if (const float partial = number(j, "partial_rotary_factor", 1.0f); partial != 1.0f) {
      check(partial > 0 && partial < 1, where, file, ": 'partial_rotary_factor' is ", partial,
            ", expected a number in (0, 1]");
      config_.rope_dims = static_cast<int64_t>(static_cast<float>(config_.head_dim) * partial);
      check(config_.rope_dims % 2 == 0, where, file, ": partial_rotary_factor ", partial,
            " x head_dim ", config_.head_dim, " is not an even number of rotary dimensions");
    }
    config_.rope_theta = number(j, "rope_theta", 10000.0f);
    config_.norm_eps = number(j, "rms_norm_eps", 1e-5f);
    config_.train_context = integer("max_position_embeddings", int64_t{4096});
    config_.rope_neox = true;  // Hugging Face layout: rotate_half
    const std::string layer0 = layout_.model + "layers.0.";
    // A family's fused tensors are what its checkpoints hold; separate ones load too.
    config_.fused_qkv_tensor = arch.fused_qkv_tensor && has(layer0 + "self_attn.qkv_proj.weight");
    config_.fused_gate_up_tensor =
        arch.fused_gate_up_tensor && has(layer0 + "mlp.gate_up_proj.weight");
    layout_.fused_gate_up = config_.fused_gate_up_tensor;
    config_.qkv_bias =
        arch.name == "qwen2" || model_.find(layer0 + "self_attn.q_proj.bias") != nullptr;
    check(model_.find(layer0 + "self_attn.o_proj.bias") == nullptr, where, model_.dir().string(),
          ": attention output biases (", layer0, "self_attn.o_proj.bias) are not supported");
    check(model_.find(layer0 + "mlp.down_proj.bias") == nullptr, where, model_.dir().string(),
          ": feed-forward biases (", layer0, "mlp.down_proj.bias) are not supported");
    config_.tied_output = boolean("tie_word_embeddings", false) || !has(layout_.lm_head);
    check(!boolean("use_bidirectional_attention", false), where, file,
          ": use_bidirectional_attention: true (an embedding model) is not supported");

    // Gemma: the stored norm weights w act as (1 + w); q.k is scaled by
    // 1/sqrt(query_pre_attn_scalar); softcaps, local layers and their RoPE base as written.
    if (arch.post_norms) config_.norm_weight_offset = 1.0f;
    if (j.contains("query_pre_attn_scalar") && !j["query_pre_attn_scalar"].is_null()) {
      const float scalar = number(j, "query_pre_attn_scalar", 0.0f);
      check(scalar > 0, where, file, ": 'query_pre_attn_scalar' is ", scalar,
            ", expected a positive number");
      config_.attention_scale = 1.0f / std::sqrt(scalar);
    }
    if (arch.attn_softcap > 0 || j.contains("attn_logit_softcapping")) {
      config_.attn_softcap = number(j, "attn_logit_softcapping", 0.0f);
    }
    if (arch.final_softcap > 0 || j.contains("final_logit_softcapping")) {
      config_.final_softcap = number(j, "final_logit_softcapping", 0.0f);
    }
    check(config_.attn_softcap >= 0 && config_.final_softcap >= 0, where, file,
          ": logit softcapping values must not be negative");
    if (arch.rope_theta_local > 0)
      config_.rope_theta_local = number(j, "rope_local_base_freq", arch.rope_theta_local);
    read_activation(j, arch, file);
    read_sliding_window(j, arch, file, integer);
    if (moe) read_experts(j, type, file, integer, boolean);

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
        // Gemma 3 scales its global layers only; the local ones keep rope_local_base_freq.
        const float factor = number(s, "factor", 1.0f);
        check(factor > 0, where, file, ": rope_scaling factor is ", factor,
              ", expected a positive number");
        config_.rope_freq_scale = 1.0f / factor;
      } else if (!kind.empty() && kind != "default") {
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
      check_no_extra_blocks(t.name, layout_.model + "layers.", config_.layers, where, file,
                            "num_hidden_layers");
    }
    if (moe) check_per_expert_tensors(type == "mixtral" ? "num_local_experts" : "num_experts");
    // Embedding lookups take GGUF weight types: a quantised embedding is re-laid as one
    // (4-bit groups as q4_1 blocks, ...; model/affine_relayout.h), which a tied LM head
    // then multiplies by.
    if (model_.is_quantized(embedding_name)) {
      const MlxQuantizedWeight& q = model_.quantized(embedding_name);
      check(q.shape == Shape({config_.vocab_size, config_.hidden}), where, model_.dir().string(),
            ": tensor '", embedding_name, "' has shape ", q.shape.str(), ", expected [",
            config_.vocab_size, ", ", config_.hidden, "] (vocab_size, hidden_size)");
      HostTensor packed = host_tensor(*q.weight);
      packed.name = embedding_name;
      packed.affine = q.format;
      packed.scales = q.scales->data;
      packed.biases = q.biases->data;
      embedding_ = relayout_affine(packed);
    }
    default_chat_template_ = arch.default_chat_template;
  }

  const LlamaConfig& config() const override { return config_; }

  std::optional<HostTensor> find(std::string_view name) const override {
    if (name == "token_embd.weight" && !embedding_.bytes.empty()) {
      HostTensor h;
      h.name = std::string(name);
      h.dtype = embedding_.dtype;
      h.shape = embedding_.shape;
      h.data = embedding_.bytes.data();
      h.bytes = embedding_.bytes.size();
      return h;
    }
    // A tied LM head is the (possibly quantised) embedding.
    if (name == "output.weight" && config_.tied_output) return std::nullopt;
    if (stored_per_expert(name)) return per_expert_tensor(name);
    return file_tensor(hf_name(name, layout_), name);
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
    // A directory without a template gets its family's turn format, as a GGUF file does.
    if (data->chat_template.empty()) data->chat_template = std::string(default_chat_template_);
    return data;
  }
  std::string describe() const override { return model_.dir().string() + " (MLX)"; }
  std::string file_name(std::string_view name) const override {
    if (!stored_per_expert(name)) return hf_name(name, layout_);
    std::string first = per_expert_name(name, 0, layout_);  // "experts.0." -> "experts.*."
    const size_t at = first.rfind(".experts.0.") + std::string_view(".experts.").size();
    return first.replace(at, 1, "*");
  }
  void release(const HostTensor& tensor) const override {
    for (const HostTensor& part : tensor.parts) release(part);
    // Only what points into a safetensors mapping: not the re-laid embedding or the
    // converted norms, which live in this object.
    for (const TensorInfo& t : model_.tensors()) {
      const auto* begin = static_cast<const uint8_t*>(t.data);
      for (const void* p : {tensor.data, tensor.scales, tensor.biases}) {
        if (p == begin) MappedFile::release_pages(t.data, t.bytes);
      }
    }
  }
  void release_all() const override {
    for (const TensorInfo& t : model_.tensors())
      MappedFile::release_pages_touching(t.data, t.bytes);
  }

 private:
  // The file's tensor `module` as the model's tensor `name`: a quantised weight with its
  // scales and biases, a vector in f32.
  std::optional<HostTensor> file_tensor(const std::string& module, std::string_view name) const {
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

  // Whether the experts tensor `name` ("blk.N.ffn_up_exps.weight") is stored one tensor per
  // expert (a Hugging Face checkpoint) rather than stacked (mlx-lm).
  bool stored_per_expert(std::string_view name) const {
    if (!config_.moe() || experts_part(name).empty()) return false;
    const std::string first = per_expert_name(name, 0, layout_);
    return model_.find(first) != nullptr || model_.is_quantized(first);
  }

  // The experts' tensors of a Hugging Face checkpoint as one [experts, out, in] tensor whose
  // parts are the experts' own (check_per_expert_tensors has checked that they match).
  std::optional<HostTensor> per_expert_tensor(std::string_view name) const {
    HostTensor stacked;
    stacked.name = std::string(name);
    for (int64_t e = 0; e < config_.experts; ++e) {
      const std::string module = per_expert_name(name, e, layout_);
      std::optional<HostTensor> part = file_tensor(module, module);
      check(part.has_value(), "mlx", model_.dir().string(), ": no tensor '", module, "'");
      stacked.bytes += part->bytes;
      stacked.parts.push_back(std::move(*part));
    }
    const HostTensor& first = stacked.parts.front();
    stacked.dtype = first.dtype;
    stacked.affine = first.affine;
    stacked.shape = Shape{config_.experts, first.shape[0], first.shape[1]};
    return stacked;
  }

  // A checkpoint's per-expert tensors: for each layer and each of gate, up and down, every
  // expert 0..experts-1 and no other, each of one type and 2-D shape, and not beside a
  // stacked tensor of the same weights.
  void check_per_expert_tensors(const char* count_key) const {
    const std::string dir = model_.dir().string();
    std::set<int64_t> layers;  // those with per-expert tensors
    for (const TensorInfo& t : model_.tensors()) {
      const std::optional<int64_t> expert = expert_of(t.name, layout_);
      if (!expert) continue;
      check(*expert < config_.experts, "mlx", dir, ": tensor '", t.name, "' belongs to expert ",
            *expert, ", but ", count_key, " is ", config_.experts, " (expected experts 0..",
            config_.experts - 1, ")");
      layers.insert(*block_of(t.name, layout_.model + "layers."));
    }
    auto has = [&](const std::string& name) {
      return model_.find(name) != nullptr || model_.is_quantized(name);
    };
    // A tensor's type (a quantised one's format) and its logical shape.
    auto form = [&](const std::string& name) -> std::pair<std::string, Shape> {
      if (model_.is_quantized(name)) {
        const MlxQuantizedWeight& q = model_.quantized(name);
        return {cat(q.format.bits, "-bit groups of ", q.format.group_size, " with ",
                    dtype_name(q.format.scale_type), " scales"),
                q.shape};
      }
      const TensorInfo& t = model_.tensor(name);
      return {std::string(dtype_name(t.dtype)), t.shape};
    };
    for (const int64_t l : layers) {
      for (const char* part : {"gate", "up", "down"}) {
        const std::string gguf = cat("blk.", l, ".ffn_", part, "_exps.weight");
        std::optional<std::string> present;  // the first expert's tensor found
        for (int64_t e = 0; e < config_.experts && !present; ++e) {
          if (has(per_expert_name(gguf, e, layout_))) present = per_expert_name(gguf, e, layout_);
        }
        if (!present) continue;  // stacked, or missing: the model's shape checks name it
        const std::string stacked = hf_name(gguf, layout_);
        check(!has(stacked), "mlx", dir, ": tensor '", stacked,
              "' holds the experts stacked, but '", *present,
              "' holds one expert; expected one layout");
        const auto [type, shape] = form(*present);
        check(shape.ndim() == 2, "mlx", dir, ": tensor '", *present, "' has shape ", shape.str(),
              ", expected one expert's matrix [out, in]");
        for (int64_t e = 0; e < config_.experts; ++e) {
          const std::string name = per_expert_name(gguf, e, layout_);
          check(has(name), "mlx", dir, ": no tensor '", name,
                "'; expected one tensor per expert 0..", config_.experts - 1, " (", count_key,
                "), as '", *present, "'");
          const auto [other_type, other_shape] = form(name);
          check(other_type == type && other_shape == shape, "mlx", dir, ": tensor '", name, "' is ",
                other_type, " ", other_shape.str(), ", but '", *present, "' is ", type, " ",
                shape.str(), "; expected every expert's tensor of one type and shape");
        }
      }
    }
  }

  // hidden_activation (Gemma) or hidden_act: the gated FFN's nonlinearity.
  void read_activation(const nlohmann::json& j, const Architecture& arch, const std::string& file) {
    std::string name;
    for (const char* key : {"hidden_activation", "hidden_act"}) {
      const auto it = j.find(key);
      if (it == j.end() || it->is_null()) continue;
      check(it->is_string(), "mlx", file, ": '", key, "' is ", it->dump(), ", expected a string");
      name = it->get<std::string>();
      break;
    }
    if (name.empty()) {
      config_.activation = arch.activation;
    } else if (name == "silu" || name == "swish") {
      config_.activation = FfnActivation::silu;
    } else if (name == "gelu_pytorch_tanh" || name == "gelu_tanh" || name == "gelu_new" ||
               name == "gelu_fast") {
      config_.activation = FfnActivation::gelu_tanh;
    } else {
      fail("mlx", file, ": activation '", name,
           "' is not supported (silu, swish, gelu_pytorch_tanh, gelu_tanh, gelu_new, gelu_fast)");
    }
  }

  // Which layers attend through a sliding window: layer_types (one entry per layer), else
  // sliding_window_pattern (every P-th layer global), else the family's period. Families
  // without local layers ignore sliding_window, as their GGUF files do.
  template <typename Integer>
  void read_sliding_window(const nlohmann::json& j, const Architecture& arch,
                           const std::string& file, const Integer& integer) {
    config_.sliding_window = 0;
    config_.sliding_window_period = 0;
    const bool use_window = !j.contains("use_sliding_window") || j["use_sliding_window"] != false;
    const auto types = j.find("layer_types");
    if (types != j.end() && !types->is_null()) {
      check(types->is_array() && static_cast<int64_t>(types->size()) == config_.layers, "mlx", file,
            ": 'layer_types' must list one entry per layer (", config_.layers, ")");
      std::vector<bool> local;
      for (const nlohmann::json& t : *types) {
        check(t == "sliding_attention" || t == "full_attention", "mlx", file,
              ": layer_types holds ", t.dump(),
              ", expected \"sliding_attention\" or \"full_attention\"");
        local.push_back(t == "sliding_attention");
      }
      if (std::find(local.begin(), local.end(), true) == local.end() || !use_window) return;
      const auto first_global = std::find(local.begin(), local.end(), false);
      const int64_t period = first_global == local.end() ? 0 : (first_global - local.begin()) + 1;
      for (int64_t l = 0; l < config_.layers; ++l) {
        const bool expected = period == 0 || l % period != period - 1;
        check(local[static_cast<size_t>(l)] == expected, "mlx", file,
              ": layer_types is not a repeating pattern of local layers ending in one global layer "
              "(layer ",
              l, " breaks the period ", period, ")");
      }
      config_.sliding_window_period = period;
    } else if (arch.sliding_window_period > 0) {
      config_.sliding_window_period = arch.sliding_window_period;
      for (const char* key : {"sliding_window_pattern", "_sliding_window_pattern"}) {
        if (j.contains(key) && !j[key].is_null()) {
          config_.sliding_window_period = integer(key, std::nullopt);
          break;
        }
      }
      check(config_.sliding_window_period > 0, "mlx", file, ": the sliding window pattern is ",
            config_.sliding_window_period, ", expected a positive period");
    } else {
      check(!boolean_true(j, "use_sliding_window"), "mlx", file,
            ": use_sliding_window: true is not supported for this model_type");
      return;
    }
    config_.sliding_window = integer("sliding_window", std::nullopt);
    check(config_.sliding_window > 0, "mlx", file, ": 'sliding_window' is ", config_.sliding_window,
          ", expected a positive number of keys");
  }
  // Mixture of experts: mlx-lm's Qwen3-MoE (num_experts, moe_intermediate_size, every layer
  // sparse unless decoder_sparse_step / mlp_only_layers say otherwise), Mixtral
  // (num_local_experts, 8 by default, each expert of intermediate_size rows) and OLMoE
  // (num_experts, 64 by default, 8 used, each expert of intermediate_size rows).
  template <typename Integer, typename Boolean>
  void read_experts(const nlohmann::json& j, const std::string& type, const std::string& file,
                    const Integer& integer, const Boolean& boolean) {
    const bool qwen = type == "qwen3_moe";
    const bool olmoe = type == "olmoe";
    const char* count_key = type == "mixtral" ? "num_local_experts" : "num_experts";
    // Without the keys, Hugging Face's MixtralConfig and OlmoeConfig defaults.
    config_.experts = integer(count_key, qwen    ? std::nullopt
                                         : olmoe ? std::optional<int64_t>(64)
                                                 : std::optional<int64_t>(8));
    config_.experts_used = integer("num_experts_per_tok", qwen    ? std::nullopt
                                                          : olmoe ? std::optional<int64_t>(8)
                                                                  : std::optional<int64_t>(2));
    check(config_.experts > 0, "mlx", file, ": '", count_key, "' is ", config_.experts,
          ", expected a positive number of experts");
    check(config_.experts_used > 0 && config_.experts_used <= config_.experts, "mlx", file,
          ": 'num_experts_per_tok' is ", config_.experts_used, ", expected 1..", count_key, " (",
          config_.experts, ")");
    config_.expert_ffn = qwen ? integer("moe_intermediate_size", std::nullopt) : config_.ffn;
    // Qwen3-MoE and OLMoE: softmax over all experts, then the top-k renormalised
    // (norm_topk_prob) -- a softmax over the selected ones -- or not (Hugging Face's default
    // when the key is absent). Mixtral: softmax over the selected logits.
    config_.expert_weighting = type == "mixtral" || boolean("norm_topk_prob", false)
                                   ? ExpertWeighting::softmax_selected
                                   : ExpertWeighting::softmax_all;
    if (olmoe) {
      // OLMoE may clamp Q, K and V to [-clip_qkv, clip_qkv]; OLMoE-1B-7B does not.
      if (const auto clip = j.find("clip_qkv"); clip != j.end() && !clip->is_null()) {
        fail("mlx", file, ": 'clip_qkv' is ", clip->dump(),
             "; clamping Q, K and V is not supported (expected null)");
      }
    }
    if (!qwen) return;
    // A layer is sparse unless it is in mlp_only_layers or (layer + 1) is not a multiple of
    // decoder_sparse_step; the decoder runs every layer the same way.
    const int64_t step = integer("decoder_sparse_step", int64_t{1});
    check(step > 0, "mlx", file, ": 'decoder_sparse_step' is ", step, ", expected a positive number");
    std::vector<int64_t> dense;
    if (const auto only = j.find("mlp_only_layers"); only != j.end() && !only->is_null()) {
      check(only->is_array(), "mlx", file, ": 'mlp_only_layers' is ", only->dump(),
            ", expected an array of layer numbers");
      for (const nlohmann::json& l : *only) {
        check(l.is_number_integer(), "mlx", file, ": 'mlp_only_layers' holds ", l.dump(),
              ", expected layer numbers");
        if (l.get<int64_t>() >= 0 && l.get<int64_t>() < config_.layers) dense.push_back(l.get<int64_t>());
      }
    }
    for (int64_t l = 0; l < config_.layers && dense.empty(); ++l) {
      if ((l + 1) % step != 0) dense.push_back(l);
    }
    check(dense.empty(), "mlx", file, ": layer ", dense.empty() ? 0 : dense.front(),
          " has a dense feed-forward (decoder_sparse_step ", step,
          ", mlp_only_layers); a model of both dense and expert layers is not supported");
  }

  static bool boolean_true(const nlohmann::json& j, const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_boolean() && it->get<bool>();
  }

  MlxModel model_;
  MlxLayout layout_;
  LlamaConfig config_;
  std::optional<std::vector<float>> rope_factors_;
  RelaidWeight embedding_;  // a quantised embedding in a GGUF weight type
  std::string_view default_chat_template_;
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
