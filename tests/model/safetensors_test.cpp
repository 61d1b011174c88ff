// Safetensors files and mlx-lm model directories, written here in C++ and read back, plus
// corrupt headers and inconsistent directories.
#include <unistd.h>
#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "onepass/core/error.h"
#include "onepass/core/half.h"
#include "onepass/model/mlx_model.h"
#include "onepass/model/safetensors.h"
#include "support/testing.h"

namespace onepass {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct StTensor {
  std::string name;
  std::string dtype;  // safetensors spelling: "F32", "BF16", ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

size_t st_elem_bytes(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16") return 2;
  return 1;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

StTensor make_tensor(std::string name, std::string dtype, std::vector<int64_t> shape,
                     uint32_t seed = 1) {
  size_t n = st_elem_bytes(dtype);
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  StTensor t{std::move(name), std::move(dtype), std::move(shape), random_bytes(n, seed)};
  return t;
}

// A safetensors file from an explicit header text and data bytes.
std::vector<uint8_t> safetensors_raw(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out(8 + header.size() + data.size());
  const uint64_t length = header.size();
  std::memcpy(out.data(), &length, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

// A well-formed safetensors file: tensors laid out in order, header padded with spaces to
// a multiple of 8 bytes as the reference writer does.
std::vector<uint8_t> safetensors_bytes(const std::vector<StTensor>& tensors,
                                       const std::map<std::string, std::string>& metadata = {}) {
  json header = json::object();
  std::vector<uint8_t> data;
  for (const StTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.data.size()}}};
    data.insert(data.end(), t.data.begin(), t.data.end());
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text += ' ';
  return safetensors_raw(text, data);
}

void write_file(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string error_of(const std::vector<uint8_t>& bytes, size_t size) {
  try {
    model::SafetensorsFile::from_memory(bytes.data(), size, "t.safetensors");
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}
std::string error_of(const std::vector<uint8_t>& bytes) {
  return error_of(bytes, bytes.size());
}

class SafetensorsTest : public testing::TempDirTest {
 protected:
  SafetensorsTest() : TempDirTest("onepass_st_") {}
};

TEST_F(SafetensorsTest, RoundTrip) {
  const std::vector<StTensor> tensors = {
      make_tensor("a.f32", "F32", {3, 4}, 1), make_tensor("b.f16", "F16", {2, 3, 5}, 2),
      make_tensor("c.bf16", "BF16", {7}, 3),  make_tensor("d.i32", "I32", {1, 2, 3, 4}, 4),
      make_tensor("e.u32", "U32", {4, 2}, 5), make_tensor("f.u8", "U8", {9}, 6),
      make_tensor("g.scalar", "F32", {}, 7),  make_tensor("h.empty", "F16", {0, 4}, 8),
  };
  const std::vector<uint8_t> bytes = safetensors_bytes(tensors, {{"format", "mlx"}});
  write_file(dir_ / "m.safetensors", bytes);
  const model::SafetensorsFile f = model::SafetensorsFile::open(dir_ / "m.safetensors");
  EXPECT_EQ(f.metadata().at("format"), "mlx");
  ASSERT_EQ(f.tensors().size(), tensors.size());
  EXPECT_EQ(f.data_offset() % 8, 0u);
  const std::map<std::string, DType> dtypes = {{"F32", DType::f32},   {"F16", DType::f16},
                                               {"BF16", DType::bf16}, {"I32", DType::i32},
                                               {"U32", DType::u32},   {"U8", DType::u8}};
  for (const StTensor& want : tensors) {
    SCOPED_TRACE(want.name);
    const model::TensorInfo& got = f.tensor(want.name);
    EXPECT_EQ(got.dtype, dtypes.at(want.dtype));
    ASSERT_EQ(got.shape.ndim(), static_cast<int>(want.shape.size()));
    for (int d = 0; d < got.shape.ndim(); ++d)
      EXPECT_EQ(got.shape[d], want.shape[static_cast<size_t>(d)]);
    EXPECT_EQ(got.bytes, want.data.size());
    EXPECT_GE(got.offset, f.data_offset());
    // An empty tensor may have no data pointer (memcmp with null is undefined even for 0 bytes).
    if (!want.data.empty()) {
      EXPECT_EQ(std::memcmp(got.data, want.data.data(), want.data.size()), 0);
    }
  }
  // from_memory: data points into the caller's bytes at the same offsets.
  const model::SafetensorsFile m = model::SafetensorsFile::from_memory(bytes.data(), bytes.size());
  for (const model::TensorInfo& t : m.tensors()) {
    EXPECT_EQ(static_cast<const uint8_t*>(t.data), bytes.data() + t.offset);
  }
  EXPECT_EQ(m.tensor("g.scalar").shape.ndim(), 0);
  EXPECT_EQ(m.tensor("h.empty").bytes, 0u);
  EXPECT_EQ(m.find("nope"), nullptr);
  EXPECT_THROW(m.tensor("nope"), Error);
  EXPECT_EQ(model::dtype_from_safetensors("F64"), std::nullopt);
  EXPECT_EQ(model::safetensors_dtype_name(DType::bf16), "BF16");
  EXPECT_THROW(model::safetensors_dtype_name(DType::q4_0), Error);
}

TEST_F(SafetensorsTest, EveryTruncationIsAnError) {
  const std::vector<uint8_t> bytes =
      safetensors_bytes({make_tensor("a", "F32", {2, 2}), make_tensor("b", "BF16", {3})});
  EXPECT_EQ(error_of(bytes), "");
  for (size_t size = 0; size < bytes.size(); ++size) {
    const std::string message = error_of(bytes, size);
    EXPECT_EQ(message.rfind("[safetensors] t.safetensors: ", 0), 0u) << size << ": " << message;
  }
}

TEST_F(SafetensorsTest, CorruptHeaders) {
  const std::vector<uint8_t> data(64, 0);
  auto with_header = [&](const std::string& header) { return safetensors_raw(header, data); };
  auto one = [&](const std::string& tensor) { return with_header("{\"w\":" + tensor + "}"); };
  struct Case {
    std::string what;
    std::vector<uint8_t> bytes;
    std::string fragment;
  };
  std::vector<uint8_t> huge_length(16, 0);
  huge_length[7] = 0x80;  // header length 2^63
  std::vector<uint8_t> long_header(8, 0);
  const uint64_t too_long = model::kSafetensorsMaxHeaderBytes + 1;
  std::memcpy(long_header.data(), &too_long, 8);
  long_header.resize(8 + too_long, ' ');
  const std::vector<Case> cases = {
      {"short", {1, 2, 3}, "too short for the 8-byte header length"},
      {"huge length", huge_length,
       "header length 9223372036854775808 at offset 0 exceeds the file"},
      {"over limit", long_header, "exceeds the limit of 104857600 bytes"},
      {"not json", with_header("{\"w\": {"), "does not parse"},
      {"not utf-8", with_header("{\"\xff\": 1}"), "does not parse"},
      {"array", with_header("[1, 2]"), "is a array, expected an object of tensors"},
      {"entry not object", one("3"), "tensor 'w' is a number"},
      {"no dtype", one(R"({"shape": [1], "data_offsets": [0, 4]})"), "has no dtype"},
      {"no shape", one(R"({"dtype": "F32", "data_offsets": [0, 4]})"), "has no shape"},
      {"no offsets", one(R"({"dtype": "F32", "shape": [1]})"), "has no data_offsets"},
      {"bad offsets", one(R"({"dtype": "F32", "shape": [1], "data_offsets": [0]})"),
       "has no data_offsets"},
      {"unknown dtype", one(R"({"dtype": "F64", "shape": [1], "data_offsets": [0, 8]})"),
       "dtype 'F64' is not supported; supported: F32, F16, BF16, I32, U32, U8"},
      {"negative dim", one(R"({"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]})"),
       "must hold non-negative integers"},
      {"float dim", one(R"({"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]})"),
       "must hold non-negative integers"},
      {"five dims", one(R"({"dtype": "U8", "shape": [1,1,1,1,1], "data_offsets": [0, 1]})"),
       "has more than 4 dimensions"},
      {"overflowing dims",
       one(R"({"dtype": "U8", "shape": [4294967296, 4294967296], "data_offsets": [0, 1]})"),
       "has more than 2^63 elements"},
      {"bytes overflow",
       one(R"({"dtype": "F32", "shape": [2305843009213693952, 2], "data_offsets": [0, 1]})"),
       "overflows"},
      {"span mismatch", one(R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 4]})"),
       "is 8 bytes but data_offsets [0,4] span 4"},
      {"begin after end", one(R"({"dtype": "F32", "shape": [1], "data_offsets": [8, 4]})"),
       "begin <= end"},
      {"past the end", one(R"({"dtype": "F32", "shape": [16], "data_offsets": [8, 72]})"),
       "run past the end of the file (64 data bytes"},
      {"huge offsets",
       one(R"({"dtype": "U8", "shape": [1], "data_offsets": [18446744073709551615, 18446744073709551615]})"),
       "run past the end"},
      {"overlap", with_header(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                       "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})"),
       "tensor 'b' (file bytes"},
      {"duplicate", with_header(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                       "a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})"),
       "names 'a' twice"},
      {"deep", with_header("{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}"),
       "nests deeper than 8 levels"},
      {"bad metadata", with_header(R"({"__metadata__": 5})"), "__metadata__ is a number"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string message = error_of(c.bytes);
    EXPECT_NE(message.find(c.fragment), std::string::npos) << message;
    EXPECT_EQ(message.rfind("[safetensors] t.safetensors: ", 0), 0u) << message;
  }
  // Empty tensors may share an offset with anything.
  EXPECT_EQ(error_of(with_header(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                                     "b": {"dtype": "F32", "shape": [0], "data_offsets": [8, 8]}})")),
            "");
}

// --- mlx-lm model directories -----------------------------------------------------------

// A quantised linear layer of `out` x `in` weights: packed u32 values, low bits first, and
// per-group scales and biases.
std::vector<StTensor> quantized_layer(const std::string& module, int64_t out, int64_t in,
                                      uint32_t bits, uint32_t group, const std::string& scale_dtype,
                                      uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t per_word = 32 / bits;
  std::vector<uint32_t> words(static_cast<size_t>(out * in / per_word), 0);
  for (int64_t i = 0; i < out * in; ++i) {
    const uint32_t q = rng() & ((1u << bits) - 1);
    words[static_cast<size_t>(i / per_word)] |= q << (bits * static_cast<uint32_t>(i % per_word));
  }
  StTensor weight{module + ".weight", "U32", {out, in / per_word}, {}};
  weight.data.resize(words.size() * 4);
  std::memcpy(weight.data.data(), words.data(), weight.data.size());
  std::vector<uint8_t> scale_bytes(static_cast<size_t>(out * in / group) * 2);
  std::vector<uint8_t> bias_bytes(scale_bytes.size());
  for (size_t i = 0; i < scale_bytes.size() / 2; ++i) {
    const float scale = 0.01f * static_cast<float>(1 + rng() % 10);
    const float bias = -0.05f * static_cast<float>(rng() % 5);
    const uint16_t s = scale_dtype == "F16"
                           ? f32_to_f16(scale)
                           : static_cast<uint16_t>(std::bit_cast<uint32_t>(scale) >> 16);
    const uint16_t b = scale_dtype == "F16"
                           ? f32_to_f16(bias)
                           : static_cast<uint16_t>(std::bit_cast<uint32_t>(bias) >> 16);
    std::memcpy(&scale_bytes[2 * i], &s, 2);
    std::memcpy(&bias_bytes[2 * i], &b, 2);
  }
  return {weight,
          {module + ".scales", scale_dtype, {out, in / group}, scale_bytes},
          {module + ".biases", scale_dtype, {out, in / group}, bias_bytes}};
}

void append(std::vector<StTensor>& to, const std::vector<StTensor>& more) {
  to.insert(to.end(), more.begin(), more.end());
}

// Writes a sharded mlx-lm directory: 4-bit groups of 64 model-wide, lm_head 8-bit groups of
// 32 through a per-layer override, norm weights unquantised.
std::vector<StTensor> write_sharded_model(const fs::path& dir) {
  std::vector<StTensor> shard1, shard2;
  append(shard1, quantized_layer("model.embed_tokens", 32, 128, 4, 64, "F16", 1));
  append(shard1, quantized_layer("model.layers.0.self_attn.q_proj", 128, 128, 4, 64, "F16", 2));
  shard1.push_back(make_tensor("model.layers.0.input_layernorm.weight", "F16", {128}, 3));
  append(shard2, quantized_layer("model.layers.0.mlp.down_proj", 128, 256, 4, 64, "F16", 4));
  append(shard2, quantized_layer("lm_head", 32, 128, 8, 32, "F16", 5));
  shard2.push_back(make_tensor("model.norm.weight", "F16", {128}, 6));
  write_file(dir / "model-00001-of-00002.safetensors", safetensors_bytes(shard1));
  write_file(dir / "model-00002-of-00002.safetensors", safetensors_bytes(shard2));
  json index = {{"metadata", {{"total_size", 12345}}}, {"weight_map", json::object()}};
  for (const StTensor& t : shard1) index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  for (const StTensor& t : shard2) index["weight_map"][t.name] = "model-00002-of-00002.safetensors";
  write_text(dir / "model.safetensors.index.json", index.dump(2));
  const json config = {
      {"model_type", "llama"},
      {"hidden_size", 128},
      {"num_hidden_layers", 1},
      {"quantization",
       {{"group_size", 64}, {"bits", 4}, {"lm_head", {{"group_size", 32}, {"bits", 8}}}}}};
  write_text(dir / "config.json", config.dump(2));
  std::vector<StTensor> all = shard1;
  append(all, shard2);
  return all;
}

TEST_F(SafetensorsTest, MlxShardedQuantizedModel) {
  const std::vector<StTensor> written = write_sharded_model(dir_);
  const model::MlxModel model = model::MlxModel::open(dir_);
  EXPECT_EQ(json::parse(model.config_text()).at("model_type"), "llama");
  ASSERT_TRUE(model.quantization().has_value());
  EXPECT_EQ(model.quantization()->bits, 4u);
  EXPECT_EQ(model.quantization()->group_size, 64u);
  EXPECT_EQ(model.quantization()->scale_type, DType::f16);
  ASSERT_EQ(model.tensors().size(), written.size());
  for (const StTensor& t : written) {
    SCOPED_TRACE(t.name);
    const model::TensorInfo& got = model.tensor(t.name);
    EXPECT_EQ(got.bytes, t.data.size());
    if (!t.data.empty()) {
      EXPECT_EQ(std::memcmp(got.data, t.data.data(), t.data.size()), 0);
    }
  }
  EXPECT_TRUE(std::is_sorted(
      model.tensors().begin(), model.tensors().end(),
      [](const model::TensorInfo& a, const model::TensorInfo& b) { return a.name < b.name; }));

  EXPECT_TRUE(model.is_quantized("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_TRUE(model.is_quantized("model.layers.0.self_attn.q_proj"));
  EXPECT_FALSE(model.is_quantized("model.norm.weight"));
  EXPECT_FALSE(model.is_quantized("nothing.weight"));
  EXPECT_EQ(model.quantization_of("model.norm.weight"), std::nullopt);

  const model::MlxQuantizedWeight& q = model.quantized("model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(q.format.bits, 4u);
  EXPECT_EQ(q.format.group_size, 64u);
  EXPECT_EQ(q.shape, (Shape{128, 256}));
  EXPECT_EQ(q.weight->shape, (Shape{128, 32}));
  EXPECT_EQ(q.scales->shape, (Shape{128, 4}));
  EXPECT_EQ(q.biases->name, "model.layers.0.mlp.down_proj.biases");

  const std::optional<AffineFormat> head = model.quantization_of("lm_head.weight");
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->bits, 8u);
  EXPECT_EQ(head->group_size, 32u);
  EXPECT_EQ(model.quantized("lm_head").shape, (Shape{32, 128}));
  EXPECT_EQ(model.quantized("model.embed_tokens").shape, (Shape{32, 128}));

  // The packed values read back low bits first: element 1 of row 0 is bits 4..7 of word 0.
  const auto* words = static_cast<const uint32_t*>(q.weight->data);
  const std::vector<StTensor> layer =
      quantized_layer("model.layers.0.mlp.down_proj", 128, 256, 4, 64, "F16", 4);
  uint32_t first_word;
  std::memcpy(&first_word, layer[0].data.data(), 4);
  EXPECT_EQ((words[0] >> 4) & 15u, (first_word >> 4) & 15u);

  try {
    model.quantized("model.norm.weight");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a quantised weight"), std::string::npos);
  }
  EXPECT_THROW(model.tensor("missing"), Error);
}

TEST_F(SafetensorsTest, MlxSingleFileModels) {
  // Quantised with bf16 scales.
  std::vector<StTensor> tensors =
      quantized_layer("model.layers.0.mlp.up_proj", 64, 128, 8, 128, "BF16", 9);
  tensors.push_back(make_tensor("model.norm.weight", "BF16", {128}));
  write_file(dir_ / "model.safetensors", safetensors_bytes(tensors));
  write_text(dir_ / "config.json", R"({"quantization": {"group_size": 128, "bits": 8}})");
  const model::MlxModel quantized = model::MlxModel::open(dir_);
  EXPECT_EQ(quantized.quantization()->scale_type, DType::bf16);
  EXPECT_EQ(quantized.quantized("model.layers.0.mlp.up_proj.weight").shape, (Shape{64, 128}));
  EXPECT_EQ(quantized.quantization_of("model.layers.0.mlp.up_proj")->scale_type, DType::bf16);

  // Unquantised, and found without index or the usual name.
  const fs::path plain = dir_ / "plain";
  fs::create_directories(plain);
  write_file(plain / "weights.safetensors", safetensors_bytes({make_tensor("w", "F32", {4, 4})}));
  write_text(plain / "config.json", R"({"model_type": "llama"})");
  const model::MlxModel model = model::MlxModel::open(plain);
  EXPECT_FALSE(model.quantization().has_value());
  EXPECT_FALSE(model.is_quantized("w"));
  EXPECT_EQ(model.tensor("w").shape, (Shape{4, 4}));
}

TEST_F(SafetensorsTest, MlxDirectoryErrors) {
  auto error_of_dir = [](const fs::path& dir) {
    try {
      model::MlxModel::open(dir);
      return std::string();
    } catch (const Error& e) {
      return std::string(e.what());
    }
  };
  int case_number = 0;
  // Each case starts from a valid sharded model and breaks one thing.
  auto broken = [&](const std::function<void(const fs::path&)>& breaker) {
    const fs::path dir = dir_ / cat("case", case_number++);
    fs::create_directories(dir);
    write_sharded_model(dir);
    breaker(dir);
    return error_of_dir(dir);
  };
  EXPECT_NE(error_of_dir(dir_ / "absent").find("is not a directory"), std::string::npos);
  EXPECT_NE(
      broken([](const fs::path& d) { fs::remove(d / "config.json"); }).find("has no config.json"),
      std::string::npos);
  EXPECT_NE(broken([](const fs::path& d) {
              write_text(d / "config.json", "{oops");
            }).find("config.json is not valid JSON"),
            std::string::npos);
  EXPECT_NE(broken([](const fs::path& d) {
              fs::remove(d / "model-00002-of-00002.safetensors");
            }).find("names shard 'model-00002-of-00002.safetensors', which does not exist"),
            std::string::npos);
  EXPECT_NE(broken([](const fs::path& d) {
              json index = {{"weight_map", {{"x", "../evil.safetensors"}}}};
              write_text(d / "model.safetensors.index.json", index.dump());
            }).find("is not a file name in the model directory"),
            std::string::npos);
  EXPECT_NE(broken([](const fs::path& d) {
              json index = {{"weight_map",
                             {{"model.norm.weight", "model-00001-of-00002.safetensors"},
                              {"model.embed_tokens.weight", "model-00002-of-00002.safetensors"}}}};
              write_text(d / "model.safetensors.index.json", index.dump());
            })
                .find("puts tensor 'model.embed_tokens.weight' in "
                      "model-00002-of-00002.safetensors, but it is in"),
            std::string::npos);
  EXPECT_NE(broken([](const fs::path& d) {
              json index = {{"weight_map", {{"ghost", "model-00001-of-00002.safetensors"}}}};
              write_text(d / "model.safetensors.index.json", index.dump());
            }).find("no shard has it"),
            std::string::npos);
  EXPECT_NE(broken([](const fs::path& d) {
              write_file(d / "model-00002-of-00002.safetensors",
                         safetensors_bytes({make_tensor("model.norm.weight", "F16", {128})}));
              write_file(d / "model-00001-of-00002.safetensors",
                         safetensors_bytes({make_tensor("model.norm.weight", "F16", {128})}));
            }).find("is in both"),
            std::string::npos);
  EXPECT_NE(broken([](const fs::path& d) {
              write_text(d / "config.json", "{}");
            }).find("has scales but config.json has no quantization"),
            std::string::npos);
  EXPECT_NE(broken([](const fs::path& d) {
              write_text(d / "config.json",
                         R"({"quantization": {"group_size": 64, "bits": 4, "lm_head": false}})");
            }).find("'lm_head' has scales but config.json marks it unquantised"),
            std::string::npos);
  EXPECT_NE(broken([](const fs::path& d) {
              write_text(d / "config.json", R"({"quantization": {"group_size": 64, "bits": 3}})");
            }).find("bits must be 4 or 8, got 3"),
            std::string::npos);
  EXPECT_NE(broken([](const fs::path& d) {
              // Model-wide 8 bits does not match the 4-bit packed shapes.
              write_text(d / "config.json", R"({"quantization": {"group_size": 64, "bits": 8}})");
            }).find("does not match .scales"),
            std::string::npos);
  // A shard where one layer has scales but no biases, and one whose weight is not u32.
  const fs::path single = dir_ / "single";
  fs::create_directories(single);
  write_text(single / "config.json", R"({"quantization": {"group_size": 64, "bits": 4}})");
  std::vector<StTensor> layer = quantized_layer("l", 8, 64, 4, 64, "F16", 1);
  write_file(single / "model.safetensors", safetensors_bytes({layer[0], layer[1]}));
  EXPECT_NE(error_of_dir(single).find("'l' has scales but no .biases"), std::string::npos)
      << error_of_dir(single);
  layer[0].dtype = "I32";
  write_file(single / "model.safetensors", safetensors_bytes(layer));
  EXPECT_NE(error_of_dir(single).find(".weight is i32, expected u32"), std::string::npos)
      << error_of_dir(single);
  layer = quantized_layer("l", 8, 64, 4, 64, "F16", 1);
  layer[2].dtype = "BF16";
  write_file(single / "model.safetensors", safetensors_bytes(layer));
  EXPECT_NE(error_of_dir(single).find(".biases bf16[8, 1] differ from .scales f16[8, 1]"),
            std::string::npos)
      << error_of_dir(single);
  // A corrupt shard reports the shard.
  write_file(single / "model.safetensors", {1, 2, 3});
  EXPECT_NE(error_of_dir(single).find("[safetensors] "), std::string::npos);
  // Empty directory.
  const fs::path empty = dir_ / "empty";
  fs::create_directories(empty);
  write_text(empty / "config.json", "{}");
  EXPECT_NE(error_of_dir(empty).find("no other .safetensors file"), std::string::npos);
}

}  // namespace
}  // namespace onepass
