// The real Gemma 3 270M file (scripts/fetch-model gemma3-270m, into models/) under teacher
// forcing: onepass's logits at every position of a short English text, through the prefill
// path and through decode steps, against an independent float64 reference
// (tests/tools/gemma3_reference.py: gguf-py dequantizes the weights, numpy runs the forward
// pass). Skipped when the file or gguf-py / numpy is absent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include <unistd.h>

#include "onepass/core/error.h"
#include "onepass/model/llama.h"
#include "onepass/model/loader.h"
#include "onepass/model/sampler.h"
#include "support/testing.h"

namespace onepass::model {
namespace {

const char* kGemmaModel = "models/gemma-3-270m-q4_k_m.gguf";

// Plain expository English, long enough for ~200 positions (a top-1 rate of 99.5% allows
// one disagreement), short enough for the float64 reference to finish in seconds.
const char* kText =
    "The river rises in the hills to the north of the town and flows south for about forty miles "
    "before it reaches the sea. For most of the year it is slow and shallow, and children wade "
    "across it in the summer to reach the woods on the far bank. In the spring, when the snow melts "
    "on the hills, the water rises quickly and the old stone bridge in the center of the town is "
    "sometimes closed for a few days. The bridge was built more than three hundred years ago, and "
    "it has survived many floods. Farmers use the water from the river to irrigate their fields, "
    "and a small mill near the bridge still grinds wheat into flour, although it is now mostly a "
    "museum. Every year in September the town holds a festival on the river banks, with music, "
    "boats decorated with flowers, and a race between teams who paddle wooden canoes from the mill "
    "to the harbor. Visitors come from all over the region to watch, and the cafes along the water "
    "stay open late into the night.";

// Next to this source (when __FILE__ is absolute or the test runs from the build folder),
// else from the repository root, where ctest runs the model tests.
std::filesystem::path tool_path() {
  const auto beside = std::filesystem::path(__FILE__).parent_path().parent_path() / "tools" / "gemma3_reference.py";
  return std::filesystem::exists(beside) ? beside : std::filesystem::path("tests/tools/gemma3_reference.py");
}

int run_command(const std::string& command, std::string* output = nullptr) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  std::string text;
  char chunk[256];
  while (size_t got = std::fread(chunk, 1, sizeof(chunk), pipe)) text.append(chunk, got);
  const int status = pclose(pipe);
  if (output) *output = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Log-softmax of one row, in double.
std::vector<double> log_softmax(std::span<const float> row) {
  double max = -INFINITY;
  for (float v : row) max = std::max(max, static_cast<double>(v));
  double sum = 0;
  for (float v : row) sum += std::exp(static_cast<double>(v) - max);
  const double log_sum = max + std::log(sum);
  std::vector<double> out(row.size());
  for (size_t i = 0; i < row.size(); ++i) out[i] = static_cast<double>(row[i]) - log_sum;
  return out;
}

// The tokens of kText and the float64 reference's logits after each of them, computed
// once per process (the reference takes tens of seconds); empty tokens with `skip` set
// when the file or the tools are missing.
struct Reference {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // [tokens, vocab]
  size_t vocab = 0;
  std::string skip;
};

const Reference& reference() {
  static const Reference r = [] {
    Reference out;
    if (!std::filesystem::exists(kGemmaModel)) {
      out.skip = cat(kGemmaModel, " not installed (scripts/fetch-model)");
      return out;
    }
    if (run_command("python3 '" + tool_path().string() + "' check") != 0) {
      out.skip = "gguf-py or numpy missing";
      return out;
    }
    auto src = open_model(kGemmaModel);
    Tokenizer tok(*src->tokenizer_data());
    out.tokens = tok.encode(kText);
    out.vocab = static_cast<size_t>(src->config().vocab_size);
    const auto dir = std::filesystem::temp_directory_path() / cat("onepass_gemma_", ::getpid());
    std::filesystem::create_directories(dir);
    const auto ids_path = dir / "tokens.bin", logits_path = dir / "logits.bin";
    {
      std::ofstream ids(ids_path, std::ios::binary);
      ids.write(reinterpret_cast<const char*>(out.tokens.data()), static_cast<std::streamsize>(out.tokens.size() * 4));
    }
    std::string log;
    const int rc = run_command(cat("python3 '", tool_path().string(), "' logits '", kGemmaModel, "' '",
                                   ids_path.string(), "' '", logits_path.string(), "'"),
                               &log);
    check(rc == 0, "gemma reference", log);
    out.logits.resize(out.tokens.size() * out.vocab);
    std::ifstream in(logits_path, std::ios::binary);
    in.read(reinterpret_cast<char*>(out.logits.data()), static_cast<std::streamsize>(out.logits.size() * 4));
    check(static_cast<size_t>(in.gcount()) == out.logits.size() * 4, "gemma reference", "short reference output");
    std::filesystem::remove_all(dir);
    return out;
  }();
  return r;
}

// onepass's logits after every token (`got`, [tokens, vocab]) against the reference's:
// top-1 agreement of at least 99.5% and a mean KL(reference || onepass) of at most 1e-4.
void expect_agreement(const Reference& r, std::span<const float> got, const char* path) {
  double kl_sum = 0;
  size_t agree = 0;
  for (size_t t = 0; t < r.tokens.size(); ++t) {
    const auto ref = log_softmax(std::span(r.logits).subspan(t * r.vocab, r.vocab));
    const auto ours = log_softmax(got.subspan(t * r.vocab, r.vocab));
    double kl = 0;
    for (size_t i = 0; i < r.vocab; ++i) kl += std::exp(ref[i]) * (ref[i] - ours[i]);
    kl_sum += kl;
    const auto top_ref = std::max_element(ref.begin(), ref.end()) - ref.begin();
    const auto top_ours = std::max_element(ours.begin(), ours.end()) - ours.begin();
    agree += top_ref == top_ours ? 1 : 0;
  }
  const double mean_kl = kl_sum / static_cast<double>(r.tokens.size());
  const double top1 = static_cast<double>(agree) / static_cast<double>(r.tokens.size());
  std::printf("gemma3 270m, %s, %zu positions: top-1 agreement %.4f, mean KL %.3g\n", path, r.tokens.size(), top1,
              mean_kl);
  EXPECT_GE(top1, 0.995);
  EXPECT_LE(mean_kl, 1e-4);
}

// All positions through evaluate(): the prefill path (matrix-matrix products).
TEST(GemmaRealModel, TeacherForcedLogitsMatchTheFloat64Reference) {
  const Reference& r = reference();
  if (!r.skip.empty()) GTEST_SKIP() << r.skip;
  auto src = open_model(kGemmaModel);
  ASSERT_EQ(src->config().architecture, "gemma3");
  Tokenizer tok(*src->tokenizer_data());
  ASSERT_GE(r.tokens.size(), 200u);
  ASSERT_EQ(r.tokens.front(), tok.bos_id());
  auto backend = testing::cpu_backend(Options::defaults());
  LlamaModel model(backend, *src, LoadOptions{.context = 512});
  expect_agreement(r, model.evaluate(r.tokens), "evaluate");
}

// One token at a time through decode(): the decode path (the matrix-vector products of one
// row of x, which round x to 16-bit integers on the SIMD instruction sets).
TEST(GemmaRealModel, DecodeStepsMatchTheFloat64Reference) {
  const Reference& r = reference();
  if (!r.skip.empty()) GTEST_SKIP() << r.skip;
  auto src = open_model(kGemmaModel);
  auto backend = testing::cpu_backend(Options::defaults());
  LlamaModel model(backend, *src, LoadOptions{.context = 512});
  std::vector<float> got(r.tokens.size() * r.vocab);
  for (size_t t = 0; t < r.tokens.size(); ++t) {
    const std::span<const float> logits = model.decode(r.tokens[t]);
    ASSERT_EQ(logits.size(), r.vocab);
    std::copy(logits.begin(), logits.end(), got.begin() + static_cast<std::ptrdiff_t>(t * r.vocab));
  }
  expect_agreement(r, got, "decode");
}

}  // namespace
}  // namespace onepass::model
