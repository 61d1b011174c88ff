// Hostile and careless model files past the parsers: configuration values out of range or
// inconsistent with the tensors, NaN weights, special files where a file is expected, and
// output paths that are not regular files. Each must give one onepass::Error naming the
// file, key or tensor — never a crash, a hang or a silently wrong model.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "onepass/core/error.h"
#include "onepass/core/half.h"
#include "onepass/model/gguf.h"
#include "onepass/model/llama.h"
#include "onepass/model/loader.h"
#include "onepass/model/mapped_file.h"
#include "onepass/model/tokenizer.h"
#include "support/testing.h"

namespace onepass {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The message of the Error `body` throws; "" when it throws nothing. Any other exception
// fails the test.
std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an onepass::Error: " << e.what();
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR(body, part)                                            \
  do {                                                                      \
    const std::string message_ = error_of([&] { body; });                   \
    EXPECT_NE(message_.find(part), std::string::npos) << "message: " << message_; \
  } while (0)

// A tiny Llama GGUF (f32 weights) whose metadata and tensors a test can break.
struct TinyGguf {
  int64_t hidden = 64, ffn = 128, layers = 2, heads = 4, kv_heads = 2, vocab = 256;
  int64_t file_layers = -1;                       // blocks written; -1: `layers`
  std::map<std::string, uint32_t> u32;            // metadata overrides ("llama.block_count")
  std::map<std::string, std::string> strings;     // extra string metadata
  std::map<std::string, float> f32;               // extra f32 metadata
  std::map<std::string, std::vector<int64_t>> shapes;  // tensor shape overrides
  std::string nan_tensor;                         // a tensor whose first value is NaN
  std::map<std::string, DType> types;             // tensor type overrides (f32 or f16)
  std::map<std::string, std::vector<int64_t>> extra;  // more tensors ("rope_freqs.weight")
  int64_t tokens = -1;                            // vocabulary tokens; -1: none
};

void write_gguf(const fs::path& path, const TinyGguf& g) {
  model::GgufWriter w(path);
  std::map<std::string, uint32_t> u32 = {
      {"llama.block_count", static_cast<uint32_t>(g.layers)},
      {"llama.embedding_length", static_cast<uint32_t>(g.hidden)},
      {"llama.feed_forward_length", static_cast<uint32_t>(g.ffn)},
      {"llama.attention.head_count", static_cast<uint32_t>(g.heads)},
      {"llama.attention.head_count_kv", static_cast<uint32_t>(g.kv_heads)},
      {"llama.context_length", 256},
  };
  for (const auto& [key, value] : g.u32) u32[key] = value;
  w.set_string("general.architecture", "llama");
  for (const auto& [key, value] : u32) w.set_u32(key, value);
  for (const auto& [key, value] : g.strings) w.set_string(key, value);
  for (const auto& [key, value] : g.f32) w.set_f32(key, value);
  if (g.tokens >= 0) {
    std::vector<std::string> tokens;
    for (int64_t i = 0; i < g.tokens; ++i) tokens.push_back(cat("t", i));
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_strings("tokenizer.ggml.tokens", tokens);
  }
  const int64_t q_dim = g.hidden, kv_dim = g.hidden / g.heads * g.kv_heads;
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors = {
      {"token_embd.weight", {g.vocab, g.hidden}}};
  const int64_t blocks = g.file_layers >= 0 ? g.file_layers : g.layers;
  for (int64_t l = 0; l < blocks; ++l) {
    const std::string p = cat("blk.", l, ".");
    tensors.push_back({p + "attn_norm.weight", {g.hidden}});
    tensors.push_back({p + "attn_q.weight", {q_dim, g.hidden}});
    tensors.push_back({p + "attn_k.weight", {kv_dim, g.hidden}});
    tensors.push_back({p + "attn_v.weight", {kv_dim, g.hidden}});
    tensors.push_back({p + "attn_output.weight", {g.hidden, q_dim}});
    tensors.push_back({p + "ffn_norm.weight", {g.hidden}});
    tensors.push_back({p + "ffn_gate.weight", {g.ffn, g.hidden}});
    tensors.push_back({p + "ffn_up.weight", {g.ffn, g.hidden}});
    tensors.push_back({p + "ffn_down.weight", {g.hidden, g.ffn}});
  }
  tensors.push_back({"output_norm.weight", {g.hidden}});
  for (const auto& [name, shape] : g.extra) tensors.push_back({name, shape});
  auto type_of = [&](const std::string& name) {
    const auto it = g.types.find(name);
    return it == g.types.end() ? DType::f32 : it->second;
  };
  for (auto& [name, shape] : tensors) {
    if (auto it = g.shapes.find(name); it != g.shapes.end()) shape = it->second;
    Shape s;
    if (shape.size() == 1) s = Shape{shape[0]};
    if (shape.size() == 2) s = Shape{shape[0], shape[1]};
    w.add_tensor(name, type_of(name), s);
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-0.1f, 0.1f);
  for (const auto& [name, shape] : tensors) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    std::vector<float> values(n);
    const bool norm = shape.size() == 1;
    for (float& v : values) v = norm ? 1.0f : uniform(rng);
    if (name == g.nan_tensor) values[0] = std::numeric_limits<float>::quiet_NaN();
    if (type_of(name) == DType::f16) {
      std::vector<f16_bits> halves(n);
      for (size_t i = 0; i < n; ++i) halves[i] = f32_to_f16(values[i]);
      w.write_tensor(name, halves.data(), n * 2);
    } else {
      w.write_tensor(name, values.data(), n * 4);
    }
  }
  w.finish();
}

void load(const fs::path& path) {
  const std::unique_ptr<model::ModelSource> source = model::open_model(path);
  (void)source->tokenizer_data();
  model::LoadOptions options;
  options.context = 16;
  model::LlamaModel llama(testing::cpu_backend(), *source, options);
  const int32_t prompt[] = {1, 2, 3};
  (void)llama.prefill(prompt);
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// An mlx-lm directory: `config` as config.json and one safetensors file holding f32
// tensors of the given shapes (zeros).
void write_mlx(const fs::path& dir, const json& config,
               const std::map<std::string, std::vector<int64_t>>& tensors) {
  fs::create_directories(dir);
  write_text(dir / "config.json", config.dump());
  json header = json::object();
  size_t offset = 0;
  for (const auto& [name, shape] : tensors) {
    size_t n = 4;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';
  std::string bytes(8, '\0');
  const uint64_t length = text.size();
  std::memcpy(bytes.data(), &length, 8);
  bytes += text;
  bytes += std::string(offset, '\0');
  write_text(dir / "model.safetensors", bytes);
}

json mlx_config() {
  return {{"model_type", "llama"},         {"vocab_size", 256},
          {"hidden_size", 64},             {"intermediate_size", 128},
          {"num_hidden_layers", 2},        {"num_attention_heads", 4},
          {"num_key_value_heads", 2},      {"rms_norm_eps", 1e-5},
          {"tie_word_embeddings", true}};
}

class HostileInputTest : public testing::TempDirTest {
 protected:
  HostileInputTest() : TempDirTest("onepass_hostile_") {}

  // The error of opening an MLX directory made from `config`.
  std::string mlx_error(const json& config,
                        const std::map<std::string, std::vector<int64_t>>& tensors = {
                            {"model.norm.weight", {64}}}) {
    const fs::path dir = dir_ / cat("mlx", case_++);
    write_mlx(dir, config, tensors);
    return error_of([&] { model::open_model(dir); });
  }
  // The error of loading (and running) a GGUF made from `g`.
  std::string gguf_error(const TinyGguf& g) {
    const fs::path file = dir_ / cat("m", case_++, ".gguf");
    write_gguf(file, g);
    return error_of([&] { load(file); });
  }

  int case_ = 0;
};

TEST_F(HostileInputTest, TinyFilesLoad) {
  TinyGguf g;
  g.tokens = 256;
  EXPECT_EQ(gguf_error(g), "");
  EXPECT_EQ(mlx_error(mlx_config()), "");
}

TEST_F(HostileInputTest, MlxConfigValuesAreCheckedBeforeUse) {
  auto with = [](const char* key, json value) {
    json c = mlx_config();
    if (value.is_null()) {
      c.erase(key);
    } else {
      c[key] = value;
    }
    return c;
  };
  // Zero heads and no head_dim: was a division by zero (SIGFPE).
  json zero_heads = with("num_attention_heads", 0);
  zero_heads.erase("num_key_value_heads");
  EXPECT_NE(mlx_error(zero_heads).find("the head count is 0, expected 1..4096"), std::string::npos);
  EXPECT_NE(mlx_error(with("num_hidden_layers", 2147483647)).find("the layer count is 2147483647"),
            std::string::npos);
  EXPECT_NE(mlx_error(with("vocab_size", json(uint64_t{18446744073709551615ull}))).find("out of range"),
            std::string::npos);
  EXPECT_NE(mlx_error(with("hidden_size", -64)).find("hidden (the embedding length) is -64"),
            std::string::npos);
  EXPECT_NE(mlx_error(with("head_dim", -2)).find("head_dim must be even and in 2..256, got -2"),
            std::string::npos);
  EXPECT_NE(mlx_error(with("hidden_size", 66)).find("not a multiple of num_attention_heads"),
            std::string::npos);
  EXPECT_NE(mlx_error(with("num_key_value_heads", 3)).find("multiple of kv_heads"), std::string::npos);
  // Wrongly typed values name the key and the file.
  const std::string typed = mlx_error(with("num_key_value_heads", "two"));
  EXPECT_NE(typed.find("config.json: 'num_key_value_heads' is \"two\", expected an integer"),
            std::string::npos)
      << typed;
  EXPECT_NE(mlx_error(with("rms_norm_eps", "small")).find("'rms_norm_eps' is \"small\", expected a number"),
            std::string::npos);
  EXPECT_NE(mlx_error(with("tie_word_embeddings", 1)).find("'tie_word_embeddings' is 1, expected true or false"),
            std::string::npos);
  EXPECT_NE(mlx_error(with("model_type", 3)).find("'model_type' is 3, expected a string"),
            std::string::npos);
  EXPECT_NE(mlx_error(with("rope_theta", 1e300)).find("within the float range"), std::string::npos);
  // RoPE scaling: a linear factor of 0 (GGUF rejects it too), an inconsistent llama3 one.
  EXPECT_NE(mlx_error(with("rope_scaling", {{"type", "linear"}, {"factor", 0}}))
                .find("rope_scaling factor is 0, expected a positive number"),
            std::string::npos);
  EXPECT_NE(mlx_error(with("rope_scaling", {{"rope_type", "llama3"}, {"low_freq_factor", 4},
                                            {"high_freq_factor", 4}}))
                .find("high_freq_factor > low_freq_factor"),
            std::string::npos);
  EXPECT_NE(mlx_error(with("rope_scaling", "linear")).find("'rope_scaling' is \"linear\", expected an object"),
            std::string::npos);
}

TEST_F(HostileInputTest, MlxBlocksBeyondTheConfigAreAnError) {
  const std::string message =
      mlx_error(mlx_config(), {{"model.norm.weight", {64}}, {"model.layers.5.input_layernorm.weight", {64}}});
  EXPECT_NE(message.find("tensor 'model.layers.5.input_layernorm.weight' belongs to block 5, but "
                         "num_hidden_layers is 2"),
            std::string::npos)
      << message;
}

// An MLX directory's tensors are named as the directory names them (Hugging Face names), not
// by the GGUF names the loader looks them up by.
TEST_F(HostileInputTest, MlxTensorErrorsUseTheDirectorysNames) {
  auto load_error = [&](const std::map<std::string, std::vector<int64_t>>& tensors) {
    const fs::path dir = dir_ / cat("mlx", case_++);
    write_mlx(dir, mlx_config(), tensors);
    return error_of([&] { load(dir); });
  };
  std::string message = load_error({{"model.norm.weight", {64}}});
  EXPECT_NE(message.find("(MLX) has no tensor 'model.embed_tokens.weight'"), std::string::npos) << message;
  message = load_error({{"model.embed_tokens.weight", {256, 64}}, {"model.norm.weight", {32}}});
  EXPECT_NE(message.find("(MLX): tensor 'model.norm.weight' has shape [32], expected [64] [hidden]"),
            std::string::npos)
      << message;
}

TEST_F(HostileInputTest, GgufConfigValuesAreBoundedAndMatchTheTensors) {
  const auto start = std::chrono::steady_clock::now();
  TinyGguf huge;
  huge.u32["llama.block_count"] = 4294967295u;  // was a loop over billions of layers
  EXPECT_NE(gguf_error(huge).find("the layer count is 4294967295, expected 1..4096"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));

  TinyGguf fewer;  // block_count 2 over a 3-block file: not a silent 2-layer model
  fewer.file_layers = 3;
  EXPECT_NE(gguf_error(fewer).find("tensor 'blk.2.attn_norm.weight' belongs to block 2, but "
                                   "llama.block_count is 2"),
            std::string::npos);

  TinyGguf more;  // block_count 3 over a 2-block file
  more.u32["llama.block_count"] = 3;
  EXPECT_NE(gguf_error(more).find("has no tensor 'blk.2.attn_norm.weight'"), std::string::npos);

  TinyGguf heads;
  heads.u32["llama.attention.head_count"] = 0;
  EXPECT_NE(gguf_error(heads).find("the head count is 0"), std::string::npos);

  TinyGguf vocab;
  vocab.u32["llama.vocab_size"] = 1u << 30;
  EXPECT_NE(gguf_error(vocab).find("the vocabulary size is 1073741824, expected 1..16777216"),
            std::string::npos);
}

TEST_F(HostileInputTest, GgufTensorShapesAreCheckedAgainstTheConfig) {
  // Q and K rows shifted so that Q + K + V still add up: each named with both shapes.
  TinyGguf qk;
  qk.shapes["blk.1.attn_q.weight"] = {48, 64};
  qk.shapes["blk.1.attn_k.weight"] = {48, 64};
  std::string message = gguf_error(qk);
  EXPECT_NE(message.find("tensor 'blk.1.attn_q.weight' has shape [48, 64], expected [64, 64]"),
            std::string::npos)
      << message;
  TinyGguf gate_up;
  gate_up.shapes["blk.0.ffn_gate.weight"] = {96, 64};
  gate_up.shapes["blk.0.ffn_up.weight"] = {160, 64};
  message = gguf_error(gate_up);
  EXPECT_NE(message.find("tensor 'blk.0.ffn_gate.weight' has shape [96, 64], expected [128, 64] [ffn, hidden]"),
            std::string::npos)
      << message;
  TinyGguf norm;
  norm.shapes["blk.0.ffn_norm.weight"] = {32};
  EXPECT_NE(gguf_error(norm).find("'blk.0.ffn_norm.weight' has shape [32], expected [64]"),
            std::string::npos);
  TinyGguf down;
  down.shapes["blk.1.ffn_down.weight"] = {64, 64};
  EXPECT_NE(gguf_error(down).find("'blk.1.ffn_down.weight' has shape [64, 64], expected [64, 128]"),
            std::string::npos);
  TinyGguf embd;
  embd.u32["llama.vocab_size"] = 300;
  EXPECT_NE(gguf_error(embd).find("'token_embd.weight' has shape [256, 64], expected [300, 64]"),
            std::string::npos);
}

// Weights that pass the shape checks but not the loader's (a type the layer cannot take,
// a factor table of the wrong length): the error names the file, the tensor and what was
// expected, never only the loader's own name.
TEST_F(HostileInputTest, WeightErrorsNameTheFileAndTheTensor) {
  TinyGguf norm;
  norm.types["blk.1.attn_norm.weight"] = DType::f16;
  std::string message = gguf_error(norm);
  EXPECT_NE(message.find("[model] " + (dir_ / "m0.gguf").string() +
                         ": tensor 'blk.1.attn_norm.weight' is f16[64], expected f32 with 64 values"),
            std::string::npos)
      << message;
  TinyGguf factors;
  factors.extra["rope_freqs.weight"] = {5};
  message = gguf_error(factors);
  EXPECT_NE(message.find("[model] " + (dir_ / "m1.gguf").string() +
                         ": tensor 'rope_freqs.weight' has 5 values, expected rope_dims / 2 = 8"),
            std::string::npos)
      << message;
}

TEST_F(HostileInputTest, GgufRopeFactorMustBeFinite) {
  TinyGguf g;
  g.strings["llama.rope.scaling.type"] = "linear";
  g.f32["llama.rope.scaling.factor"] = std::numeric_limits<float>::infinity();
  EXPECT_NE(gguf_error(g).find("llama.rope.scaling.factor is inf, expected a positive finite number"),
            std::string::npos);
  g.f32["llama.rope.scaling.factor"] = 0.0f;
  EXPECT_NE(gguf_error(g).find("llama.rope.scaling.factor is 0"), std::string::npos);
}

TEST_F(HostileInputTest, VocabularyMustMatchTheEmbeddingRows) {
  TinyGguf small;
  small.tokens = 100;
  EXPECT_NE(gguf_error(small).find("has 100 tokens, but the model has 256 embedding rows"),
            std::string::npos);
  TinyGguf large;
  large.tokens = 300;
  EXPECT_NE(gguf_error(large).find("has 300 tokens, but the model has 256 embedding rows"),
            std::string::npos);
}

// A vocabulary without the byte symbols cannot spell text: encoding says which byte has no
// token instead of dropping it (for a vocabulary of no byte symbols at all, every byte went
// and `generate` reported an empty prompt).
TEST_F(HostileInputTest, TextTheVocabularyCannotSpellIsAnError) {
  model::TokenizerData data;
  data.model = "gpt2";
  for (int i = 0; i < 16; ++i) data.tokens.push_back(cat("t", i));
  const model::Tokenizer tokenizer(data);
  EXPECT_ERROR(tokenizer.encode("Hi"), "byte 0x48 of the text has no token in the vocabulary");
  data.tokens.push_back("H");  // 'H' is its own byte symbol; 'i' still has none
  EXPECT_ERROR(model::Tokenizer(data).encode("Hi"), "byte 0x69 of the text has no token");
  data.tokens.push_back("i");
  EXPECT_EQ(model::Tokenizer(data).encode("Hi").size(), 2u);

  // From a file, the error names it (vocabulary errors at construction too).
  TinyGguf g;
  g.tokens = 256;  // "t0".."t255": no byte symbols
  const fs::path file = dir_ / "no_bytes.gguf";
  write_gguf(file, g);
  const model::TokenizerData vocab = *model::open_model(file)->tokenizer_data();
  EXPECT_ERROR(model::Tokenizer(vocab).encode("Hi"), file.string() + ": byte 0x48");
  model::TokenizerData bad_bos = vocab;
  bad_bos.bos_id = 9999;
  EXPECT_ERROR(model::Tokenizer checked(bad_bos), file.string() + ": BOS id 9999");
}

// A bad quantisation entry names the directory and the weight, not only the value.
TEST_F(HostileInputTest, MlxQuantizationErrorsNameTheWeight) {
  json config = mlx_config();
  config["quantization"] = {{"group_size", 32}, {"bits", 3}};
  const std::string error = mlx_error(config, {{"model.embed_tokens.weight", {256, 12}},
                                               {"model.embed_tokens.scales", {256, 2}},
                                               {"model.embed_tokens.biases", {256, 2}}});
  EXPECT_NE(error.find("quantised weight 'model.embed_tokens': MLX affine bits must be 4 or 8, got 3"),
            std::string::npos) << error;
  EXPECT_NE(error.find("[mlx] " + (dir_ / "mlx").string()), std::string::npos) << error;
}

TEST_F(HostileInputTest, NanWeightsAreReportedNotDecodedAsTokenZero) {
  for (const char* tensor : {"blk.0.attn_q.weight", "blk.1.ffn_down.weight", "output_norm.weight"}) {
    SCOPED_TRACE(tensor);
    TinyGguf g;
    g.nan_tensor = tensor;
    const std::string message = gguf_error(g);
    EXPECT_NE(message.find("the logits after position 2 hold NaN"), std::string::npos) << message;
    EXPECT_NE(message.find("the weights likely contain NaN or Inf values"), std::string::npos);
  }
}

// Opening a FIFO for reading blocks until a writer comes: the check runs before open. If it
// ever does not, the writer end opened here releases the reader and the test fails.
TEST_F(HostileInputTest, SpecialFilesAreRefusedBeforeOpening) {
  const fs::path fifo = path("model.gguf");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto attempt = std::async(std::launch::async, [&] { return error_of([&] { model::open_model(fifo); }); });
  if (attempt.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
    ADD_FAILURE() << "opening a FIFO blocked";
  }
  EXPECT_NE(attempt.get().find("is a FIFO, expected a regular file"), std::string::npos);
  EXPECT_ERROR(model::MappedFile{"/dev/null"},
               "'/dev/null' is a character device, expected a regular file");

  // A FIFO as an MLX directory's config.json.
  const fs::path dir = path("mlx");
  write_mlx(dir, mlx_config(), {{"model.norm.weight", {64}}});
  fs::remove(dir / "config.json");
  ASSERT_EQ(::mkfifo((dir / "config.json").c_str(), 0600), 0);
  auto config = std::async(std::launch::async, [&] { return error_of([&] { model::open_model(dir); }); });
  if (config.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    const int fd = ::open((dir / "config.json").c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
    ADD_FAILURE() << "opening a FIFO config.json blocked";
  }
  EXPECT_NE(config.get().find("config.json' is a FIFO"), std::string::npos);
}

TEST_F(HostileInputTest, WriterReplacesOnlyRegularFiles) {
  auto write = [](const fs::path& out) {
    model::GgufWriter w(out);
    w.set_u32("x", 1);
    w.finish();
  };
  // A regular file is replaced; nothing is left beside it.
  write_text(path("old.gguf"), "old");
  write(path("old.gguf"));
  EXPECT_GT(fs::file_size(path("old.gguf")), 3u);
  EXPECT_FALSE(fs::exists(path("old.gguf.partial")));

  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  EXPECT_ERROR(write(path("fifo")), "output '" + path("fifo").string() + "' exists and is a FIFO");
  EXPECT_TRUE(fs::is_fifo(path("fifo")));
  fs::create_directory(path("dir"));
  EXPECT_ERROR(write(path("dir")), "exists and is a directory");
  EXPECT_TRUE(fs::is_directory(path("dir")));
  // A symbolic link is refused, even to a regular file: the link and its target stay.
  write_text(path("target"), "keep");
  fs::create_symlink(path("target"), path("link"));
  EXPECT_ERROR(write(path("link")), "exists and is a symbolic link");
  EXPECT_TRUE(fs::is_symlink(path("link")));
  EXPECT_EQ(fs::file_size(path("target")), 4u);
  // A FIFO where the temporary file goes is refused too (never opened).
  ASSERT_EQ(::mkfifo(path("t.gguf.partial").c_str(), 0600), 0);
  EXPECT_ERROR(write(path("t.gguf")), "temporary file '" + path("t.gguf.partial").string() + "' exists and is a FIFO");
  EXPECT_FALSE(fs::exists(path("t.gguf")));
  // A device node is refused (as root, it used to be replaced).
  EXPECT_ERROR(write("/dev/null"), "'/dev/null' exists and is a character device");
}

}  // namespace
}  // namespace onepass
