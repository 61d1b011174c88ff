// Writes the seed corpora of the load-path fuzz targets: SEED_DIR/gguf holds tiny complete
// models made by make_model (several weight types, tied and untied, BPE vocabularies of two
// pre-tokenizers) and one with a SentencePiece vocabulary; SEED_DIR/mlx holds mlx_fuzz
// inputs (config.json, NUL, model.safetensors) of tiny f32, f16 and 4-bit affine models.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "onepass/core/error.h"
#include "onepass/core/half.h"
#include "onepass/model/gguf.h"
#include "onepass/model/model_maker.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using onepass::DType;
using onepass::cat;

onepass::model::ModelShape tiny_shape() {
  onepass::model::ModelShape s;
  s.name = "fuzz-seed";
  s.hidden = 32;
  s.ffn = 64;
  s.layers = 2;
  s.heads = 4;
  s.kv_heads = 2;
  s.vocab = 300;
  s.context = 64;
  s.tied = true;
  return s;
}

// A made model with its vocabulary replaced by a small SentencePiece one (tokenizer "llama":
// byte tokens <0x00>..<0xFF>, then pieces with scores).
void write_spm_model(const onepass::model::ModelShape& shape, const fs::path& gguf_from,
                     const fs::path& path) {
  const onepass::model::GgufFile from = onepass::model::GgufFile::open(gguf_from);
  onepass::model::GgufWriter w(path);
  for (const auto& [key, value] : onepass::model::plan_model(shape, DType::q4_0).metadata) {
    if (key.rfind("tokenizer.", 0) != 0) w.set(key, value);
  }
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char piece[8];
    std::snprintf(piece, sizeof piece, "<0x%02X>", b);
    tokens.push_back(piece);
    types.push_back(6);
  }
  for (const char* piece : {"\xe2\x96\x81", "\xe2\x96\x81H", "el", "lo", "\xe2\x96\x81w", "or", "ld",
                            "He", "llo", "\xe2\x96\x81Hello", "12", "3"}) {
    tokens.push_back(piece);
    types.push_back(1);
  }
  while (tokens.size() < 300) {
    tokens.push_back(cat("p", tokens.size()));
    types.push_back(1);
  }
  std::vector<float> scores(tokens.size());
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = -static_cast<float>(i);
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_f32s("tokenizer.ggml.scores", scores);
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set("tokenizer.ggml.bos_token_id", onepass::model::GgufMetaValue::u32(1));
  w.set("tokenizer.ggml.eos_token_id", onepass::model::GgufMetaValue::u32(2));
  w.set("tokenizer.ggml.unknown_token_id", onepass::model::GgufMetaValue::u32(0));
  for (const onepass::model::TensorInfo& t : from.tensors()) w.add_tensor(t.name, t.dtype, t.shape);
  for (const onepass::model::TensorInfo& t : from.tensors())
    w.write_tensor(t.name, t.data, t.bytes);
  w.finish();
}

struct MlxTensor {
  std::string dtype;  // safetensors name: F32, F16, U32
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Values in -0.25..0.25 (norms near 1) as `dtype`.
MlxTensor mlx_tensor(const std::string& dtype, std::vector<int64_t> shape, bool norm, int salt) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  MlxTensor t{dtype, shape, {}};
  for (size_t i = 0; i < n; ++i) {
    const float v = norm ? 1.0f : static_cast<float>(static_cast<int>((i * 37 + salt * 11) % 64) - 32) / 128.0f;
    if (dtype == "F32") {
      uint8_t b[4];
      std::memcpy(b, &v, 4);
      t.bytes.insert(t.bytes.end(), b, b + 4);
    } else if (dtype == "F16") {
      const uint16_t h = onepass::f32_to_f16(v);
      t.bytes.push_back(static_cast<uint8_t>(h & 0xff));
      t.bytes.push_back(static_cast<uint8_t>(h >> 8));
    } else {  // U32: packed 4-bit values
      const uint32_t word = static_cast<uint32_t>(i * 2654435761u);
      uint8_t b[4];
      std::memcpy(b, &word, 4);
      t.bytes.insert(t.bytes.end(), b, b + 4);
    }
  }
  return t;
}

// One mlx_fuzz input: config.json, NUL, a safetensors file holding `tensors`.
void write_mlx_input(const fs::path& path, const json& config,
                     const std::map<std::string, MlxTensor>& tensors) {
  json header = json::object();
  header["__metadata__"] = {{"format", "mlx"}};
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';
  std::string out = config.dump();
  out += '\0';
  const uint64_t length = text.size();
  char prefix[8];
  std::memcpy(prefix, &length, 8);
  out.append(prefix, 8);
  out += text;
  for (const auto& [name, t] : tensors) out.append(t.bytes.begin(), t.bytes.end());
  std::ofstream(path, std::ios::binary) << out;
}

void write_mlx_seeds(const fs::path& dir) {
  const int64_t hidden = 32, ffn = 64, heads = 4, kv_heads = 2, vocab = 64, layers = 1;
  const int64_t head_dim = hidden / heads;
  const json base = {{"model_type", "llama"},       {"vocab_size", vocab},
                     {"hidden_size", hidden},       {"intermediate_size", ffn},
                     {"num_hidden_layers", layers}, {"num_attention_heads", heads},
                     {"num_key_value_heads", kv_heads}, {"rms_norm_eps", 1e-5},
                     {"rope_theta", 10000.0},       {"max_position_embeddings", 128},
                     {"tie_word_embeddings", true}};
  // Linear layers as (module, out, in).
  std::vector<std::tuple<std::string, int64_t, int64_t>> linears;
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = cat("model.layers.", l, ".");
    linears.push_back({p + "self_attn.q_proj", heads * head_dim, hidden});
    linears.push_back({p + "self_attn.k_proj", kv_heads * head_dim, hidden});
    linears.push_back({p + "self_attn.v_proj", kv_heads * head_dim, hidden});
    linears.push_back({p + "self_attn.o_proj", hidden, heads * head_dim});
    linears.push_back({p + "mlp.gate_proj", ffn, hidden});
    linears.push_back({p + "mlp.up_proj", ffn, hidden});
    linears.push_back({p + "mlp.down_proj", hidden, ffn});
  }
  auto norms = [&](std::map<std::string, MlxTensor>& t, const std::string& dtype) {
    t["model.norm.weight"] = mlx_tensor(dtype, {hidden}, true, 0);
    for (int64_t l = 0; l < layers; ++l) {
      const std::string p = cat("model.layers.", l, ".");
      t[p + "input_layernorm.weight"] = mlx_tensor(dtype, {hidden}, true, 0);
      t[p + "post_attention_layernorm.weight"] = mlx_tensor(dtype, {hidden}, true, 0);
    }
  };
  for (const std::string dtype : {"F32", "F16"}) {
    std::map<std::string, MlxTensor> t;
    norms(t, dtype);
    t["model.embed_tokens.weight"] = mlx_tensor(dtype, {vocab, hidden}, false, 1);
    int salt = 2;
    for (const auto& [module, out, in] : linears) t[module + ".weight"] = mlx_tensor(dtype, {out, in}, false, salt++);
    write_mlx_input(dir / cat("tiny_", dtype, ".mlx"), base, t);
  }
  {  // untied, Qwen2 (Q/K/V biases), llama3 RoPE scaling
    json config = base;
    config["model_type"] = "qwen2";
    config["tie_word_embeddings"] = false;
    config["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                              {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
    std::map<std::string, MlxTensor> t;
    norms(t, "F32");
    t["model.embed_tokens.weight"] = mlx_tensor("F32", {vocab, hidden}, false, 1);
    t["lm_head.weight"] = mlx_tensor("F32", {vocab, hidden}, false, 9);
    int salt = 2;
    for (const auto& [module, out, in] : linears) {
      t[module + ".weight"] = mlx_tensor("F32", {out, in}, false, salt++);
      if (module.find("q_proj") != std::string::npos || module.find("k_proj") != std::string::npos ||
          module.find("v_proj") != std::string::npos) {
        t[module + ".bias"] = mlx_tensor("F32", {out}, false, salt++);
      }
    }
    write_mlx_input(dir / "qwen2_untied.mlx", config, t);
  }
  {  // 4-bit affine, groups of 32, f16 scales and biases (the embedding too)
    json config = base;
    config["quantization"] = {{"group_size", 32}, {"bits", 4}};
    std::map<std::string, MlxTensor> t;
    norms(t, "F16");
    auto quantized = [&](const std::string& module, int64_t out, int64_t in, int salt) {
      t[module + ".weight"] = mlx_tensor("U32", {out, in / 8}, false, salt);
      t[module + ".scales"] = mlx_tensor("F16", {out, in / 32}, false, salt + 1);
      t[module + ".biases"] = mlx_tensor("F16", {out, in / 32}, false, salt + 2);
    };
    quantized("model.embed_tokens", vocab, hidden, 1);
    int salt = 4;
    for (const auto& [module, out, in] : linears) quantized(module, out, in, salt += 3);
    write_mlx_input(dir / "affine4.mlx", config, t);
  }
  // config.json alone, and a config with no tensors.
  write_mlx_input(dir / "no_tensors.mlx", base, {});
  std::ofstream(dir / "config_only.mlx", std::ios::binary) << base.dump();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SEED_DIR\n", argv[0]);
    return 2;
  }
  const fs::path dir = argv[1];
  try {
    fs::create_directories(dir / "gguf");
    fs::create_directories(dir / "mlx");
    onepass::model::MakeModelOptions options;
    options.threads = 1;
    onepass::model::ModelShape shape = tiny_shape();
    onepass::model::make_model(shape, DType::q4_0, dir / "gguf" / "tiny_q4_0.gguf", options);
    write_spm_model(shape, dir / "gguf" / "tiny_q4_0.gguf", dir / "gguf" / "tiny_spm.gguf");
    onepass::model::make_model(shape, DType::f16, dir / "gguf" / "tiny_f16.gguf", options);
    shape.tied = false;
    shape.pre = "smollm";
    shape.layers = 1;
    onepass::model::make_model(shape, DType::q8_0, dir / "gguf" / "tiny_q8_0_untied.gguf", options);
    onepass::model::make_model(shape, DType::q4_k, dir / "gguf" / "tiny_q4_k.gguf", options);
    write_mlx_seeds(dir / "mlx");
  } catch (const onepass::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
