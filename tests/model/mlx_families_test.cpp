// mlx-lm directories of each family load and run like the GGUF file they were converted
// from. tests/tools/gguf_to_mlx.py writes the directory independently of onepass (gguf-py
// dequantizes, numpy renames and re-lays the weights in Hugging Face's convention, the
// `tokenizers` library writes tokenizer.json); onepass then loads both and must give the
// same configuration, the same token ids, logits that differ only by the f16 rounding of
// the weights, and the same greedy continuation. Random models of each family come from
// make_model (small, with a sliding window shorter than the prompts); the real Gemma 3
// 270M file (scripts/fetch-model gemma3-270m) is converted when installed. Skipped when
// gguf-py, numpy or tokenizers is missing.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "onepass/backends/factory.h"
#include "onepass/core/error.h"
#include "onepass/model/llama.h"
#include "onepass/model/loader.h"
#include "onepass/model/model_maker.h"
#include "onepass/model/tokenizer.h"
#include "support/testing.h"
// White-box: the CPU kernels' instruction set, for the mixture models' comparisons.
#include "../../src/backends/cpu/kernels/quant_blocks.h"

namespace onepass::model {
namespace {

namespace fs = std::filesystem;

fs::path tool_path() {
  const fs::path beside =
      fs::path(__FILE__).parent_path().parent_path() / "tools" / "gguf_to_mlx.py";
  return fs::exists(beside) ? beside : fs::path("tests/tools/gguf_to_mlx.py");
}

std::string quote(const std::string& arg) {
  std::string out = "'";
  for (const char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// "" on success, "skip: ..." when a Python package is missing, else the failure and its output.
std::string run_tool(const std::string& args) {
  const std::string command = "python3 " + quote(tool_path().string()) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "skip: cannot run python3";
  std::string output;
  char chunk[256];
  while (size_t got = std::fread(chunk, 1, sizeof(chunk), pipe)) output.append(chunk, got);
  const int status = pclose(pipe);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 0) return {};
  return (code == 3 || code == 127 ? "skip: " : "failed: ") + output;
}

// Converts `gguf` into `dir` (kept between runs of the same file and scripts) with its
// matrices in `type`: f16, or q<bits>_<group> for mlx's affine quantisation; a mixture's
// experts `stacked` as mlx-lm writes them or `per-expert` as Hugging Face checkpoints keep them.
std::string convert(const fs::path& gguf, const fs::path& dir, const std::string& type = "f16",
                    const std::string& layout = "stacked") {
  return run_tool("convert " + quote(gguf.string()) + " " + quote(dir.string()) + " " + type + " " +
                  layout);
}

// The configuration both loaders derive; the MLX side runs Hugging Face's rotate-half RoPE
// and adds Gemma's 1 to its stored norm weights.
void expect_same_config(const LlamaConfig& gguf, const LlamaConfig& mlx) {
  EXPECT_EQ(mlx.architecture, gguf.architecture);
  EXPECT_EQ(mlx.vocab_size, gguf.vocab_size);
  EXPECT_EQ(mlx.hidden, gguf.hidden);
  EXPECT_EQ(mlx.ffn, gguf.ffn);
  EXPECT_EQ(mlx.layers, gguf.layers);
  EXPECT_EQ(mlx.heads, gguf.heads);
  EXPECT_EQ(mlx.kv_heads, gguf.kv_heads);
  EXPECT_EQ(mlx.head_dim, gguf.head_dim);
  EXPECT_EQ(mlx.rope_dims, gguf.rope_dims);
  EXPECT_FLOAT_EQ(mlx.rope_theta, gguf.rope_theta);
  EXPECT_FLOAT_EQ(mlx.rope_freq_scale, gguf.rope_freq_scale);
  EXPECT_FLOAT_EQ(mlx.norm_eps, gguf.norm_eps);
  EXPECT_EQ(mlx.tied_output, gguf.tied_output);
  EXPECT_EQ(mlx.qkv_bias, gguf.qkv_bias);
  EXPECT_EQ(mlx.activation, gguf.activation);
  EXPECT_EQ(mlx.qk_norm, gguf.qk_norm);
  EXPECT_EQ(mlx.post_norms, gguf.post_norms);
  EXPECT_FLOAT_EQ(mlx.embedding_scale, gguf.embedding_scale);
  EXPECT_FLOAT_EQ(mlx.attention_scale_or_default(), gguf.attention_scale_or_default());
  EXPECT_FLOAT_EQ(mlx.attn_softcap, gguf.attn_softcap);
  EXPECT_FLOAT_EQ(mlx.final_softcap, gguf.final_softcap);
  EXPECT_EQ(mlx.sliding_window, gguf.sliding_window);
  for (int64_t l = 0; l < gguf.layers; ++l) {
    EXPECT_EQ(mlx.layer_is_local(l), gguf.layer_is_local(l)) << "layer " << l;
    EXPECT_FLOAT_EQ(mlx.layer_rope_theta(l), gguf.layer_rope_theta(l)) << "layer " << l;
  }
  EXPECT_EQ(mlx.experts, gguf.experts);
  EXPECT_EQ(mlx.experts_used, gguf.experts_used);
  EXPECT_EQ(mlx.expert_ffn, gguf.expert_ffn);
  EXPECT_EQ(mlx.expert_weighting, gguf.expert_weighting);
  EXPECT_EQ(mlx.fused_qkv_tensor, gguf.fused_qkv_tensor);
  EXPECT_EQ(mlx.fused_gate_up_tensor, gguf.fused_gate_up_tensor);
  EXPECT_TRUE(mlx.rope_neox);
  EXPECT_FLOAT_EQ(mlx.norm_weight_offset, gguf.post_norms ? 1.0f : 0.0f);
}

struct Agreement {
  double max_error = 0;  // largest |logit difference| / largest |logit| of the GGUF run
  double mean_kl = 0;    // KL(GGUF || MLX) of the next-token distributions, averaged
  size_t top1_agree = 0, positions = 0;
};

void add_rows(std::span<const float> want, std::span<const float> got, size_t vocab, Agreement& a,
              double& kl_sum) {
  for (size_t row = 0; row * vocab < want.size(); ++row) {
    const auto w = want.subspan(row * vocab, vocab), g = got.subspan(row * vocab, vocab);
    double scale = 0, error = 0, max_w = -INFINITY, max_g = -INFINITY;
    for (size_t i = 0; i < vocab; ++i) {
      scale = std::max(scale, std::abs(static_cast<double>(w[i])));
      error = std::max(error, std::abs(static_cast<double>(w[i]) - g[i]));
      max_w = std::max(max_w, static_cast<double>(w[i]));
      max_g = std::max(max_g, static_cast<double>(g[i]));
    }
    a.max_error = std::max(a.max_error, error / std::max(scale, 1e-30));
    double sum_w = 0, sum_g = 0;
    for (size_t i = 0; i < vocab; ++i) {
      sum_w += std::exp(w[i] - max_w);
      sum_g += std::exp(g[i] - max_g);
    }
    double kl = 0;
    for (size_t i = 0; i < vocab; ++i) {
      const double lw = w[i] - max_w - std::log(sum_w), lg = g[i] - max_g - std::log(sum_g);
      kl += std::exp(lw) * (lw - lg);
    }
    kl_sum += kl;
    const auto top_w = std::max_element(w.begin(), w.end()) - w.begin();
    const auto top_g = std::max_element(g.begin(), g.end()) - g.begin();
    // A position whose best two GGUF logits lie within twice the row's largest difference
    // is a tie the two runs may break either way (random weights make such near-ties):
    // it counts as agreeing; max_error and mean_kl bound the difference itself.
    double second_w = -INFINITY;
    for (size_t i = 0; i < vocab; ++i) {
      if (static_cast<ptrdiff_t>(i) != top_w) second_w = std::max(second_w, static_cast<double>(w[i]));
    }
    const bool tie = max_w - second_w <= 2 * error;
    a.top1_agree += top_w == top_g || tie ? 1 : 0;
    ++a.positions;
  }
}

size_t argmax(std::span<const float> row) {
  return static_cast<size_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// A GGUF file whose mixture routers are the MLX directory's quantised ones (mlx-lm quantises
// routers; llama.cpp keeps them f32), multiplied by the same kernel: the same routing, so
// that the two runs stay comparable token for token. The unquantised directories check the
// routers' names and layout against the GGUF file's own.
class RoutersOf final : public ModelSource {
 public:
  RoutersOf(std::unique_ptr<ModelSource> gguf, const ModelSource& mlx)
      : gguf_(std::move(gguf)), mlx_(mlx) {}
  const LlamaConfig& config() const override { return gguf_->config(); }
  std::optional<HostTensor> find(std::string_view name) const override {
    if (name.ends_with(".ffn_gate_inp.weight")) return mlx_.find(name);
    return gguf_->find(name);
  }
  std::optional<TokenizerData> tokenizer_data() const override { return gguf_->tokenizer_data(); }
  std::string describe() const override { return gguf_->describe(); }

 private:
  std::unique_ptr<ModelSource> gguf_;
  const ModelSource& mlx_;
};

// Loads `gguf` and the directory, compares configuration, token ids, teacher-forced logits of
// each prompt and a greedy continuation of `steps` tokens. A mixture's GGUF side routes with
// the directory's routers when those are quantised.
Agreement compare(const fs::path& gguf_path, const fs::path& mlx_dir,
                  const std::vector<std::string>& prompts, int steps, int64_t context) {
  const auto mlx = open_model(mlx_dir);
  std::unique_ptr<ModelSource> gguf = open_model(gguf_path);
  if (gguf->config().moe() && mlx->find("blk.0.ffn_gate_inp.weight")->affine) {
    gguf = std::make_unique<RoutersOf>(std::move(gguf), *mlx);
  }
  expect_same_config(gguf->config(), mlx->config());
  const Tokenizer gguf_tok(*gguf->tokenizer_data());
  const Tokenizer mlx_tok(*mlx->tokenizer_data());
  EXPECT_EQ(mlx_tok.bos_id(), gguf_tok.bos_id());
  EXPECT_EQ(mlx_tok.eos_id(), gguf_tok.eos_id());

  // Mixture models: the smallest difference between the two runs can flip a router's near
  // tie, and a token's experts with it; the integer GEMM rounds x for the GGUF block formats
  // on every x86-64 vector set (so do the AMX products) where the MLX affine products keep it
  // f32, so both run on the portable path (the conversion is under test here, the kernels in
  // tests/ops).
  struct IsaCap {
    cpu::Isa saved = cpu::active_isa();
    explicit IsaCap(bool cap) {
      if (cap) cpu::set_active_isa(cpu::Isa::portable);
    }
    ~IsaCap() { cpu::set_active_isa(saved); }
  } isa_cap(gguf->config().moe());
  auto backend = testing::cpu_backend();
  LlamaModel a(backend, *gguf, LoadOptions{.context = context});
  LlamaModel b(backend, *mlx, LoadOptions{.context = context});
  const auto vocab = static_cast<size_t>(gguf->config().vocab_size);
  Agreement agreement;
  double kl_sum = 0;
  for (const std::string& prompt : prompts) {
    SCOPED_TRACE("prompt '" + prompt + "'");
    const std::vector<int32_t> ids = gguf_tok.encode(prompt);
    EXPECT_EQ(mlx_tok.encode(prompt), ids);
    a.reset();
    b.reset();
    const auto want_span = a.evaluate(ids);
    const std::vector<float> reference(want_span.begin(), want_span.end());
    const auto got = b.evaluate(ids);
    add_rows(reference, got, vocab, agreement, kl_sum);

    // Greedy continuation from each model's own choices: equal unless the GGUF run's two
    // best candidates are within the rounding of each other, after which they may part.
    std::vector<float> last_a(reference.end() - static_cast<std::ptrdiff_t>(vocab),
                              reference.end());
    std::vector<float> last_b(got.end() - static_cast<std::ptrdiff_t>(vocab), got.end());
    for (int s = 0; s < steps; ++s) {
      const size_t next_a = argmax(last_a), next_b = argmax(last_b);
      if (next_a != next_b) {
        const double gap = std::abs(static_cast<double>(last_a[next_a]) - last_a[next_b]);
        EXPECT_LT(gap, 1e-2 * std::abs(static_cast<double>(last_a[next_a])))
            << "greedy step " << s << ": GGUF " << next_a << ", MLX " << next_b;
        break;
      }
      const auto la = a.decode(static_cast<int32_t>(next_a));
      last_a.assign(la.begin(), la.end());
      const auto lb = b.decode(static_cast<int32_t>(next_b));
      last_b.assign(lb.begin(), lb.end());
    }
  }
  agreement.mean_kl = kl_sum / static_cast<double>(std::max<size_t>(agreement.positions, 1));
  return agreement;
}

const std::vector<std::string> kPrompts = {
    "The capital of France is Paris, and the capital of Italy is",
    "def add(a, b):\n    return a + b\n\nprint(add(2,",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
};

// ---------------------------------------------------------------------------------------
// Random models of each family

struct FamilyCase {
  const char* shape;             // a make-model shape, shrunk below
  int64_t head_dim;              // 0: hidden / heads
  DType gguf_type = DType::f16;  // of the GGUF file's matrices
  const char* type = "f16";      // of the directory's: f16, or q8_32 (q8_0's blocks as mlx groups)
};

void PrintTo(const FamilyCase& c, std::ostream* out) { *out << c.shape << " " << c.type; }

class MlxFamily : public ::testing::TestWithParam<FamilyCase> {};

// A mixture whose directory holds the GGUF file's values bit for bit and computes them in the
// same order: f16 or bf16 matrices, or q8_0's blocks as 8-bit groups of 32 (re-laid as the
// same q8_0 blocks); norms and routers kept f32 (a quantised directory's routers route both
// runs); and no Q/K row permutation (which Mixtral's "llama" GGUF files have and Hugging
// Face's layout undoes).
bool exact_twin(const ModelShape& shape, std::string_view type) {
  return shape.experts > 0 && shape.architecture != "llama" &&
         (type == "f16" || type == "bf16" || type == "q8_32");
}

// A family's random model, shrunk to test size (mixtures: enough experts that some get no
// token of a prompt).
ModelShape test_shape(const char* name, int64_t head_dim) {
  ModelShape shape = *find_model_shape(name);
  shape.hidden = 128;
  shape.ffn = 256;
  shape.layers =
      shape.sliding_window > 0 ? 7 : 2;  // Gemma 3: local layers on both sides of a global one
  shape.heads = 4;
  shape.kv_heads = shape.architecture == "phi3" ? 4 : 2;
  shape.vocab = 1024;
  shape.head_dim = head_dim;
  if (shape.sliding_window > 0) shape.sliding_window = 6;  // shorter than the prompts
  if (shape.experts > 0) {
    shape.experts = shape.architecture == "llama" ? 8 : 16;
    shape.experts_used = shape.architecture == "llama" ? 2 : 4;
    shape.expert_ffn = shape.expert_ffn > 0 ? 64 : 0;
  }
  shape.context = 256;
  return shape;
}

TEST_P(MlxFamily, DirectoryConvertedFromGgufMatchesIt) {
  const FamilyCase param = GetParam();
  const ModelShape shape = test_shape(param.shape, param.head_dim);
  const fs::path dir =
      fs::temp_directory_path() / cat("onepass_mlx_family_", ::getpid(), "_", param.shape);
  fs::remove_all(dir);
  fs::create_directories(dir);
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  make_model(shape, param.gguf_type, dir / "model.gguf", MakeModelOptions{.seed = seed});
  const std::string converted = convert(dir / "model.gguf", dir / "mlx", param.type);
  if (converted.starts_with("skip: ")) GTEST_SKIP() << converted;
  ASSERT_TRUE(converted.empty()) << converted;

  const char* down = shape.experts > 0 ? "blk.0.ffn_down_exps.weight" : "blk.0.ffn_down.weight";
  EXPECT_EQ(open_model(dir / "mlx")->find(down)->affine.has_value(),
            std::string(param.type).starts_with("q"));
  if (shape.experts > 0 && std::string(param.type).starts_with("q")) {
    // Routers as mlx-lm quantises them: Qwen3-MoE's by a per-layer entry of 8 bits in
    // groups of 64, Mixtral's and OLMoE's as the other matrices.
    const std::optional<HostTensor> router =
        open_model(dir / "mlx")->find("blk.1.ffn_gate_inp.weight");
    ASSERT_TRUE(router.has_value() && router->affine.has_value());
    const bool qwen = shape.architecture == "qwen3moe";
    EXPECT_EQ(router->affine->bits, qwen ? 8u : std::string(param.type) == "q4_32" ? 4u : 8u);
    EXPECT_EQ(router->affine->group_size, qwen ? 64u : 32u);
  }
  const Agreement a = compare(dir / "model.gguf", dir / "mlx", kPrompts, 8, 256);
  std::printf(
      "[ %-13s %-5s] %zu positions: max |error| %.2e of the largest logit, mean KL %.2e, top-1 "
      "%zu/%zu\n",
      param.shape, param.type, a.positions, a.max_error, a.mean_kl, a.top1_agree, a.positions);
  // The directory's matrices hold the GGUF's values exactly (f16, or q8_0's scales and
  // quants as mlx groups); only the norm weights (f32 in GGUF) are rounded to f16. A wrong
  // name, layout or key gives errors of the logits' own size (0.25 of the largest logit
  // when Gemma's FFN norms are swapped).
  EXPECT_LT(a.max_error, 1e-2);
  EXPECT_LT(a.mean_kl, 1e-5);
  EXPECT_GE(a.top1_agree + 2, a.positions);
  // Qwen3-MoE and OLMoE in f16, bf16 or q8_32: the directory holds the GGUF file's very
  // values in the same RoPE layout, so the logits are the same bits.
  if (exact_twin(shape, param.type)) {
    EXPECT_EQ(a.max_error, 0.0);
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MlxFamily,
                         ::testing::Values(FamilyCase{"smollm2-135m", 0},
                                           FamilyCase{"qwen3-0.6b", 64},
                                           FamilyCase{"gemma3-270m", 64},
                                           FamilyCase{"gemma2-2b", 48}, FamilyCase{"phi3-mini", 0},
                                           FamilyCase{"smollm2-135m", 0, DType::q8_0, "q8_32"},
                                           FamilyCase{"qwen3-0.6b", 64, DType::q8_0, "q8_32"},
                                           FamilyCase{"gemma3-270m", 64, DType::q8_0, "q8_32"},
                                           FamilyCase{"gemma2-2b", 48, DType::q8_0, "q8_32"},
                                           FamilyCase{"phi3-mini", 0, DType::q8_0, "q8_32"},
                                           FamilyCase{"qwen3-30b-a3b", 32},
                                           FamilyCase{"mixtral-8x7b", 0},
                                           FamilyCase{"qwen3-30b-a3b", 32, DType::bf16, "bf16"},
                                           FamilyCase{"qwen3-30b-a3b", 32, DType::q8_0, "q8_32"},
                                           FamilyCase{"mixtral-8x7b", 0, DType::q8_0, "q8_32"},
                                           FamilyCase{"qwen3-30b-a3b", 32, DType::q4_1, "q4_32"},
                                           FamilyCase{"mixtral-8x7b", 0, DType::q4_1, "q4_32"},
                                           FamilyCase{"olmoe-1b-7b", 0},
                                           FamilyCase{"olmoe-1b-7b", 0, DType::bf16, "bf16"},
                                           FamilyCase{"olmoe-1b-7b", 0, DType::q8_0, "q8_32"},
                                           FamilyCase{"olmoe-1b-7b", 0, DType::q4_1, "q4_32"}),
                         [](const auto& param_info) {
                           std::string name =
                               std::string(param_info.param.shape) + "_" + param_info.param.type;
                           std::replace(name.begin(), name.end(), '-', '_');
                           std::replace(name.begin(), name.end(), '.', '_');
                           return name;
                         });

// ---------------------------------------------------------------------------------------
// Gemma 3 as the multimodal checkpoints lay it out, and config.json errors

// Renames every tensor of a safetensors file (the payload stays; offsets are relative to it).
void rename_tensors(const fs::path& path,
                    const std::function<std::string(const std::string&)>& rename,
                    const nlohmann::json& extra = nlohmann::json::object()) {
  std::ifstream in(path, std::ios::binary);
  uint64_t length = 0;
  in.read(reinterpret_cast<char*>(&length), 8);
  std::string header(length, '\0');
  in.read(header.data(), static_cast<std::streamsize>(length));
  const std::string payload((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  nlohmann::json renamed = nlohmann::json::object();
  const nlohmann::json original = nlohmann::json::parse(header);
  for (const auto& [name, info] : original.items()) {
    renamed[name == "__metadata__" ? name : rename(name)] = info;
  }
  std::string data = payload;
  for (const auto& [name, info] : extra.items()) {  // {dtype, shape, bytes}: zeros after the rest
    const size_t bytes = info["bytes"].get<size_t>();
    renamed[name] = {{"dtype", info["dtype"]},
                     {"shape", info["shape"]},
                     {"data_offsets", {data.size(), data.size() + bytes}}};
    data.append(bytes, '\0');
  }
  std::string text = renamed.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint64_t new_length = text.size();
  out.write(reinterpret_cast<const char*>(&new_length), 8);
  out << text << data;
}

// A random Gemma 3 and its mlx directory in a fresh folder; "" or why not.
std::string make_gemma3(const fs::path& dir) {
  ModelShape shape = *find_model_shape("gemma3-270m");
  shape.hidden = 128;
  shape.ffn = 256;
  shape.layers = 7;
  shape.heads = 4;
  shape.kv_heads = 2;
  shape.head_dim = 64;
  shape.vocab = 1024;
  shape.sliding_window = 6;
  shape.context = 256;
  fs::remove_all(dir);
  fs::create_directories(dir);
  make_model(shape, DType::f16, dir / "model.gguf",
             MakeModelOptions{.seed = testing::fresh_seed()});
  return convert(dir / "model.gguf", dir / "mlx");
}

nlohmann::json read_config(const fs::path& dir) {
  std::ifstream in(dir / "config.json");
  return nlohmann::json::parse(in);
}

TEST(MlxGemma3, MultimodalLayoutLoadsItsLanguageModel) {
  const fs::path dir =
      fs::temp_directory_path() / cat("onepass_mlx_gemma3_multimodal_", ::getpid());
  const std::string made = make_gemma3(dir);
  if (made.starts_with("skip: ")) GTEST_SKIP() << made;
  ASSERT_TRUE(made.empty()) << made;
  // Gemma3ForConditionalGeneration: the text model under language_model.model., its keys in
  // text_config without vocab_size (the embedding's rows), vision tensors beside it.
  const nlohmann::json text = read_config(dir / "mlx");
  nlohmann::json text_config = text;
  text_config.erase("vocab_size");
  text_config.erase("tie_word_embeddings");
  const nlohmann::json multimodal = {{"model_type", "gemma3"},
                                     {"architectures", {"Gemma3ForConditionalGeneration"}},
                                     {"text_config", text_config},
                                     {"vision_config", {{"model_type", "siglip_vision_model"}}},
                                     {"mm_tokens_per_image", 256}};
  std::ofstream(dir / "mlx" / "config.json") << multimodal.dump(1);
  rename_tensors(dir / "mlx" / "model.safetensors",
                 [](const std::string& name) { return "language_model." + name; },
                 {{"vision_tower.vision_model.post_layernorm.weight",
                   {{"dtype", "F16"}, {"shape", {2}}, {"bytes", 4}}}});
  const Agreement a = compare(dir / "model.gguf", dir / "mlx", {kPrompts[0]}, 4, 256);
  EXPECT_LT(a.max_error, 1e-2);
  EXPECT_LT(a.mean_kl, 1e-5);
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

// What opening the MLX directory `mlx` says once `edit` is applied to its config.json
// (`good`, written back edited): the error, or "" when it opens.
std::string config_error(const fs::path& mlx, const nlohmann::json& good,
                         const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json config = good;
  edit(config);
  std::ofstream(mlx / "config.json") << config.dump(1);
  try {
    (void)open_model(mlx);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(MlxGemma3, ConfigErrorsNameTheKey) {
  const fs::path dir = fs::temp_directory_path() / cat("onepass_mlx_gemma3_errors_", ::getpid());
  const std::string made = make_gemma3(dir);
  if (made.starts_with("skip: ")) GTEST_SKIP() << made;
  ASSERT_TRUE(made.empty()) << made;
  const nlohmann::json good = read_config(dir / "mlx");
  auto error_with = [&](const std::function<void(nlohmann::json&)>& edit) {
    return config_error(dir / "mlx", good, edit);
  };
  EXPECT_EQ(error_with([](nlohmann::json&) {}), "");
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](nlohmann::json& c) { c["model_type"] = "gemma3n"; },
       "model_type 'gemma3n' is not supported (llama, mistral, qwen2, qwen3, gemma2, gemma3_text, "
       "gemma3, phi3, qwen3_moe, mixtral, olmoe)"},
      {[](nlohmann::json& c) { c["hidden_activation"] = "relu"; },
       "activation 'relu' is not supported"},
      {[](nlohmann::json& c) { c["layer_types"][1] = "full_attention"; },
       "layer_types is not a repeating pattern of local layers ending in one global layer (layer 3 "
       "breaks the "
       "period 2)"},
      {[](nlohmann::json& c) { c["layer_types"][0] = "chunked_attention"; },
       "layer_types holds \"chunked_attention\""},
      {[](nlohmann::json& c) { c["layer_types"].erase(0); },
       "'layer_types' must list one entry per layer (7)"},
      {[](nlohmann::json& c) { c["sliding_window"] = 0; },
       "'sliding_window' is 0, expected a positive"},
      {[](nlohmann::json& c) { c["query_pre_attn_scalar"] = -1; }, "'query_pre_attn_scalar' is -1"},
      {[](nlohmann::json& c) { c["use_bidirectional_attention"] = true; },
       "use_bidirectional_attention: true"},
      {[](nlohmann::json& c) {
         c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}};
       },
       "rope scaling 'yarn' is not supported"},
      {[](nlohmann::json& c) { c["text_config"] = 3; }, "'text_config' is 3, expected an object"},
  };
  for (const auto& [edit, expected] : cases) {
    const std::string error = error_with(edit);
    EXPECT_NE(error.find(expected), std::string::npos)
        << "expected '" << expected << "' in: " << error;
    EXPECT_NE(error.find("mlx"), std::string::npos) << error;
  }
  // Without layer_types: sliding_window_pattern, else Gemma 3's period of 6.
  auto config_with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json config = good;
    edit(config);
    std::ofstream(dir / "mlx" / "config.json") << config.dump(1);
    return open_model(dir / "mlx")->config();
  };
  const LlamaConfig by_default = config_with([](nlohmann::json& c) {
    c.erase("layer_types");
    c.erase("_sliding_window_pattern");
  });
  EXPECT_EQ(by_default.sliding_window_period, 6);
  EXPECT_EQ(config_with([](nlohmann::json& c) {
              c.erase("layer_types");
              c["sliding_window_pattern"] = 3;
            }).sliding_window_period,
            3);
  EXPECT_EQ(config_with([](nlohmann::json& c) {
              for (auto& t : c["layer_types"]) t = "full_attention";
            }).sliding_window,
            0);
  const LlamaConfig scaled = config_with([](nlohmann::json& c) {
    c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  });
  EXPECT_FLOAT_EQ(scaled.rope_freq_scale, 0.125f);
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------------------
// Qwen3-MoE config.json keys

// A random Qwen3-MoE (16 experts, 4 used) and its mlx directory in a fresh folder; "" or why not.
std::string make_qwen3_moe(const fs::path& dir) {
  ModelShape shape = *find_model_shape("qwen3-30b-a3b");
  shape.hidden = 128;
  shape.ffn = 256;
  shape.layers = 2;
  shape.heads = 4;
  shape.kv_heads = 2;
  shape.head_dim = 32;
  shape.vocab = 1024;
  shape.experts = 16;
  shape.experts_used = 4;
  shape.expert_ffn = 64;
  shape.context = 256;
  fs::remove_all(dir);
  fs::create_directories(dir);
  make_model(shape, DType::f16, dir / "model.gguf",
             MakeModelOptions{.seed = testing::fresh_seed()});
  return convert(dir / "model.gguf", dir / "mlx");
}

TEST(MlxQwen3Moe, ConfigErrorsNameTheKey) {
  const fs::path dir = fs::temp_directory_path() / cat("onepass_mlx_qwen3moe_errors_", ::getpid());
  const std::string made = make_qwen3_moe(dir);
  if (made.starts_with("skip: ")) GTEST_SKIP() << made;
  ASSERT_TRUE(made.empty()) << made;
  const nlohmann::json good = read_config(dir / "mlx");
  auto error_with = [&](const std::function<void(nlohmann::json&)>& edit) {
    return config_error(dir / "mlx", good, edit);
  };
  EXPECT_EQ(error_with([](nlohmann::json&) {}), "");
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](nlohmann::json& c) { c.erase("num_experts"); }, "missing integer 'num_experts'"},
      {[](nlohmann::json& c) { c.erase("moe_intermediate_size"); },
       "missing integer 'moe_intermediate_size'"},
      {[](nlohmann::json& c) { c["num_experts"] = 0; },
       "'num_experts' is 0, expected a positive number of experts"},
      {[](nlohmann::json& c) { c["num_experts_per_tok"] = 17; },
       "'num_experts_per_tok' is 17, expected 1..num_experts (16)"},
      {[](nlohmann::json& c) { c["norm_topk_prob"] = "yes"; }, "'norm_topk_prob' is \"yes\""},
      {[](nlohmann::json& c) { c["mlp_only_layers"] = {1}; },
       "layer 1 has a dense feed-forward (decoder_sparse_step 1, mlp_only_layers); a model of "
       "both dense and expert layers is not supported"},
      {[](nlohmann::json& c) { c["decoder_sparse_step"] = 2; },
       "layer 0 has a dense feed-forward (decoder_sparse_step 2"},
      {[](nlohmann::json& c) { c["decoder_sparse_step"] = 0; }, "'decoder_sparse_step' is 0"},
      {[](nlohmann::json& c) { c["mlp_only_layers"] = "none"; }, "'mlp_only_layers' is \"none\""},
  };
  for (const auto& [edit, expected] : cases) {
    const std::string error = error_with(edit);
    EXPECT_NE(error.find(expected), std::string::npos)
        << "expected '" << expected << "' in: " << error;
    EXPECT_NE(error.find("mlx"), std::string::npos) << error;
  }
  // Layers named past the last one do not make a dense layer.
  EXPECT_EQ(error_with([](nlohmann::json& c) { c["mlp_only_layers"] = {7}; }), "");
  // Without norm_topk_prob the selected experts keep their share of a softmax over all.
  std::ofstream(dir / "mlx" / "config.json") << nlohmann::json(good).dump(1);
  EXPECT_EQ(open_model(dir / "mlx")->config().expert_weighting, ExpertWeighting::softmax_selected);
  nlohmann::json unnormalised = good;
  unnormalised["norm_topk_prob"] = false;
  std::ofstream(dir / "mlx" / "config.json") << unnormalised.dump(1);
  EXPECT_EQ(open_model(dir / "mlx")->config().expert_weighting, ExpertWeighting::softmax_all);
  unnormalised.erase("norm_topk_prob");  // Hugging Face's Qwen3MoeConfig default: false
  std::ofstream(dir / "mlx" / "config.json") << unnormalised.dump(1);
  EXPECT_EQ(open_model(dir / "mlx")->config().expert_weighting, ExpertWeighting::softmax_all);

  // A per-expert tensor beside the stacked ones is named as such.
  std::ofstream(dir / "mlx" / "config.json") << good.dump(1);
  rename_tensors(dir / "mlx" / "model.safetensors", [](const std::string& name) { return name; },
                 {{"model.layers.0.mlp.experts.0.gate_proj.weight",
                   {{"dtype", "F16"}, {"shape", {64, 128}}, {"bytes", 64 * 128 * 2}}}});
  const std::string error = error_with([](nlohmann::json&) {});
  EXPECT_NE(error.find("tensor 'model.layers.0.mlp.switch_mlp.gate_proj.weight' holds the experts "
                       "stacked, but 'model.layers.0.mlp.experts.0.gate_proj.weight' holds one "
                       "expert; expected one layout"),
            std::string::npos)
      << error;
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------------------
// OLMoE config.json keys

TEST(MlxOlmoe, ConfigKeys) {
  const fs::path dir = fs::temp_directory_path() / cat("onepass_mlx_olmoe_keys_", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  make_model(test_shape("olmoe-1b-7b", 0), DType::f16, dir / "model.gguf",
             MakeModelOptions{.seed = testing::fresh_seed()});
  const std::string made = convert(dir / "model.gguf", dir / "mlx");
  if (made.starts_with("skip: ")) GTEST_SKIP() << made;
  ASSERT_TRUE(made.empty()) << made;
  const nlohmann::json good = read_config(dir / "mlx");
  auto config_with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json config = good;
    edit(config);
    std::ofstream(dir / "mlx" / "config.json") << config.dump(1);
    return open_model(dir / "mlx")->config();
  };
  // Q and K norms over the whole projections; top-k weights a share of the softmax over all
  // experts unless norm_topk_prob (absent: false, as OlmoeConfig).
  const LlamaConfig plain = config_with([](nlohmann::json& c) {
    c.erase("norm_topk_prob");
    c.erase("clip_qkv");
  });
  EXPECT_EQ(plain.architecture, "olmoe");
  EXPECT_TRUE(plain.qk_norm && plain.qk_norm_whole);
  EXPECT_EQ(plain.expert_weighting, ExpertWeighting::softmax_all);
  EXPECT_EQ(plain.expert_ffn, plain.ffn);  // intermediate_size is one expert's
  EXPECT_EQ(config_with([](nlohmann::json& c) { c["norm_topk_prob"] = true; }).expert_weighting,
            ExpertWeighting::softmax_selected);
  // OlmoeConfig's defaults: 64 experts, 8 used.
  const LlamaConfig defaults = [&] {
    nlohmann::json config = good;
    config.erase("num_experts");
    config.erase("num_experts_per_tok");
    std::ofstream(dir / "mlx" / "config.json") << config.dump(1);
    return open_model(dir / "mlx")->config();
  }();
  EXPECT_EQ(defaults.experts, 64);
  EXPECT_EQ(defaults.experts_used, 8);
  const std::string clip =
      config_error(dir / "mlx", good, [](nlohmann::json& c) { c["clip_qkv"] = 8.0; });
  EXPECT_NE(clip.find("'clip_qkv' is 8.0; clamping Q, K and V is not supported"), std::string::npos)
      << clip;
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------------------
// Hugging Face checkpoints: one tensor per expert

// The teacher-forced logits of `prompt` (as the directory's tokenizer splits it).
std::vector<float> logits_of(const fs::path& model_path, const std::string& prompt) {
  const auto source = open_model(model_path);
  const Tokenizer tokenizer(*source->tokenizer_data());
  LlamaModel model(testing::cpu_backend(), *source, LoadOptions{.context = 256});
  const auto logits = model.evaluate(tokenizer.encode(prompt));
  return {logits.begin(), logits.end()};
}

struct PerExpertCase {
  const char* shape;
  int64_t head_dim;
  DType gguf_type = DType::f16;
  const char* type = "f16";
};

void PrintTo(const PerExpertCase& c, std::ostream* out) {
  *out << c.shape << " " << c.type;
}

class MlxPerExpert : public ::testing::TestWithParam<PerExpertCase> {};

// The same GGUF file converted twice, its experts stacked and one tensor per expert: the
// per-expert directory gives the stacked one's logits bit for bit (the same values stacked
// on loading), and the GGUF file's as MlxFamily requires them.
TEST_P(MlxPerExpert, PerExpertTensorsMatchTheStackedOnes) {
  const PerExpertCase param = GetParam();
  const ModelShape shape = test_shape(param.shape, param.head_dim);
  const fs::path dir =
      fs::temp_directory_path() / cat("onepass_mlx_per_expert_", ::getpid(), "_", param.shape);
  fs::remove_all(dir);
  fs::create_directories(dir);
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  make_model(shape, param.gguf_type, dir / "model.gguf", MakeModelOptions{.seed = seed});
  for (const char* layout : {"stacked", "per-expert"}) {
    const std::string converted = convert(dir / "model.gguf", dir / layout, param.type, layout);
    if (converted.starts_with("skip: ")) GTEST_SKIP() << converted;
    ASSERT_TRUE(converted.empty()) << converted;
  }
  const std::string module = shape.architecture == "llama" ? "block_sparse_moe" : "mlp";
  const std::string gate = shape.architecture == "llama" ? "w1" : "gate_proj";
  const auto per_expert = open_model(dir / "per-expert");
  const std::optional<HostTensor> stacked = per_expert->find("blk.1.ffn_gate_exps.weight");
  ASSERT_TRUE(stacked.has_value());
  ASSERT_EQ(stacked->parts.size(), static_cast<size_t>(shape.experts));
  EXPECT_EQ(stacked->parts[3].name, cat("model.layers.1.", module, ".experts.3.", gate, ".weight"));
  EXPECT_EQ(stacked->affine.has_value(), std::string(param.type).starts_with("q"));
  EXPECT_TRUE(open_model(dir / "stacked")->find("blk.1.ffn_gate_exps.weight")->parts.empty());

  for (const std::string& prompt : kPrompts) {
    SCOPED_TRACE("prompt '" + prompt + "'");
    const std::vector<float> want = logits_of(dir / "stacked", prompt);
    const std::vector<float> got = logits_of(dir / "per-expert", prompt);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
  }
  const Agreement a = compare(dir / "model.gguf", dir / "per-expert", kPrompts, 8, 256);
  std::printf(
      "[ %-13s %-5s per-expert] %zu positions: max |error| %.2e, mean KL %.2e, top-1 %zu/%zu\n",
      param.shape, param.type, a.positions, a.max_error, a.mean_kl, a.top1_agree, a.positions);
  EXPECT_LT(a.max_error, 1e-2);
  EXPECT_LT(a.mean_kl, 1e-5);
  EXPECT_GE(a.top1_agree + 2, a.positions);
  if (exact_twin(shape, param.type)) {
    EXPECT_EQ(a.max_error, 0.0);
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MlxPerExpert,
                         ::testing::Values(PerExpertCase{"qwen3-30b-a3b", 32},
                                           PerExpertCase{"mixtral-8x7b", 0},
                                           PerExpertCase{"olmoe-1b-7b", 0},
                                           PerExpertCase{"olmoe-1b-7b", 0, DType::bf16, "bf16"},
                                           PerExpertCase{"qwen3-30b-a3b", 32, DType::q8_0, "q8_32"},
                                           PerExpertCase{"mixtral-8x7b", 0, DType::q4_1, "q4_32"}),
                         [](const auto& param_info) {
                           std::string name =
                               std::string(param_info.param.shape) + "_" + param_info.param.type;
                           std::replace(name.begin(), name.end(), '-', '_');
                           std::replace(name.begin(), name.end(), '.', '_');
                           return name;
                         });

// The CUDA backend takes the same stacked tensors: a per-expert directory's logits there are
// the stacked directory's, bit for bit.
TEST(MlxPerExpert, GpuLoadsTheSameStackedTensors) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device available";
  const fs::path dir = fs::temp_directory_path() / cat("onepass_mlx_per_expert_gpu_", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  struct Case {
    const char* shape;
    int64_t head_dim;
    const char* type;
  };
  for (const Case c : {Case{"qwen3-30b-a3b", 32, "f16"}, Case{"olmoe-1b-7b", 0, "bf16"},
                       Case{"mixtral-8x7b", 0, "q4_32"}, Case{"olmoe-1b-7b", 0, "q8_32"}}) {
    SCOPED_TRACE(cat(c.shape, " ", c.type));
    const fs::path gguf = dir / cat(c.shape, ".gguf");
    make_model(test_shape(c.shape, c.head_dim), DType::f16, gguf, MakeModelOptions{.seed = seed});
    std::vector<std::vector<float>> logits;
    for (const char* layout : {"stacked", "per-expert"}) {
      const fs::path mlx = dir / cat(c.shape, "_", c.type, "_", layout);
      const std::string converted = convert(gguf, mlx, c.type, layout);
      if (converted.starts_with("skip: ")) GTEST_SKIP() << converted;
      ASSERT_TRUE(converted.empty()) << converted;
      const auto source = open_model(mlx);
      const Tokenizer tokenizer(*source->tokenizer_data());
      LlamaModel model(make_cuda_backend(0, testing::test_options()), *source,
                       LoadOptions{.context = 256});
      const auto got = model.evaluate(tokenizer.encode(kPrompts[2]));
      logits.emplace_back(got.begin(), got.end());
    }
    ASSERT_EQ(logits[0].size(), logits[1].size());
    EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)), 0);
  }
  fs::remove_all(dir);
}

// A field of /proc/self/status in bytes ("VmRSS", "VmHWM").
int64_t status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  }
  return -1;
}

// The growth of the peak resident set while `path` loads for the CPU.
int64_t load_peak_growth(const fs::path& path) {
  const auto source = open_model(path);
  std::ofstream("/proc/self/clear_refs") << "5";  // the peak (VmHWM) restarts from here
  const int64_t before = status_bytes("VmRSS");
  if (before <= 0 || status_bytes("VmHWM") > before + (int64_t{1} << 20)) return -1;
  LlamaModel model(testing::cpu_backend(), *source, LoadOptions{.context = 64, .max_batch = 16});
  return status_bytes("VmHWM") - before;
}

// Stacking the experts on loading holds one expert's copy at most: a per-expert directory's
// load peaks as the stacked directory's does (the backend's copy and the buffers), not by a
// second copy of the experts.
TEST(MlxPerExpert, LoadKeepsTheWeightsResidentOnce) {
#ifdef ONEPASS_ASAN
  GTEST_SKIP() << "AddressSanitizer's shadow memory inflates the resident set";
#endif
  ModelShape shape = test_shape("olmoe-1b-7b", 0);  // 16 experts of 512 x 256: 12 MB f16 a layer
  shape.hidden = 256;
  shape.ffn = 512;
  shape.layers = 4;
  const fs::path dir = fs::temp_directory_path() / cat("onepass_mlx_per_expert_rss_", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  make_model(shape, DType::f16, dir / "model.gguf",
             MakeModelOptions{.seed = testing::fresh_seed()});
  for (const char* type : {"f16", "q4_32"}) {
    for (const char* layout : {"stacked", "per-expert"}) {
      const std::string converted =
          convert(dir / "model.gguf", dir / cat(type, "_", layout), type, layout);
      if (converted.starts_with("skip: ")) GTEST_SKIP() << converted;
      ASSERT_TRUE(converted.empty()) << converted;
    }
  }
  (void)load_peak_growth(dir / "f16_stacked");  // what the first load sets up once
  for (const char* type : {"f16", "q4_32"}) {
    SCOPED_TRACE(type);
    const auto weights =
        static_cast<double>(fs::file_size(dir / cat(type, "_stacked") / "model.safetensors"));
    const int64_t stacked = load_peak_growth(dir / cat(type, "_stacked"));
    const int64_t per_expert = load_peak_growth(dir / cat(type, "_per-expert"));
    if (stacked < 0 || per_expert < 0) GTEST_SKIP() << "the peak resident set cannot be reset";
    std::printf(
        "[ %-5s] %.1f MB of weights raised the peak resident set by %.1f MB stacked, "
        "%.1f MB per expert\n",
        type, weights / 1e6, static_cast<double>(stacked) / 1e6,
        static_cast<double>(per_expert) / 1e6);
    // A second copy of the experts would add ~0.9x the weights. What per-expert tensors may
    // add: one expert's re-laid copy (0.08 MB in q4_1) and the file pages each small tensor
    // shares with its neighbours, which stay mapped until the load ends (~0.1x here, where a
    // quantised expert's scales and biases are 8 KB each).
    EXPECT_LE(static_cast<double>(per_expert), static_cast<double>(stacked) + 0.25 * weights);
  }
  fs::remove_all(dir);
}

// Per-expert tensors that do not make the stacked ones: each error names the tensor.
TEST(MlxPerExpertErrors, NameTheTensor) {
  const fs::path dir =
      fs::temp_directory_path() / cat("onepass_mlx_per_expert_errors_", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  make_model(test_shape("qwen3-30b-a3b", 32), DType::f16, dir / "model.gguf",
             MakeModelOptions{.seed = testing::fresh_seed()});
  const std::string made = convert(dir / "model.gguf", dir / "good", "f16", "per-expert");
  if (made.starts_with("skip: ")) GTEST_SKIP() << made;
  ASSERT_TRUE(made.empty()) << made;
  const nlohmann::json good = read_config(dir / "good");
  EXPECT_EQ(config_error(dir / "good", good, [](nlohmann::json&) {}), "");

  // A copy of the directory whose safetensors file `edit` renames (and adds to).
  auto error_after = [&](const std::function<std::string(const std::string&)>& rename,
                         const nlohmann::json& extra,
                         const std::function<void(nlohmann::json&)>& edit_config) {
    fs::remove_all(dir / "bad");
    fs::copy(dir / "good", dir / "bad");
    rename_tensors(dir / "bad" / "model.safetensors", rename, extra);
    return config_error(dir / "bad", good, edit_config);
  };
  auto same = [](const std::string& name) { return name; };
  auto moved = [](const std::string& gone) {
    return [gone](const std::string& name) { return name == gone ? "unused." + name : name; };
  };
  auto no_edit = [](nlohmann::json&) {};
  const std::string e5 = "model.layers.1.mlp.experts.5.up_proj.weight";
  const std::string e3 = "model.layers.0.mlp.experts.3.gate_proj.weight";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {error_after(moved(e5), nlohmann::json::object(), no_edit),
       "no tensor 'model.layers.1.mlp.experts.5.up_proj.weight'; expected one tensor per expert "
       "0..15 (num_experts), as 'model.layers.1.mlp.experts.0.up_proj.weight'"},
      {error_after(same, nlohmann::json::object(),
                   [](nlohmann::json& c) { c["num_experts"] = 15; }),
       "' belongs to expert 15, but num_experts is 15 (expected experts 0..14)"},
      {error_after(same, nlohmann::json::object(),
                   [](nlohmann::json& c) { c["num_experts"] = 17; }),
       "no tensor 'model.layers.0.mlp.experts.16.gate_proj.weight'; expected one tensor per "
       "expert 0..16 (num_experts)"},
      {error_after(moved(e3),
                   {{e3, {{"dtype", "F16"}, {"shape", {32, 128}}, {"bytes", 32 * 128 * 2}}}},
                   no_edit),
       "tensor 'model.layers.0.mlp.experts.3.gate_proj.weight' is f16 [32, 128], but "
       "'model.layers.0.mlp.experts.0.gate_proj.weight' is f16 [64, 128]; expected every "
       "expert's tensor of one type and shape"},
      {error_after(moved(e3),
                   {{e3, {{"dtype", "F32"}, {"shape", {64, 128}}, {"bytes", 64 * 128 * 4}}}},
                   no_edit),
       "tensor 'model.layers.0.mlp.experts.3.gate_proj.weight' is f32 [64, 128], but "
       "'model.layers.0.mlp.experts.0.gate_proj.weight' is f16 [64, 128]"},
      {error_after(same,
                   {{"model.layers.1.mlp.switch_mlp.down_proj.weight",
                     {{"dtype", "F16"}, {"shape", {16, 128, 64}}, {"bytes", 16 * 128 * 64 * 2}}}},
                   no_edit),
       "tensor 'model.layers.1.mlp.switch_mlp.down_proj.weight' holds the experts stacked, but "
       "'model.layers.1.mlp.experts.0.down_proj.weight' holds one expert; expected one layout"},
  };
  for (const auto& [error, expected] : cases) {
    EXPECT_NE(error.find(expected), std::string::npos)
        << "expected '" << expected << "' in: " << error;
    EXPECT_NE(error.find("mlx"), std::string::npos) << error;
  }

  // Every expert of one shape, but not the configuration's: the model names the tensors.
  nlohmann::json narrow = good;
  narrow["moe_intermediate_size"] = 32;
  std::ofstream(dir / "good" / "config.json") << narrow.dump(1);
  try {
    const auto source = open_model(dir / "good");
    LlamaModel model(testing::cpu_backend(), *source, LoadOptions{.context = 64});
    ADD_FAILURE() << "loaded experts of 64 rows as 32";
  } catch (const Error& e) {
    const std::string error = e.what();
    EXPECT_NE(
        error.find("tensor 'model.layers.0.mlp.experts.*.gate_proj.weight' has shape [16, 64, "
                   "128], expected [16, 32, 128]"),
        std::string::npos)
        << error;
  }
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------------------
// The real Gemma 3 270M

TEST(MlxGemmaReal, DirectoryConvertedFromTheGgufMatchesIt) {
  const fs::path gguf = "models/gemma-3-270m-q4_k_m.gguf";
  if (!fs::exists(gguf)) GTEST_SKIP() << gguf << " not installed (scripts/fetch-model gemma3-270m)";
  // Kept between runs: the conversion of 268M weights takes longer than the comparison.
  const fs::path dir = fs::temp_directory_path() / cat("onepass_mlx_gemma3_270m_", ::getuid());
  const std::string converted = convert(gguf, dir);
  if (converted.starts_with("skip: ")) GTEST_SKIP() << converted;
  ASSERT_TRUE(converted.empty()) << converted;
  const Agreement a = compare(gguf, dir, kPrompts, 12, 128);
  std::printf(
      "gemma3 270m: %zu positions: max |error| %.2e of the largest logit, mean KL %.2e, top-1 "
      "%zu/%zu\n",
      a.positions, a.max_error, a.mean_kl, a.top1_agree, a.positions);
  // GGUF multiplies the quantised blocks directly; the directory holds their values rounded
  // to f16.
  EXPECT_LT(a.max_error, 2e-2);
  EXPECT_LT(a.mean_kl, 1e-4);
  EXPECT_GE(a.top1_agree + 1, a.positions);
}

}  // namespace
}  // namespace onepass::model
