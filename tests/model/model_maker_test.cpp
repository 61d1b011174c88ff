// make-model's library side: llama.cpp's tensor-type choices, exact file sizes of the
// reference shapes (planned, not written), and small written models that load, tokenize
// and decode, that do not depend on the thread count, and that gguf-py reads.
#include "onepass/model/model_maker.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "onepass/core/error.h"
#include "onepass/model/gguf.h"
#include "onepass/model/llama.h"
#include "onepass/model/loader.h"
#include "onepass/model/sampler.h"
#include "onepass/ops/quant.h"
#include "support/testing.h"

namespace onepass::model {
namespace {

namespace fs = std::filesystem;

class ModelMakerTest : public testing::TempDirTest {
 protected:
  ModelMakerTest() : TempDirTest("onepass_maker_") {}
};

// Rows of 256 values, so the k-quants are used as such (not their fallbacks).
ModelShape small_shape() {
  ModelShape s;
  s.name = "small";
  s.hidden = 256;
  s.ffn = 512;
  s.layers = 2;
  s.heads = 4;
  s.kv_heads = 2;
  s.vocab = 512;
  s.tied = false;
  s.context = 256;
  return s;
}

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string fnv1a(const void* data, size_t bytes) {
  uint64_t h = 0xCBF29CE484222325ull;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(h));
  return text;
}

TEST(ModelMakerRules, TensorTypesFollowLlamaCpp) {
  // The output matrix of a 4-6 bit file is q6_k, or q8_0 when rows are not 256-multiples.
  EXPECT_EQ(llama_tensor_type(DType::q4_1, true, 576), DType::q8_0);
  EXPECT_EQ(llama_tensor_type(DType::q4_1, false, 576), DType::q4_1);
  EXPECT_EQ(llama_tensor_type(DType::q4_0, true, 2048), DType::q6_k);
  EXPECT_EQ(llama_tensor_type(DType::q4_k, true, 4096), DType::q6_k);
  EXPECT_EQ(llama_tensor_type(DType::q6_k, true, 4096), DType::q6_k);
  // 8 and 16 bit files keep every matrix in their type.
  EXPECT_EQ(llama_tensor_type(DType::q8_0, true, 2048), DType::q8_0);
  EXPECT_EQ(llama_tensor_type(DType::f16, true, 2048), DType::f16);
  // k-quant fallbacks for rows that are not 256-multiples, f16 for partial blocks.
  EXPECT_EQ(llama_tensor_type(DType::q4_k, false, 576), DType::q5_0);
  EXPECT_EQ(llama_tensor_type(DType::q5_k, false, 576), DType::q5_1);
  EXPECT_EQ(llama_tensor_type(DType::q2_k, false, 640), DType::iq4_nl);
  EXPECT_EQ(llama_tensor_type(DType::iq4_xs, false, 640), DType::iq4_nl);
  EXPECT_EQ(llama_tensor_type(DType::q5_0, true, 640), DType::q8_0);
  EXPECT_EQ(llama_tensor_type(DType::q3_k, true, 2048), DType::q6_k);
  EXPECT_EQ(llama_tensor_type(DType::q4_k, false, 2048), DType::q4_k);
  EXPECT_EQ(llama_tensor_type(DType::q6_k, false, 576), DType::q8_0);
  EXPECT_EQ(llama_tensor_type(DType::q4_0, false, 48), DType::f16);
  EXPECT_THROW(llama_tensor_type(DType::i32, false, 64), Error);

  EXPECT_EQ(llama_file_type(DType::f16), 1u);
  EXPECT_EQ(llama_file_type(DType::q4_0), 2u);
  EXPECT_EQ(llama_file_type(DType::q4_1), 3u);
  EXPECT_EQ(llama_file_type(DType::q8_0), 7u);
  EXPECT_EQ(llama_file_type(DType::q4_k), 15u);
  EXPECT_EQ(llama_file_type(DType::q6_k), 18u);
  EXPECT_EQ(llama_file_type(DType::q5_0), 8u);
  EXPECT_EQ(llama_file_type(DType::q5_1), 9u);
  EXPECT_EQ(llama_file_type(DType::q2_k), 10u);
  EXPECT_EQ(llama_file_type(DType::q3_k), 11u);
  EXPECT_EQ(llama_file_type(DType::iq4_nl), 25u);
  EXPECT_EQ(llama_file_type(DType::iq4_xs), 30u);
}

TEST(ModelMakerRules, PlansOfTheReferenceShapes) {
  const ModelShape smollm = *find_model_shape("smollm2-135m");
  const ModelPlan s = plan_model(smollm, DType::q4_1);
  EXPECT_EQ(s.tensors.size(), 2u + 9u * 30u);
  EXPECT_EQ(s.find("token_embd.weight")->dtype, DType::q8_0);  // tied output, 576 % 256 != 0
  EXPECT_EQ(s.find("output.weight"), nullptr);
  EXPECT_EQ(s.find("blk.7.ffn_down.weight")->dtype, DType::q4_1);
  EXPECT_EQ(s.find("blk.7.ffn_down.weight")->shape, (Shape{576, 1536}));
  EXPECT_EQ(s.find("blk.7.attn_k.weight")->shape, (Shape{192, 576}));
  EXPECT_EQ(s.find("blk.7.attn_norm.weight")->dtype, DType::f32);
  EXPECT_EQ(s.parameters, 134515008u);

  const ModelPlan one = plan_model(*find_model_shape("llama-1b"), DType::q4_0);
  EXPECT_EQ(one.find("token_embd.weight")->dtype, DType::q6_k);  // tied output, 2048 % 256 == 0
  EXPECT_EQ(one.find("blk.0.attn_q.weight")->dtype, DType::q4_0);
  EXPECT_EQ(one.parameters, 1235814400u);

  const ModelPlan eight = plan_model(*find_model_shape("llama-8b"), DType::q4_0);
  EXPECT_EQ(eight.find("output.weight")->dtype, DType::q6_k);
  EXPECT_EQ(eight.find("token_embd.weight")->dtype, DType::q4_0);
  EXPECT_EQ(eight.find("blk.31.ffn_gate.weight")->shape, (Shape{14336, 4096}));
  EXPECT_EQ(eight.tensors.size(), 3u + 9u * 32u);
  EXPECT_EQ(eight.parameters, 8030261248u);

  const ModelPlan eight_f16 = plan_model(*find_model_shape("llama-8b"), DType::f16);
  for (const PlannedTensor& t : eight_f16.tensors)
    EXPECT_EQ(t.dtype, t.norm ? DType::f32 : DType::f16) << t.name;
}

// The sizes llama.cpp's files of these shapes have (MB = 1e6 bytes), within 1%.
TEST(ModelMakerRules, FileSizesMatchLlamaCppFiles) {
  struct Case {
    const char* shape;
    DType type;
    double megabytes;
  };
  for (const Case& c :
       {Case{"smollm2-135m", DType::q4_1, 97.8}, Case{"llama-1b", DType::q4_0, 766.0},
        Case{"llama-1b", DType::q8_0, 1316.0}, Case{"llama-1b", DType::f16, 2475.0}}) {
    const ModelPlan plan = plan_model(*find_model_shape(c.shape), c.type);
    const double mb = static_cast<double>(plan.file_bytes) / 1e6;
    std::printf("[make-model] %s %s: %.1f MB (llama.cpp: %.1f MB)\n", c.shape,
                std::string(dtype_name(c.type)).c_str(), mb, c.megabytes);
    EXPECT_NEAR(mb, c.megabytes, c.megabytes * 0.01) << c.shape << " " << dtype_name(c.type);
  }
}

TEST(ModelMakerRules, RejectsBadShapes) {
  ModelShape s = small_shape();
  s.heads = 3;  // 256 % 3 != 0
  EXPECT_THROW(plan_model(s, DType::f16), Error);
  s = small_shape();
  s.kv_heads = 3;  // 4 % 3 != 0
  EXPECT_THROW(plan_model(s, DType::f16), Error);
  s = small_shape();
  s.vocab = 100;  // fewer than the 256 byte tokens
  EXPECT_THROW(plan_model(s, DType::f16), Error);
  EXPECT_THROW(plan_model(small_shape(), DType::i32), Error);
  EXPECT_FALSE(find_model_shape("llama-70b").has_value());
}

class ModelMakerTypes : public ModelMakerTest, public ::testing::WithParamInterface<DType> {};

TEST_P(ModelMakerTypes, WritesAModelThatLoadsAndDecodes) {
  const DType type = GetParam();
  const ModelShape shape = small_shape();
  const fs::path file = path("small.gguf");
  const MakeModelReport report = make_model(shape, type, file, {.seed = 5});
  EXPECT_EQ(report.file_bytes, fs::file_size(file));
  EXPECT_EQ(report.file_bytes, report.plan.file_bytes);
  EXPECT_FALSE(fs::exists(path("small.gguf.partial")));

  // Tensors exactly as planned, metadata as llama.cpp writes it.
  const GgufFile gguf = GgufFile::open(file);
  ASSERT_EQ(gguf.tensors().size(), report.plan.tensors.size());
  for (size_t i = 0; i < gguf.tensors().size(); ++i) {
    const TensorInfo& t = gguf.tensors()[i];
    const PlannedTensor& p = report.plan.tensors[i];
    EXPECT_EQ(t.name, p.name);
    EXPECT_EQ(t.dtype, p.dtype) << t.name;
    EXPECT_EQ(t.shape, p.shape) << t.name;
    EXPECT_EQ(t.bytes, p.bytes) << t.name;
  }
  EXPECT_EQ(gguf.get_u32("general.file_type"), llama_file_type(type));
  EXPECT_EQ(gguf.get_u32("general.quantization_version"), 2u);
  EXPECT_EQ(gguf.get_string("general.name"), "small");
  EXPECT_EQ(gguf.tensor("output.weight").dtype, llama_tensor_type(type, true, 256));
  EXPECT_EQ(gguf.tensor("blk.1.ffn_down.weight").dtype, llama_tensor_type(type, false, 512));

  const std::unique_ptr<ModelSource> source = open_model(file);
  const LlamaConfig& c = source->config();
  EXPECT_EQ(c.hidden, 256);
  EXPECT_EQ(c.ffn, 512);
  EXPECT_EQ(c.layers, 2);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.kv_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.train_context, 256);
  EXPECT_FALSE(c.tied_output);
  EXPECT_FLOAT_EQ(c.rope_theta, shape.rope_theta);

  ASSERT_TRUE(source->tokenizer_data().has_value());
  const Tokenizer tokenizer(*source->tokenizer_data());
  EXPECT_EQ(tokenizer.vocab_size(), 512);
  const std::string text = "Hello world, 123 tokens!";
  const std::vector<int32_t> ids = tokenizer.encode(text);
  EXPECT_EQ(tokenizer.decode(ids), text);
  ASSERT_TRUE(tokenizer.eot_id().has_value());
  EXPECT_TRUE(tokenizer.is_end_of_generation(*tokenizer.eot_id()));

  LlamaModel model(testing::cpu_backend(), *source, LoadOptions{.context = 64});
  const std::span<const float> logits = model.prefill(ids);
  ASSERT_EQ(logits.size(), 512u);
  for (const float v : logits) ASSERT_TRUE(std::isfinite(v));
  int32_t token = argmax(logits);
  for (int i = 0; i < 4; ++i) {
    const int32_t next = model.decode_greedy(token);
    ASSERT_GE(next, 0);
    ASSERT_LT(next, 512);
    token = next;
  }
  const std::span<const float> more = model.decode(token);
  for (const float v : more) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(model.position(), static_cast<int64_t>(ids.size()) + 5);
}

INSTANTIATE_TEST_SUITE_P(Types, ModelMakerTypes,
                         ::testing::Values(DType::f16, DType::q8_0, DType::q4_0, DType::q4_1,
                                           DType::q4_k, DType::q6_k, DType::q5_0, DType::q5_1,
                                           DType::q2_k, DType::q3_k, DType::iq4_nl, DType::iq4_xs),
                         [](const ::testing::TestParamInfo<DType>& param) {
                           return std::string(dtype_name(param.param));
                         });

// A file with a tensor of a GGML type onepass does not compute with (iq2_xxs, patched into
// a written model's tensor info): the file opens and lists the tensor by the type's name;
// loading that tensor fails with an error naming the tensor and the type.
TEST_F(ModelMakerTest, UnsupportedTensorTypeIsListedButNotLoaded) {
  const fs::path file = path("iq2.gguf");
  make_model(small_shape(), DType::q4_k, file, {.seed = 3});
  std::vector<uint8_t> bytes = read_bytes(file);
  const std::string name = "blk.0.attn_q.weight";
  const auto at = std::search(bytes.begin(), bytes.end(), name.begin(), name.end());
  ASSERT_NE(at, bytes.end());
  // name, n_dims (2), two dims, then the type: q4_k (12) becomes iq2_xxs (16), whose
  // blocks are smaller, so the tensor still lies inside its old data.
  const size_t type_at = static_cast<size_t>(at - bytes.begin()) + name.size() + 4 + 16;
  uint32_t type = 0;
  std::memcpy(&type, &bytes[type_at], 4);
  ASSERT_EQ(type, 12u);
  type = 16;
  std::memcpy(&bytes[type_at], &type, 4);
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  const GgufFile gguf = GgufFile::open(file);
  EXPECT_EQ(gguf.tensor(name).unsupported_type, "iq2_xxs");
  EXPECT_EQ(gguf.tensor(name).bytes, 256u * 66u);  // [256, 256]: 256 blocks of 66 bytes
  EXPECT_TRUE(gguf.tensor("blk.0.attn_k.weight").unsupported_type.empty());
  const std::unique_ptr<ModelSource> source = open_model(file);
  EXPECT_TRUE(source->find("blk.0.attn_k.weight").has_value());
  try {
    (void)source->find(name);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'blk.0.attn_q.weight' has type iq2_xxs"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(LlamaModel(testing::cpu_backend(), *source, LoadOptions{.context = 32}), Error);
}

TEST_F(ModelMakerTest, SmollmLikeShapeGetsQ8EmbeddingAndLoads) {
  ModelShape shape = *find_model_shape("smollm2-135m");
  shape.layers = 1;
  shape.vocab = 1024;
  const MakeModelReport report = make_model(shape, DType::q4_1, path("smol.gguf"), {.seed = 1});
  const GgufFile gguf = GgufFile::open(path("smol.gguf"));
  EXPECT_EQ(gguf.tensor("token_embd.weight").dtype, DType::q8_0);
  EXPECT_EQ(gguf.tensor("blk.0.attn_q.weight").dtype, DType::q4_1);
  EXPECT_EQ(gguf.find_tensor("output.weight"), nullptr);
  EXPECT_EQ(gguf.get_string("tokenizer.ggml.pre"), "smollm");
  const std::unique_ptr<ModelSource> source = open_model(path("smol.gguf"));
  EXPECT_TRUE(source->config().tied_output);
  const Tokenizer tokenizer(*source->tokenizer_data());
  // The ChatML vocabulary ends a turn with <|im_end|>.
  const std::optional<int32_t> im_end = tokenizer.find_token("<|im_end|>");
  ASSERT_TRUE(im_end.has_value());
  EXPECT_TRUE(tokenizer.is_end_of_generation(*im_end));
  LlamaModel model(testing::cpu_backend(), *source, LoadOptions{.context = 32});
  const int32_t next = model.decode_greedy(tokenizer.encode("hi")[0]);
  EXPECT_GE(next, 0);
}

TEST_F(ModelMakerTest, OutputDependsOnTheSeedNotOnThreads) {
  const ModelShape shape = small_shape();
  make_model(shape, DType::q4_k, path("a.gguf"), {.seed = 9, .threads = 1});
  make_model(shape, DType::q4_k, path("b.gguf"), {.seed = 9, .threads = 3});
  make_model(shape, DType::q4_k, path("c.gguf"), {.seed = 10, .threads = 2});
  const std::vector<uint8_t> a = read_bytes(path("a.gguf"));
  EXPECT_EQ(a, read_bytes(path("b.gguf")));
  EXPECT_NE(a, read_bytes(path("c.gguf")));
}

TEST_F(ModelMakerTest, WeightsHaveTheIntendedScale) {
  const ModelShape shape = small_shape();
  make_model(shape, DType::f32, path("f32.gguf"), {.seed = 3});
  const GgufFile gguf = GgufFile::open(path("f32.gguf"));
  auto stats = [&](const std::string& name) {
    const TensorInfo& t = gguf.tensor(name);
    const auto* v = static_cast<const float*>(t.data);
    const auto n = static_cast<size_t>(t.shape.numel());
    double sum = 0, sq = 0, lo = v[0], hi = v[0];
    for (size_t i = 0; i < n; ++i) {
      sum += v[i];
      sq += static_cast<double>(v[i]) * v[i];
      lo = std::min<double>(lo, v[i]);
      hi = std::max<double>(hi, v[i]);
    }
    const double mean = sum / static_cast<double>(n);
    return std::array<double, 4>{mean, std::sqrt(sq / static_cast<double>(n) - mean * mean), lo,
                                 hi};
  };
  for (const auto& [name, in] : {std::pair<std::string, int>{"blk.0.ffn_up.weight", 256},
                                 {"blk.1.ffn_down.weight", 512},
                                 {"token_embd.weight", 256},
                                 {"output.weight", 256}}) {
    const auto [mean, sd, lo, hi] = stats(name);
    const double want = 1.0 / std::sqrt(static_cast<double>(in));
    EXPECT_NEAR(sd, want, want * 0.05) << name;
    EXPECT_NEAR(mean, 0.0, want * 0.05) << name;
  }
  const auto [mean, sd, lo, hi] = stats("blk.0.attn_norm.weight");
  EXPECT_NEAR(mean, 1.0, 0.02);
  EXPECT_GE(lo, 0.9);
  EXPECT_LE(hi, 1.1);
}

TEST_F(ModelMakerTest, FailureLeavesNoFile) {
  EXPECT_THROW(make_model(small_shape(), DType::f16, path("missing_dir/x.gguf")), Error);
  EXPECT_FALSE(fs::exists(path("missing_dir/x.gguf")));
}

// gguf-py (the reference reader) parses the file: every tensor's type, shape, offset, size
// and data checksum, and the llama.cpp keys.
TEST_F(ModelMakerTest, GgufPyReadsMadeModels) {
  int status = 0;
  testing::run_command("python3 -c 'import gguf, numpy' 2>&1", &status);
  if (status != 0) GTEST_SKIP() << "python3 with the gguf package is not available";
  // Beside this source when __FILE__ is absolute, else from the repository root (where
  // ctest runs the model tests).
  const fs::path beside =
      fs::path(__FILE__).parent_path().parent_path() / "tools" / "gguf_check.py";
  const fs::path script = fs::exists(beside) ? beside : fs::path("tests/tools/gguf_check.py");
  ASSERT_TRUE(fs::exists(script)) << script;

  for (const DType type : {DType::q4_k, DType::q4_1, DType::f16}) {
    SCOPED_TRACE(dtype_name(type));
    ModelShape shape = small_shape();
    shape.hidden = type == DType::q4_1 ? 192 : 256;  // q4_1: the q8_0 output fallback
    shape.heads = 4;
    const fs::path file = path(cat("py_", dtype_name(type), ".gguf"));
    make_model(shape, type, file, {.seed = 2});
    const std::string out = testing::run_command(
        cat("python3 '", script.string(), "' '", file.string(), "' 2>&1"), &status);
    ASSERT_EQ(status, 0) << out;

    const GgufFile gguf = GgufFile::open(file);
    std::vector<std::string> expected;
    for (const TensorInfo& t : gguf.tensors()) {
      std::string dims;
      for (int d = 0; d < t.shape.ndim(); ++d) {
        if (d > 0) dims += ',';
        dims += std::to_string(t.shape[d]);
      }
      expected.push_back(cat("tensor ", t.name, " ", dtype_info(t.dtype).ggml_type, " ", dims, " ",
                             t.offset, " ", t.bytes, " ", fnv1a(t.data, t.bytes)));
    }
    std::vector<std::string> tensors;
    std::istringstream lines(out);
    std::string line;
    bool saw_file_type = false, saw_arch = false, saw_blocks = false;
    while (std::getline(lines, line)) {
      if (line.rfind("tensor ", 0) == 0) tensors.push_back(line);
      if (line == cat("kv general.file_type 4:", llama_file_type(type))) saw_file_type = true;
      if (line == "kv general.architecture 8:6c6c616d61") saw_arch = true;  // "llama" in hex
      if (line == "kv llama.block_count 4:2") saw_blocks = true;
    }
    EXPECT_EQ(tensors, expected);
    EXPECT_TRUE(saw_file_type && saw_arch && saw_blocks) << out.substr(0, 2000);
  }
}

}  // namespace
}  // namespace onepass::model

namespace onepass::model {
namespace {

// Each family's named shape plans its family's tensors (llama.cpp's names) and metadata; a
// small shape of each family is written, read back to the configuration it was made from,
// and runs.
TEST_F(ModelMakerTest, FamilyShapesRoundTrip) {
  struct Expect {
    const char* shape;
    const char* tensor;  // one tensor only that family has
    const char* absent;  // one tensor that family does not have
  };
  for (const Expect& e : {Expect{"qwen3-0.6b", "blk.27.attn_k_norm.weight", "blk.0.post_ffw_norm.weight"},
                          Expect{"gemma3-270m", "blk.17.post_ffw_norm.weight", "output.weight"},
                          Expect{"gemma2-2b", "blk.25.post_attention_norm.weight", "blk.0.attn_q_norm.weight"},
                          Expect{"phi3-mini", "blk.31.attn_qkv.weight", "blk.0.ffn_gate.weight"}}) {
    SCOPED_TRACE(e.shape);
    const std::optional<ModelShape> named = find_model_shape(e.shape);
    ASSERT_TRUE(named.has_value());
    const ModelPlan plan = plan_model(*named, named->default_type);
    EXPECT_NE(plan.find(e.tensor), nullptr);
    EXPECT_EQ(plan.find(e.absent), nullptr);
    bool has_arch = false;
    for (const auto& [key, value] : plan.metadata) has_arch = has_arch || key == named->architecture + ".block_count";
    EXPECT_TRUE(has_arch);

    // The same family at a size that runs in a test.
    ModelShape small = *named;
    small.name = "small";
    small.hidden = 64;
    small.ffn = 128;
    small.layers = 3;
    small.heads = 4;
    small.kv_heads = named->kv_heads == named->heads ? 4 : 2;
    small.head_dim = named->head_dim > 0 ? 32 : 0;
    small.vocab = 512;
    small.context = 128;
    if (small.sliding_window > 0) small.sliding_window = 4;
    const fs::path file = path(cat(e.shape, ".gguf"));
    make_model(small, DType::q8_0, file, {.seed = 5});
    const std::unique_ptr<ModelSource> source = open_model(file);
    const LlamaConfig want = small.config();
    const LlamaConfig& got = source->config();
    EXPECT_EQ(got.architecture, want.architecture);
    EXPECT_EQ(got.head_dim, want.head_dim);
    EXPECT_EQ(got.qk_norm, want.qk_norm);
    EXPECT_EQ(got.post_norms, want.post_norms);
    EXPECT_EQ(got.activation, want.activation);
    EXPECT_EQ(got.sliding_window, want.sliding_window);
    EXPECT_EQ(got.sliding_window_period, want.sliding_window_period);
    EXPECT_FLOAT_EQ(got.attn_softcap, want.attn_softcap);
    EXPECT_FLOAT_EQ(got.final_softcap, want.final_softcap);
    EXPECT_FLOAT_EQ(got.embedding_scale, want.embedding_scale);
    EXPECT_EQ(got.fused_qkv_tensor, want.fused_qkv_tensor);
    EXPECT_EQ(got.fused_gate_up_tensor, want.fused_gate_up_tensor);
    const Tokenizer tokenizer(*source->tokenizer_data());
    LlamaModel model(testing::cpu_backend(), *source, LoadOptions{.context = 32});
    const std::vector<int32_t> ids = tokenizer.encode("a few words of text");
    for (const float v : model.prefill(ids)) ASSERT_TRUE(std::isfinite(v));
    const int32_t next = model.decode_greedy(ids.back());
    EXPECT_GE(next, 0);
    EXPECT_LT(next, 512);
  }
}

}  // namespace
}  // namespace onepass::model

namespace onepass::model {
namespace {

// The mixture-of-experts shapes plan llama.cpp's expert tensors ([experts, rows, cols], the
// router in f32) and keys; a small shape of each is written, read back with its experts,
// and runs (prefill chunks and a greedy decode step) to finite logits.
TEST_F(ModelMakerTest, MoeShapesRoundTrip) {
  struct Expect {
    const char* shape;
    const char* architecture;
    int64_t experts, used, expert_ffn;
  };
  for (const Expect& e : {Expect{"qwen3-30b-a3b", "qwen3moe", 128, 8, 768}, Expect{"mixtral-8x7b", "llama", 8, 2, 14336},
                          Expect{"olmoe-1b-7b", "olmoe", 64, 8, 1024},
                          Expect{"qwen3moe-small", "qwen3moe", 16, 4, 256}}) {
    SCOPED_TRACE(e.shape);
    const std::optional<ModelShape> named = find_model_shape(e.shape);
    ASSERT_TRUE(named.has_value());
    const LlamaConfig big = named->config();
    EXPECT_EQ(big.architecture, e.architecture);
    EXPECT_EQ(big.experts, e.experts);
    EXPECT_EQ(big.experts_used, e.used);
    EXPECT_EQ(big.expert_ffn, e.expert_ffn);
    const ModelPlan plan = plan_model(*named, named->default_type);
    const PlannedTensor* gate = plan.find("blk.0.ffn_gate_exps.weight");
    ASSERT_NE(gate, nullptr);
    EXPECT_EQ(gate->shape, (Shape{e.experts, e.expert_ffn, big.hidden}));
    const PlannedTensor* down = plan.find("blk.0.ffn_down_exps.weight");
    ASSERT_NE(down, nullptr);
    EXPECT_EQ(down->shape, (Shape{e.experts, big.hidden, e.expert_ffn}));
    const PlannedTensor* router = plan.find("blk.0.ffn_gate_inp.weight");
    ASSERT_NE(router, nullptr);
    EXPECT_EQ(router->dtype, DType::f32);
    EXPECT_EQ(plan.find("blk.0.ffn_gate.weight"), nullptr);
    EXPECT_EQ(plan.find("blk.0.ffn_down.weight"), nullptr);
    if (big.qk_norm_whole) {
      EXPECT_EQ(plan.find("blk.0.attn_q_norm.weight")->shape, (Shape{big.q_dim()}));
    }

    ModelShape small = *named;
    small.name = "small";
    small.hidden = 64;
    small.ffn = 128;
    small.layers = 2;
    small.heads = 4;
    small.kv_heads = named->kv_heads == named->heads ? 4 : 2;
    small.head_dim = named->head_dim > 0 ? 32 : 0;
    small.vocab = 512;
    small.context = 128;
    small.experts = 8;
    small.experts_used = 3;
    small.expert_ffn = named->expert_ffn > 0 ? 64 : 0;
    const fs::path file = path(cat(e.shape, ".gguf"));
    make_model(small, DType::q8_0, file, {.seed = 7});
    const std::unique_ptr<ModelSource> source = open_model(file);
    const LlamaConfig want = small.config();
    const LlamaConfig& got = source->config();
    EXPECT_EQ(got.architecture, want.architecture);
    EXPECT_EQ(got.experts, 8);
    EXPECT_EQ(got.experts_used, 3);
    EXPECT_EQ(got.expert_ffn, named->expert_ffn > 0 ? 64 : 128);
    EXPECT_EQ(got.expert_weighting, want.expert_weighting);
    EXPECT_EQ(got.qk_norm, want.qk_norm);
    EXPECT_EQ(got.qk_norm_whole, want.qk_norm_whole);
    LlamaModel model(testing::cpu_backend(), *source, LoadOptions{.context = 32, .max_batch = 4});
    const std::vector<int32_t> ids{1, 5, 9, 200, 17, 3};
    for (const float v : model.prefill(ids)) ASSERT_TRUE(std::isfinite(v));
    const int32_t next = model.decode_greedy(ids.back());
    EXPECT_GE(next, 0);
    EXPECT_LT(next, 512);
  }
}

}  // namespace
}  // namespace onepass::model
