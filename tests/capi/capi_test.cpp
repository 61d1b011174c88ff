// The C API (include/onepass.h) against the C++ library it wraps: the default model and
// small random models, every error path (missing files, bad arguments, NULL handles), and
// the header compiled as C99 (header_check.c).
#include "onepass.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "onepass/backends/factory.h"
#include "onepass/model/chat.h"
#include "onepass/model/llama.h"
#include "onepass/model/loader.h"
#include "onepass/model/model_maker.h"
#include "onepass/model/sampler.h"
#include "onepass/model/tokenizer.h"
#include "onepass/version.h"
#include "support/testing.h"

extern "C" int onepass_header_check_c(const char* missing_path);

#if defined(__SANITIZE_ADDRESS__)
// This program holds the library twice by design: the C++ reference, linked statically,
// and the copy inside libonepass_c. Their globals share names without being one object.
extern "C" const char* __asan_default_options() { return "detect_odr_violation=0"; }
#endif

namespace onepass {
namespace {

namespace fs = std::filesystem;

const char* kDefaultModel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

onepass_model_params cpu_params(int64_t context = 0) {
  onepass_model_params p = onepass_model_default_params();
  p.backend = ONEPASS_BACKEND_CPU;
  p.context = context;
  p.threads = 2;
  return p;
}

onepass_sampling_params greedy(int64_t max_tokens) {
  onepass_sampling_params p = onepass_sampling_default_params();
  p.max_tokens = max_tokens;
  return p;
}

struct Generated {
  std::vector<int32_t> tokens;
  std::string text;
  onepass_stop_reason stop = ONEPASS_STOP_NONE;
};

/// Every step of a generation until its end.
Generated run_steps(onepass_generation* g) {
  Generated out;
  onepass_step step{};
  for (;;) {
    EXPECT_EQ(onepass_generation_next(g, &step), ONEPASS_OK) << onepass_last_error();
    out.text.append(step.text, step.text_length);
    if (step.stop != ONEPASS_STOP_NONE) {
      EXPECT_EQ(step.token, -1);
      EXPECT_EQ(step.generated, static_cast<int64_t>(out.tokens.size()));
      out.stop = step.stop;
      return out;
    }
    out.tokens.push_back(step.token);
  }
}

/// A model handle freed at the end of scope.
struct Handle {
  onepass_model* model = nullptr;
  ~Handle() { onepass_model_free(model); }
};

/// The greedy tokens of the C++ library, one decode and a host argmax per step (not the
/// fed greedy runs the C API uses), stopping at an end of generation as the API does.
std::vector<int32_t> reference_greedy(const fs::path& path, const std::vector<int32_t>& prompt,
                                      int64_t max_tokens, int64_t context,
                                      BackendChoice backend = BackendChoice::cpu) {
  const auto source = model::open_model(path);
  const model::Tokenizer tokenizer(*source->tokenizer_data());
  model::LoadOptions load;
  load.context = context;
  model::LlamaModel llama(make_backend(backend), *source, load);
  std::vector<int32_t> out;
  int32_t next = model::argmax(llama.prefill(prompt));
  while (static_cast<int64_t>(out.size()) < max_tokens && !tokenizer.is_end_of_generation(next)) {
    out.push_back(next);
    if (static_cast<int64_t>(out.size()) == max_tokens || llama.position() >= llama.context()) break;
    next = model::argmax(llama.decode(next));
  }
  return out;
}

TEST(CApi, VersionMatchesTheLibrary) {
  EXPECT_EQ(std::string(onepass_version()), std::string(kVersion));
  EXPECT_EQ(onepass_version_number(), kVersionMajor * 10000 + kVersionMinor * 100 + kVersionPatch);
  EXPECT_EQ(std::string(onepass_backends()), std::string(kBackends));
  EXPECT_STREQ(onepass_status_name(ONEPASS_ERROR_MODEL_LOAD), "ONEPASS_ERROR_MODEL_LOAD");
  EXPECT_STREQ(onepass_status_name(static_cast<onepass_status>(99)), "unknown");
}

TEST(CApi, HeaderCompilesAsC99) {
  // header_check.c, built with -std=c99 -pedantic-errors, loads a missing file.
  EXPECT_EQ(onepass_header_check_c("/nonexistent/model.gguf"), ONEPASS_ERROR_MODEL_LOAD);
}

class CApiErrors : public testing::TempDirTest {
 protected:
  CApiErrors() : TempDirTest("onepass_capi_") {}
};

TEST_F(CApiErrors, LoadReportsMissingAndBadFiles) {
  onepass_model* model = reinterpret_cast<onepass_model*>(this);  // must be reset to NULL
  const std::string missing = path("missing.gguf").string();
  EXPECT_EQ(onepass_model_load(missing.c_str(), nullptr, &model), ONEPASS_ERROR_MODEL_LOAD);
  EXPECT_EQ(model, nullptr);
  EXPECT_NE(std::string(onepass_last_error()).find(missing), std::string::npos)
      << onepass_last_error();
  EXPECT_NE(std::string(onepass_last_error()).find("no such file"), std::string::npos);

  const fs::path junk = path("junk.gguf");
  std::ofstream(junk) << "this is not a GGUF file";
  EXPECT_EQ(onepass_model_load(junk.c_str(), nullptr, &model), ONEPASS_ERROR_MODEL_LOAD);
  EXPECT_EQ(model, nullptr);
  EXPECT_NE(std::string(onepass_last_error()).find("junk.gguf"), std::string::npos)
      << onepass_last_error();
}

TEST_F(CApiErrors, LoadRejectsBadArguments) {
  onepass_model* model = nullptr;
  EXPECT_EQ(onepass_model_load(nullptr, nullptr, &model), ONEPASS_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(onepass_last_error()).find("path is NULL"), std::string::npos);
  EXPECT_EQ(onepass_model_load(kDefaultModel, nullptr, nullptr), ONEPASS_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(onepass_last_error()).find("model is NULL"), std::string::npos);

  onepass_model_params p = cpu_params();
  p.context = -1;
  EXPECT_EQ(onepass_model_load(kDefaultModel, &p, &model), ONEPASS_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(onepass_last_error()).find("context is -1"), std::string::npos);
  p = cpu_params();
  p.threads = -3;
  EXPECT_EQ(onepass_model_load(kDefaultModel, &p, &model), ONEPASS_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(onepass_last_error()).find("threads is -3"), std::string::npos);
  p = cpu_params();
  p.backend = static_cast<onepass_backend>(7);
  EXPECT_EQ(onepass_model_load(kDefaultModel, &p, &model), ONEPASS_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(onepass_last_error()).find("backend is 7"), std::string::npos);
  EXPECT_EQ(model, nullptr);
}

TEST(CApi, NullHandlesAreRejected) {
  size_t length = 0;
  int32_t tokens[4] = {};
  char text[8] = {};
  float logits[4] = {};
  onepass_model_info info{};
  onepass_generation* g = nullptr;
  onepass_step step{};
  const onepass_chat_message message{"user", "hi"};
  auto expect_null_model = [](onepass_status status) {
    EXPECT_EQ(status, ONEPASS_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(onepass_last_error()).find("is NULL"), std::string::npos)
        << onepass_last_error();
  };
  expect_null_model(onepass_model_get_info(nullptr, &info));
  expect_null_model(onepass_tokenize(nullptr, "hi", 2, 0, tokens, 4, &length));
  expect_null_model(onepass_detokenize(nullptr, tokens, 1, 0, text, 8, &length));
  expect_null_model(onepass_chat_apply(nullptr, &message, 1, 1, text, 8, &length));
  expect_null_model(onepass_generation_start(nullptr, "hi", nullptr, &g));
  EXPECT_EQ(g, nullptr);
  expect_null_model(onepass_generation_start_tokens(nullptr, tokens, 1, nullptr, &g));
  expect_null_model(onepass_generation_next(nullptr, &step));
  expect_null_model(onepass_generation_stop(nullptr));
  expect_null_model(onepass_generate(nullptr, "hi", nullptr, nullptr, nullptr, nullptr));
  expect_null_model(onepass_eval_logits(nullptr, tokens, 1, logits, 4));
  onepass_model_free(nullptr);
  onepass_generation_free(nullptr);
}

TEST(CApi, UnavailableBackendIsReported) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present";
  onepass_model_params p = cpu_params();
  p.backend = ONEPASS_BACKEND_CUDA;
  onepass_model* model = nullptr;
  if (!fs::exists(kDefaultModel)) GTEST_SKIP() << kDefaultModel << " is not installed";
  EXPECT_EQ(onepass_model_load(kDefaultModel, &p, &model), ONEPASS_ERROR_BACKEND);
  EXPECT_EQ(model, nullptr);
  EXPECT_FALSE(std::string(onepass_last_error()).empty());
}

// ---- the default model ------------------------------------------------------------

class CApiModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(kDefaultModel)) return;
    const onepass_model_params p = cpu_params(256);
    ASSERT_EQ(onepass_model_load(kDefaultModel, &p, &model_), ONEPASS_OK) << onepass_last_error();
    source_ = model::open_model(kDefaultModel).release();
    tokenizer_ = new model::Tokenizer(*source_->tokenizer_data());
  }
  static void TearDownTestSuite() {
    onepass_model_free(model_);
    delete tokenizer_;
    delete source_;
    model_ = nullptr;
  }
  void SetUp() override {
    if (model_ == nullptr) GTEST_SKIP() << kDefaultModel << " is not installed (scripts/setup)";
  }

  std::vector<int32_t> tokenize(const std::string& text) {
    size_t length = 0;
    const uint32_t flags = ONEPASS_TOKENIZE_ADD_SPECIAL | ONEPASS_TOKENIZE_PARSE_SPECIAL;
    EXPECT_EQ(onepass_tokenize(model_, text.data(), text.size(), flags, nullptr, 0, &length),
              length == 0 && text.empty() ? ONEPASS_OK : ONEPASS_ERROR_BUFFER_TOO_SMALL);
    std::vector<int32_t> ids(length);
    EXPECT_EQ(onepass_tokenize(model_, text.data(), text.size(), flags, ids.data(), ids.size(),
                               &length),
              ONEPASS_OK)
        << onepass_last_error();
    EXPECT_EQ(length, ids.size());
    return ids;
  }

  static onepass_model* model_;
  static model::ModelSource* source_;
  static model::Tokenizer* tokenizer_;
};
onepass_model* CApiModel::model_ = nullptr;
model::ModelSource* CApiModel::source_ = nullptr;
model::Tokenizer* CApiModel::tokenizer_ = nullptr;

TEST_F(CApiModel, InfoDescribesTheModel) {
  onepass_model_info info{};
  ASSERT_EQ(onepass_model_get_info(model_, &info), ONEPASS_OK);
  EXPECT_EQ(info.vocab_size, source_->config().vocab_size);
  EXPECT_EQ(info.context, 256);
  EXPECT_EQ(info.bos_token, tokenizer_->bos_id());
  EXPECT_EQ(info.eos_token, tokenizer_->eos_id());
  EXPECT_STREQ(info.device, "cpu");
  EXPECT_STREQ(onepass_last_error(), "");
}

TEST_F(CApiModel, TokenizeAndDetokenizeMatchTheTokenizer) {
  const std::string text = "Hello, wörld! <|im_start|>user";
  const std::vector<int32_t> ids = tokenize(text);
  EXPECT_EQ(ids, tokenizer_->encode(text, {.add_special = true, .parse_special = true}));
  // Without parse_special the marker is plain text: more tokens.
  size_t plain = 0;
  EXPECT_EQ(onepass_tokenize(model_, text.data(), text.size(), 0, nullptr, 0, &plain),
            ONEPASS_ERROR_BUFFER_TOO_SMALL);
  EXPECT_EQ(plain, tokenizer_->encode(text, {.add_special = false, .parse_special = false}).size());
  EXPECT_GT(plain, ids.size());

  size_t length = 0;
  EXPECT_EQ(onepass_detokenize(model_, ids.data(), ids.size(), ONEPASS_DETOKENIZE_RENDER_SPECIAL,
                               nullptr, 0, &length),
            ONEPASS_ERROR_BUFFER_TOO_SMALL);
  EXPECT_EQ(length, text.size());
  std::string back(length + 1, '\x7f');
  // One byte short of the NUL: nothing written.
  EXPECT_EQ(onepass_detokenize(model_, ids.data(), ids.size(), ONEPASS_DETOKENIZE_RENDER_SPECIAL,
                               back.data(), length, &length),
            ONEPASS_ERROR_BUFFER_TOO_SMALL);
  EXPECT_EQ(back[0], '\x7f');
  ASSERT_EQ(onepass_detokenize(model_, ids.data(), ids.size(), ONEPASS_DETOKENIZE_RENDER_SPECIAL,
                               back.data(), back.size(), &length),
            ONEPASS_OK);
  EXPECT_EQ(back[length], '\0');
  back.resize(length);
  EXPECT_EQ(back, text);

  const int32_t bad[] = {ids[0], 1 << 30};
  EXPECT_EQ(onepass_detokenize(model_, bad, 2, 0, back.data(), back.size(), &length),
            ONEPASS_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(onepass_last_error()).find("token 1 is 1073741824"), std::string::npos)
      << onepass_last_error();
  EXPECT_EQ(onepass_tokenize(model_, text.data(), text.size(), 8, nullptr, 0, &length),
            ONEPASS_ERROR_INVALID_ARGUMENT);
  const char invalid_utf8[] = "\xff\xfe";
  EXPECT_NE(onepass_tokenize(model_, invalid_utf8, 2, 0, nullptr, 0, &length), ONEPASS_OK);
  EXPECT_FALSE(std::string(onepass_last_error()).empty());
}

TEST_F(CApiModel, ChatApplyRendersTheTemplate) {
  const onepass_chat_message messages[] = {{"system", "Be brief."},
                                           {"user", "What is the capital of France?"}};
  size_t length = 0;
  ASSERT_EQ(onepass_chat_apply(model_, messages, 2, 1, nullptr, 0, &length),
            ONEPASS_ERROR_BUFFER_TOO_SMALL);
  std::string text(length + 1, '\0');
  ASSERT_EQ(onepass_chat_apply(model_, messages, 2, 1, text.data(), text.size(), &length),
            ONEPASS_OK);
  text.resize(length);
  const std::vector<model::ChatMessage> chat = {{"system", "Be brief."},
                                                {"user", "What is the capital of France?"}};
  EXPECT_EQ(text, model::render_chat(*tokenizer_, chat, true));
  EXPECT_NE(text.find("<|im_start|>assistant\n"), std::string::npos) << text;

  const onepass_chat_message null_content[] = {{"user", nullptr}};
  EXPECT_EQ(onepass_chat_apply(model_, null_content, 1, 1, nullptr, 0, &length),
            ONEPASS_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(onepass_last_error()).find("message 0"), std::string::npos);
}

TEST_F(CApiModel, GreedyGenerationMatchesTheLibrary) {
  const onepass_chat_message messages[] = {{"user", "What is the capital of France?"}};
  size_t length = 0;
  onepass_chat_apply(model_, messages, 1, 1, nullptr, 0, &length);
  std::string prompt(length + 1, '\0');
  ASSERT_EQ(onepass_chat_apply(model_, messages, 1, 1, prompt.data(), prompt.size(), &length),
            ONEPASS_OK);
  prompt.resize(length);

  const onepass_sampling_params params = greedy(40);
  onepass_generation* g = nullptr;
  ASSERT_EQ(onepass_generation_start(model_, prompt.c_str(), &params, &g), ONEPASS_OK)
      << onepass_last_error();
  const Generated got = run_steps(g);
  onepass_generation_free(g);

  const std::vector<int32_t> expected = reference_greedy(kDefaultModel, tokenize(prompt), 40, 256);
  EXPECT_EQ(got.tokens, expected);
  EXPECT_EQ(got.text, tokenizer_->decode(expected, {.render_special = false,
                                                    .strip_space_prefix = false}));
  EXPECT_EQ(got.stop, static_cast<int64_t>(expected.size()) == 40 ? ONEPASS_STOP_MAX_TOKENS
                                                                   : ONEPASS_STOP_END_OF_GENERATION);
  EXPECT_NE(got.text.find("Paris"), std::string::npos) << got.text;

  // The callback form gives the same text, and stops when asked.
  struct Collect {
    std::string text;
    int calls = 0;
    int stop_after = 1 << 30;
  } all, three{.stop_after = 3};
  const onepass_token_callback collect = [](int32_t, const char* text, size_t n, void* user) {
    auto* c = static_cast<Collect*>(user);
    c->text.append(text, n);
    return ++c->calls >= c->stop_after ? 1 : 0;
  };
  onepass_stop_reason stop = ONEPASS_STOP_NONE;
  ASSERT_EQ(onepass_generate(model_, prompt.c_str(), &params, collect, &all, &stop), ONEPASS_OK);
  EXPECT_EQ(all.text, got.text);
  EXPECT_EQ(stop, got.stop);
  ASSERT_EQ(onepass_generate(model_, prompt.c_str(), &params, collect, &three, &stop), ONEPASS_OK);
  EXPECT_EQ(three.calls, 3);
  EXPECT_EQ(stop, ONEPASS_STOP_CALLBACK);
  EXPECT_EQ(three.text, tokenizer_->decode(std::vector<int32_t>(expected.begin(), expected.begin() + 3),
                                           {.render_special = false, .strip_space_prefix = false}));
}

TEST_F(CApiModel, LogitsMatchTheLibrary) {
  const std::vector<int32_t> ids = tokenize("The quick brown fox");
  onepass_model_info info{};
  ASSERT_EQ(onepass_model_get_info(model_, &info), ONEPASS_OK);
  std::vector<float> logits(info.vocab_size, NAN);
  EXPECT_EQ(onepass_eval_logits(model_, ids.data(), ids.size(), logits.data(), logits.size() - 1),
            ONEPASS_ERROR_BUFFER_TOO_SMALL);
  EXPECT_TRUE(std::isnan(logits[0]));
  ASSERT_EQ(onepass_eval_logits(model_, ids.data(), ids.size(), logits.data(), logits.size()),
            ONEPASS_OK)
      << onepass_last_error();

  model::LoadOptions load;
  load.context = 256;
  model::LlamaModel llama(make_cpu_backend(), *source_, load);
  const std::span<const float> expected = llama.prefill(ids);
  ASSERT_EQ(expected.size(), logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    ASSERT_TRUE(std::isfinite(logits[i])) << i;
    ASSERT_NEAR(logits[i], expected[i], 1e-3f * (1.0f + std::fabs(expected[i]))) << i;
  }

  const int32_t out_of_range[] = {ids[0], info.vocab_size};
  EXPECT_EQ(onepass_eval_logits(model_, out_of_range, 2, logits.data(), logits.size()),
            ONEPASS_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(onepass_eval_logits(model_, ids.data(), 0, logits.data(), logits.size()),
            ONEPASS_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(onepass_last_error()).find("no tokens"), std::string::npos);
}

TEST(CApiCuda, GreedyGenerationMatchesTheLibrary) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  if (!fs::exists(kDefaultModel)) GTEST_SKIP() << kDefaultModel << " is not installed";
  onepass_model_params p = cpu_params(256);
  p.backend = ONEPASS_BACKEND_CUDA;
  Handle h;
  ASSERT_EQ(onepass_model_load(kDefaultModel, &p, &h.model), ONEPASS_OK) << onepass_last_error();
  onepass_model_info info{};
  ASSERT_EQ(onepass_model_get_info(h.model, &info), ONEPASS_OK);
  EXPECT_EQ(std::string(info.device).rfind("cuda: ", 0), 0u) << info.device;
  const char* prompt = "The capital of France is";
  const onepass_sampling_params params = greedy(48);
  onepass_generation* g = nullptr;
  ASSERT_EQ(onepass_generation_start(h.model, prompt, &params, &g), ONEPASS_OK);
  const Generated got = run_steps(g);
  onepass_generation_free(g);
  const auto source = model::open_model(kDefaultModel);
  const std::vector<int32_t> ids = model::Tokenizer(*source->tokenizer_data()).encode(prompt);
  EXPECT_EQ(got.tokens, reference_greedy(kDefaultModel, ids, 48, 256, BackendChoice::cuda));
}

TEST(CApiCuda, LogitsTensorIsInDeviceMemory) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  if (!fs::exists(kDefaultModel)) GTEST_SKIP() << kDefaultModel << " is not installed";
  onepass_model_params p = cpu_params(256);
  p.backend = ONEPASS_BACKEND_CUDA;
  Handle h;
  ASSERT_EQ(onepass_model_load(kDefaultModel, &p, &h.model), ONEPASS_OK) << onepass_last_error();
  const int32_t ids[] = {1, 504, 3575, 282, 4649, 314};
  onepass_model_info model_info{};
  ASSERT_EQ(onepass_model_get_info(h.model, &model_info), ONEPASS_OK);
  std::vector<float> expected(model_info.vocab_size);
  ASSERT_EQ(onepass_eval_logits(h.model, ids, 6, expected.data(), expected.size()), ONEPASS_OK);
  onepass_logits* logits = nullptr;
  ASSERT_EQ(onepass_eval_logits_tensor(h.model, ids, 6, &logits), ONEPASS_OK)
      << onepass_last_error();
  onepass_logits_info info{};
  ASSERT_EQ(onepass_logits_get_info(logits, &info), ONEPASS_OK);
  EXPECT_EQ(info.device_type, ONEPASS_DEVICE_CUDA);
  EXPECT_EQ(info.device_id, 0);
  ASSERT_EQ(info.length, model_info.vocab_size);
  onepass_model_free(h.model);  // the device copy outlives the model
  h.model = nullptr;
  std::vector<float> got(expected.size(), NAN);
  make_backend(BackendChoice::cuda)
      ->copy_to_host(got.data(), info.data, got.size() * sizeof(float));
  EXPECT_EQ(got, expected);
  onepass_logits_free(logits);
}

// ---- small random models ----------------------------------------------------------

class CApiRandomModel : public testing::TempDirTest {
 protected:
  CApiRandomModel() : TempDirTest("onepass_capi_random_") {}
  void SetUp() override {
    TempDirTest::SetUp();
    file_ = path("tiny.gguf");
    model::ModelShape shape{.hidden = 64, .ffn = 128, .layers = 2, .heads = 4, .kv_heads = 2,
                            .vocab = 1024};
    model::make_model(shape, DType::q8_0, file_, {.seed = 5, .threads = 2});
  }
  onepass_model* load(int64_t context) {
    const onepass_model_params p = cpu_params(context);
    onepass_model* model = nullptr;
    EXPECT_EQ(onepass_model_load(file_.c_str(), &p, &model), ONEPASS_OK) << onepass_last_error();
    return model;
  }
  fs::path file_;
};

TEST_F(CApiRandomModel, StopsWhenTheContextIsFull) {
  Handle h{load(20)};
  ASSERT_NE(h.model, nullptr);
  const int32_t prompt[] = {1, 2, 3, 4, 5};
  const onepass_sampling_params params = greedy(100);
  onepass_generation* g = nullptr;
  ASSERT_EQ(onepass_generation_start_tokens(h.model, prompt, 5, &params, &g), ONEPASS_OK);
  const Generated got = run_steps(g);
  // The random vocabulary's end tokens are rarely the argmax; if one is, the run ends early.
  if (got.stop == ONEPASS_STOP_CONTEXT_FULL) {
    EXPECT_EQ(got.tokens.size(), 16u);  // 20 - 5 positions, plus the token after the last
  } else {
    EXPECT_EQ(got.stop, ONEPASS_STOP_END_OF_GENERATION);
  }
  EXPECT_EQ(got.tokens, reference_greedy(file_, {1, 2, 3, 4, 5}, 100, 20));
  // After the end, the end again with no text.
  onepass_step step{};
  EXPECT_EQ(onepass_generation_next(g, &step), ONEPASS_OK);
  EXPECT_EQ(step.stop, got.stop);
  EXPECT_EQ(step.text_length, 0u);
  onepass_generation_free(g);

  const std::vector<int32_t> long_prompt(21, 7);
  EXPECT_EQ(onepass_generation_start_tokens(h.model, long_prompt.data(), long_prompt.size(),
                                            &params, &g),
            ONEPASS_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(onepass_last_error()).find("more than the context of 20"),
            std::string::npos)
      << onepass_last_error();
  EXPECT_EQ(g, nullptr);
}

TEST_F(CApiRandomModel, SamplingIsSeededAndMatchesTheSampler) {
  Handle h{load(64)};
  ASSERT_NE(h.model, nullptr);
  const int32_t prompt[] = {10, 20, 30};
  onepass_sampling_params params = greedy(12);
  params.temperature = 0.9f;
  params.top_k = 50;
  params.top_p = 0.9f;
  params.seed = 1234;
  auto sample = [&] {
    onepass_generation* g = nullptr;
    EXPECT_EQ(onepass_generation_start_tokens(h.model, prompt, 3, &params, &g), ONEPASS_OK);
    Generated out = run_steps(g);
    onepass_generation_free(g);
    return out;
  };
  const Generated first = sample();
  EXPECT_EQ(sample().tokens, first.tokens);

  // The library's sampler over the library's logits, step by step.
  const auto source = model::open_model(file_);
  const model::Tokenizer tokenizer(*source->tokenizer_data());
  model::LoadOptions load;
  load.context = 64;
  model::LlamaModel llama(make_cpu_backend(), *source, load);
  model::Sampler sampler({.temperature = 0.9f, .top_k = 50, .top_p = 0.9f, .seed = 1234});
  std::vector<int32_t> expected;
  int32_t next = sampler.sample(llama.prefill(std::vector<int32_t>{10, 20, 30}));
  while (expected.size() < 12 && !tokenizer.is_end_of_generation(next)) {
    expected.push_back(next);
    if (expected.size() == 12) break;
    next = sampler.sample(llama.decode(next));
  }
  EXPECT_EQ(first.tokens, expected);

  params.seed = 99;
  EXPECT_NE(sample().tokens, first.tokens);

  params.top_p = 1.5f;
  onepass_generation* g = nullptr;
  EXPECT_EQ(onepass_generation_start_tokens(h.model, prompt, 3, &params, &g),
            ONEPASS_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(onepass_last_error()).find("top-p"), std::string::npos)
      << onepass_last_error();
  params.top_p = 0.9f;
  params.max_tokens = -1;
  EXPECT_EQ(onepass_generation_start_tokens(h.model, prompt, 3, &params, &g),
            ONEPASS_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(onepass_last_error()).find("max_tokens is -1"), std::string::npos);
}

TEST_F(CApiRandomModel, AGenerationOwnsTheCacheUntilAnotherStarts) {
  Handle h{load(64)};
  ASSERT_NE(h.model, nullptr);
  const int32_t prompt[] = {10, 20, 30};
  const onepass_sampling_params params = greedy(8);
  onepass_generation* first = nullptr;
  onepass_generation* second = nullptr;
  ASSERT_EQ(onepass_generation_start_tokens(h.model, prompt, 3, &params, &first), ONEPASS_OK);
  onepass_step step{};
  ASSERT_EQ(onepass_generation_next(first, &step), ONEPASS_OK);
  ASSERT_EQ(onepass_generation_start_tokens(h.model, prompt, 3, &params, &second), ONEPASS_OK);
  EXPECT_EQ(onepass_generation_next(first, &step), ONEPASS_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(onepass_last_error()).find("KV cache was taken"), std::string::npos)
      << onepass_last_error();
  onepass_generation_free(first);

  // The model may be freed before its generation: the generation keeps what it needs.
  onepass_model_free(h.model);
  h.model = nullptr;
  const Generated rest = run_steps(second);
  EXPECT_EQ(rest.tokens, reference_greedy(file_, {10, 20, 30}, 8, 64));
  onepass_generation_free(second);

  // max_tokens 0: the end at once, without running the model.
  Handle again{load(64)};
  const onepass_sampling_params none = greedy(0);
  ASSERT_EQ(onepass_generation_start_tokens(again.model, prompt, 3, &none, &first), ONEPASS_OK);
  const Generated empty = run_steps(first);
  EXPECT_TRUE(empty.tokens.empty());
  EXPECT_EQ(empty.stop, ONEPASS_STOP_MAX_TOKENS);
  onepass_generation_free(first);
}

/// The `length` floats of a logits handle, read from host memory (a CPU handle).
std::vector<float> host_values(const onepass_logits* logits) {
  onepass_logits_info info{};
  EXPECT_EQ(onepass_logits_get_info(logits, &info), ONEPASS_OK) << onepass_last_error();
  EXPECT_EQ(info.device_type, ONEPASS_DEVICE_CPU);
  return std::vector<float>(info.data, info.data + info.length);
}

TEST_F(CApiRandomModel, LogitsTensorHoldsTheEvaluatedLogits) {
  Handle h{load(64)};
  ASSERT_NE(h.model, nullptr);
  const int32_t prompt[] = {10, 20, 30};
  std::vector<float> expected(1024, NAN);
  ASSERT_EQ(onepass_eval_logits(h.model, prompt, 3, expected.data(), expected.size()), ONEPASS_OK)
      << onepass_last_error();

  onepass_logits* logits = nullptr;
  ASSERT_EQ(onepass_eval_logits_tensor(h.model, prompt, 3, &logits), ONEPASS_OK)
      << onepass_last_error();
  ASSERT_NE(logits, nullptr);
  onepass_logits_info info{};
  ASSERT_EQ(onepass_logits_get_info(logits, &info), ONEPASS_OK);
  EXPECT_EQ(info.length, 1024);
  EXPECT_EQ(info.device_type, ONEPASS_DEVICE_CPU);
  EXPECT_EQ(info.device_id, 0);
  ASSERT_NE(info.data, nullptr);
  EXPECT_EQ(host_values(logits), expected);

  // The handle owns its values: running the model again, and freeing it, leaves them be.
  const int32_t other[] = {7, 8};
  std::vector<float> other_logits(1024);
  ASSERT_EQ(onepass_eval_logits(h.model, other, 2, other_logits.data(), other_logits.size()),
            ONEPASS_OK);
  ASSERT_NE(other_logits, expected);
  onepass_generation* g = nullptr;
  const onepass_sampling_params params = greedy(4);
  ASSERT_EQ(onepass_generation_start_tokens(h.model, other, 2, &params, &g), ONEPASS_OK);
  run_steps(g);
  onepass_generation_free(g);
  onepass_model_free(h.model);
  h.model = nullptr;
  EXPECT_EQ(host_values(logits), expected);
  onepass_logits_free(logits);
}

TEST_F(CApiRandomModel, LogitsTensorRejectsBadArguments) {
  Handle h{load(64)};
  ASSERT_NE(h.model, nullptr);
  const int32_t prompt[] = {10, 20, 30};
  onepass_logits* logits = reinterpret_cast<onepass_logits*>(&h);  // must be reset to NULL
  EXPECT_EQ(onepass_eval_logits_tensor(nullptr, prompt, 3, &logits),
            ONEPASS_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(logits, nullptr);
  EXPECT_EQ(onepass_eval_logits_tensor(h.model, prompt, 3, nullptr),
            ONEPASS_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(onepass_last_error()).find("logits is NULL"), std::string::npos);
  EXPECT_EQ(onepass_eval_logits_tensor(h.model, prompt, 0, &logits),
            ONEPASS_ERROR_INVALID_ARGUMENT);
  const int32_t out_of_range[] = {10, 1024};
  EXPECT_EQ(onepass_eval_logits_tensor(h.model, out_of_range, 2, &logits),
            ONEPASS_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(logits, nullptr);
  onepass_logits_info info{};
  EXPECT_EQ(onepass_logits_get_info(nullptr, &info), ONEPASS_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(onepass_eval_logits_tensor(h.model, prompt, 3, &logits), ONEPASS_OK);
  EXPECT_EQ(onepass_logits_get_info(logits, nullptr), ONEPASS_ERROR_INVALID_ARGUMENT);
  onepass_logits_free(logits);
  onepass_logits_free(nullptr);
}

}  // namespace
}  // namespace onepass
