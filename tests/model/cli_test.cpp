// The `onepass` command-line tool, run as a process: help, generate, inspect, make-model,
// bench --json, and one-line errors on bad input. The binary is looked up next to this test
// binary (both are built into <build>/bin/); the tests skip when it was not built.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "onepass/core/error.h"
#include "onepass/model/gguf.h"
#include "support/testing.h"

namespace onepass {
namespace {

namespace fs = std::filesystem;

const char* kDefaultModel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

struct ToolRun {
  int status = -1;  // exit status
  std::string out;  // stdout
  std::string err;  // stderr
};

fs::path tool_path() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : self.parent_path() / "onepass";
}

std::string quote(const std::string& arg) {
  std::string out = "'";
  for (const char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tool_ = tool_path();
    if (tool_.empty() || !fs::exists(tool_)) {
      GTEST_SKIP() << "the onepass binary is not built next to this test (" << tool_
                   << "); build target onepass_tool";
    }
    dir_ = fs::temp_directory_path() / onepass::testing::test_temp_name("onepass_cli_");
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    if (!dir_.empty()) fs::remove_all(dir_, ignored);
  }

  // Runs the tool with `args`, capturing stdout and stderr separately; killed after
  // `timeout_s` seconds (exit status 124) when given. Standard input is empty.
  ToolRun run(const std::vector<std::string>& args, int timeout_s = 0) const {
    return run_with_input(args, "", timeout_s);
  }
  // The same with `input` on standard input (a file, not a terminal).
  ToolRun run_with_input(const std::vector<std::string>& args, const std::string& input,
                         int timeout_s = 0) const {
    const fs::path err_file = dir_ / "stderr.txt";
    const fs::path in_file = dir_ / "stdin.txt";
    std::ofstream(in_file, std::ios::binary) << input;
    std::string command = quote(tool_.string());
    if (timeout_s > 0) command = cat("timeout -s KILL ", timeout_s, " ", command);
    for (const std::string& a : args) {
      command += ' ';
      command += quote(a);
    }
    command += " <";
    command += quote(in_file.string());
    command += " 2>";
    command += quote(err_file.string());
    ToolRun r;
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) return r;
    char buffer[4096];
    size_t n;
    while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) r.out.append(buffer, n);
    const int status = ::pclose(pipe);
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream in(err_file);
    r.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    return r;
  }

  // A tiny random model made by the tool itself.
  fs::path make_tiny(const std::string& type = "q8_0", const std::vector<std::string>& extra = {}) const {
    const fs::path file = dir_ / cat("tiny_", type, extra.size(), ".gguf");
    std::vector<std::string> args = {"make-model", "--hidden", "64", "--ffn", "128", "--layers", "2",
                                     "--heads", "4", "--kv-heads", "2", "--vocab", "1024", "--type", type,
                                     "--seed", "3", "-o", file.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    const ToolRun r = run(args);
    EXPECT_EQ(r.status, 0) << r.err;
    return file;
  }

  fs::path tool_;
  fs::path dir_;
};

// Exactly one line on stderr, of the form "[where] what".
void expect_one_error_line(const ToolRun& r, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_NE(r.status, 0);
  std::string err = r.err;
  while (!err.empty() && err.back() == '\n') err.pop_back();
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  EXPECT_TRUE(std::regex_search(err, std::regex(R"(^\[[^\]]+\] \S)"))) << err;
}

TEST_F(CliTest, HelpOfEveryCommand) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--help"},
                                             {"generate", "--help"},
                                             {"chat", "--help"},
                                             {"profile", "--help"},
                                             {"bench", "--help"},
                                             {"inspect", "--help"},
                                             {"make-model", "--help"},
                                             {"perplexity", "--help"}}) {
    const ToolRun r = run(args);
    EXPECT_EQ(r.status, 0) << args[0] << ": " << r.err;
    EXPECT_NE(r.out.find("Usage:"), std::string::npos) << r.out;
  }
  EXPECT_NE(run({}).status, 0);  // a subcommand is required
  EXPECT_NE(run({"generate", "--no-such-option"}).status, 0);
}

TEST_F(CliTest, GenerateWithTheDefaultModel) {
  if (!fs::exists(kDefaultModel)) GTEST_SKIP() << kDefaultModel << " not installed (scripts/setup)";
  // The README's main job, with its defaults (greedy): a sensible continuation.
  const ToolRun r = run({"generate", "-p", "The capital of France is", "-n", "8", "--backend", "cpu"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::printf("[cli] generate: %s%s", r.out.c_str(), r.err.c_str());
  EXPECT_NE(r.out.find("Paris"), std::string::npos) << r.out;
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex(R"(prompt: \d+ tokens, [\d.]+ tok/s; generation: \d+ tokens, )")))
      << r.err;

  // Chat mode through the model's template answers the question.
  const ToolRun chat = run({"generate", "--chat", "-p", "What is the capital of France?", "-n",
                            "24", "--temp", "0", "--backend", "cpu"});
  ASSERT_EQ(chat.status, 0) << chat.err;
  EXPECT_NE(chat.out.find("Paris"), std::string::npos) << chat.out;
}

TEST_F(CliTest, GreedyGenerationFillsASmallContext) {
  if (!fs::exists(kDefaultModel)) GTEST_SKIP() << kDefaultModel << " not installed (scripts/setup)";
  // Greedy runs compute several tokens ahead of printing them; with a context smaller than
  // prompt + tokens, every position of the context still yields a printed token: the
  // prefill's, then one per decode step (ctx - prompt of them), as sampling prints.
  for (const std::vector<std::string>& mode : {std::vector<std::string>{}, std::vector<std::string>{"--temp", "0.5"}}) {
    std::vector<std::string> args = {"generate", "-p", "The capital of France is", "-n", "50", "--ctx", "20",
                                     "--backend", "cpu", "--seed", "1"};
    args.insert(args.end(), mode.begin(), mode.end());
    const ToolRun r = run(args);
    ASSERT_EQ(r.status, 0) << r.err;
    std::smatch prompt, stopped;
    ASSERT_TRUE(std::regex_search(r.err, prompt, std::regex(R"(prompt: (\d+) tokens)"))) << r.err;
    ASSERT_TRUE(std::regex_search(r.err, stopped, std::regex(R"(stopped after (\d+) tokens)"))) << r.err;
    EXPECT_EQ(std::stoi(stopped[1]), 20 - std::stoi(prompt[1]) + 1) << (mode.empty() ? "greedy" : "sampled") << "\n"
                                                                      << r.err;
  }
}

TEST_F(CliTest, InspectPrintsTensorsAndTotals) {
  const fs::path tiny = make_tiny();
  const ToolRun r = run({"inspect", tiny.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  const model::GgufFile f = model::GgufFile::open(tiny);
  EXPECT_NE(r.out.find(cat("tensors: ", f.tensors().size(), "\n")), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("general.architecture = \"llama\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("blk.1.ffn_down.weight"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(cat("file size: ")), std::string::npos) << r.out;

  if (fs::exists(kDefaultModel)) {
    const ToolRun d = run({"inspect", "--no-tensors", kDefaultModel});
    ASSERT_EQ(d.status, 0) << d.err;
    EXPECT_NE(
        d.out.find(cat("tensors: ", model::GgufFile::open(kDefaultModel).tensors().size(), "\n")),
        std::string::npos)
        << d.out;
    EXPECT_NE(d.out.find("tokenizer.ggml.tokens = [49152 x string"), std::string::npos) << d.out;
  }
}

// A minimal mlx-lm directory: config.json and one safetensors file with a quantised layer.
TEST_F(CliTest, InspectMlxDirectory) {
  const fs::path mlx = dir_ / "mlx";
  fs::create_directories(mlx);
  std::ofstream(mlx / "config.json")
      << R"({"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 1,
      "vocab_size": 64, "intermediate_size": 64, "num_attention_heads": 4,
      "quantization": {"group_size": 32, "bits": 4}})";
  struct Entry {
    const char* name;
    const char* dtype;
    std::vector<int64_t> shape;
    size_t bytes;
  };
  const std::vector<Entry> entries = {
      {"model.embed_tokens.weight", "F16", {64, 32}, 64 * 32 * 2},
      {"model.layers.0.self_attn.q_proj.weight", "U32", {32, 4}, 32 * 4 * 4},
      {"model.layers.0.self_attn.q_proj.scales", "F16", {32, 1}, 32 * 2},
      {"model.layers.0.self_attn.q_proj.biases", "F16", {32, 1}, 32 * 2},
      {"model.norm.weight", "F32", {32}, 32 * 4}};
  nlohmann::json header = nlohmann::json::object();
  size_t offset = 0;
  for (const Entry& e : entries) {
    header[e.name] = {
        {"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes}}};
    offset += e.bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  {
    std::ofstream out(mlx / "model.safetensors", std::ios::binary);
    const uint64_t length = text.size();
    out.write(reinterpret_cast<const char*>(&length), 8);
    out << text << std::string(offset, '\x11');
  }
  const ToolRun r = run({"inspect", mlx.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("format: MLX"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"hidden_size\": 32"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("quantization: affine 4-bit, group 32"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tensors: 5\n"), std::string::npos) << r.out;
  // 64 x 32 embedding + 32 x 32 quantised layer + 32 norm weights; scales and biases are storage.
  EXPECT_NE(r.out.find("parameters: 3,104 "), std::string::npos) << r.out;
}

TEST_F(CliTest, MakeModelThenGenerate) {
  const fs::path tiny = make_tiny("q4_0");
  ASSERT_TRUE(fs::exists(tiny));
  const ToolRun r = run({"generate", "-m", tiny.string(), "-p", "hello world", "-n", "6", "--seed",
                         "4", "--backend", "cpu"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(generation: \d+ tokens)"))) << r.err;
  // Same seed, same text.
  const ToolRun again = run({"generate", "-m", tiny.string(), "-p", "hello world", "-n", "6",
                             "--seed", "4", "--backend", "cpu"});
  EXPECT_EQ(again.out, r.out);
  // A prompt prefilled in chunks of 2 tokens (several recorded graphs) continues the same way.
  const ToolRun chunked = run({"generate", "-m", tiny.string(), "-p", "hello world", "-n", "6",
                               "--seed", "4", "--backend", "cpu", "--batch", "2"});
  ASSERT_EQ(chunked.status, 0) << chunked.err;
  EXPECT_EQ(chunked.out, r.out);

  // The dry run plans the same file size that was written.
  const ToolRun plan =
      run({"make-model", "--hidden", "64", "--ffn", "128", "--layers", "2", "--heads", "4",
           "--kv-heads", "2", "--vocab", "1024", "--type", "q4_0", "--seed", "3", "--dry-run"});
  ASSERT_EQ(plan.status, 0) << plan.err;
  std::string digits = std::to_string(fs::file_size(tiny));
  std::string grouped;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) grouped += ',';
    grouped += digits[i];
  }
  EXPECT_NE(plan.out.find("file size: " + grouped + " bytes"), std::string::npos) << plan.out;
}

// perplexity over a text file; its saved logits compared with the same run (KL 0, every
// top-1 the same) and with another weight type of the same model (KL small but not 0).
TEST_F(CliTest, PerplexityAndKlDivergenceAgainstASavedRun) {
  const fs::path f32 = make_tiny("f32"), q8 = make_tiny("q8_0");
  const fs::path text = dir_ / "text.txt", saved = dir_ / "f32.logits";
  {
    std::ofstream out(text);
    out << "the quick brown fox jumps over the lazy dog. a stitch in time saves nine. "
           "all that glitters is not gold, and every cloud has a silver lining.";
  }
  const ToolRun base = run({"perplexity", "-m", f32.string(), "-f", text.string(), "--ctx", "16", "--backend", "cpu",
                            "--save-logits", saved.string()});
  ASSERT_EQ(base.status, 0) << base.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(base.out, m, std::regex(R"(perplexity: ([0-9.]+) over (\d+) positions)"))) << base.out;
  EXPECT_GT(std::stod(m[1]), 1.0);
  const ToolRun same = run({"perplexity", "-m", f32.string(), "-f", text.string(), "--ctx", "16", "--backend", "cpu",
                            "--kl-base", saved.string()});
  ASSERT_EQ(same.status, 0) << same.err;
  EXPECT_NE(same.out.find("top-1 agreement: 100.00%"), std::string::npos) << same.out;
  ASSERT_TRUE(std::regex_search(same.out, m, std::regex(R"(mean KL divergence \(base \|\| this\): (\S+))")));
  EXPECT_LT(std::abs(std::stod(m[1])), 1e-12) << same.out;
  const ToolRun other = run({"perplexity", "-m", q8.string(), "-f", text.string(), "--ctx", "16", "--backend", "cpu",
                             "--kl-base", saved.string()});
  ASSERT_EQ(other.status, 0) << other.err;
  ASSERT_TRUE(std::regex_search(other.out, m, std::regex(R"(mean KL divergence \(base \|\| this\): (\S+))")));
  EXPECT_GT(std::stod(m[1]), 0.0) << other.out;
  EXPECT_LT(std::stod(m[1]), 0.05) << other.out;
  // Another window length scores other positions: refused, naming what differs.
  const ToolRun mismatch = run({"perplexity", "-m", f32.string(), "-f", text.string(), "--ctx", "8", "--backend",
                                "cpu", "--kl-base", saved.string()});
  expect_one_error_line(mismatch, "perplexity --kl-base of another --ctx");
  EXPECT_NE(mismatch.err.find("positions"), std::string::npos) << mismatch.err;
}

TEST_F(CliTest, BenchJson) {
  const fs::path tiny = make_tiny();
  const ToolRun r = run({"bench", "-m", tiny.string(), "--backend", "cpu", "--prefill", "16",
                         "--decode", "8", "--reps", "2", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << r.out;
  for (const char* key :
       {"model", "backend", "device", "prefill_tok_s", "decode_tok_s", "host_us_per_step",
        "dispatches_per_token", "dispatches_per_layer", "weight_bytes", "kv_bytes_per_token",
        "bytes_per_token", "copy_bandwidth_gb_s", "floor_tok_s", "floor_fraction"}) {
    EXPECT_TRUE(j.contains(key)) << key << " missing in " << r.out;
  }
  EXPECT_EQ(j["backend"], "cpu");
  EXPECT_EQ(j["prefill_tokens"], 16);
  EXPECT_EQ(j["decode_tokens"], 8);
  EXPECT_GT(j["prefill_tok_s"].get<double>(), 0.0);
  EXPECT_GT(j["decode_tok_s"].get<double>(), 0.0);
  EXPECT_GT(j["copy_bandwidth_gb_s"].get<double>(), 0.0);
  EXPECT_GT(j["dispatches_per_token"].get<int64_t>(), 0);
  EXPECT_EQ(j["bytes_per_token"].get<uint64_t>(),
            j["weight_bytes"].get<uint64_t>() + j["kv_bytes_per_token"].get<uint64_t>());
}

TEST_F(CliTest, BadInputIsOneErrorLine) {
  const fs::path tiny = make_tiny();
  const fs::path corrupt = dir_ / "corrupt.gguf";
  {
    std::ofstream out(corrupt, std::ios::binary);
    out << "GGUF\x03";  // a header cut short
    out << std::string(11, '\xff');
  }
  expect_one_error_line(run({"generate", "-m", (dir_ / "missing.gguf").string()}), "missing file");
  expect_one_error_line(run({"generate", "-m", tiny.string(), "--backend", "tpu"}),
                        "unknown backend");
  expect_one_error_line(run({"generate", "-m", tiny.string(), "-n", "-1"}), "-n -1");
  expect_one_error_line(run({"generate", "-m", corrupt.string()}), "corrupt file (generate)");
  expect_one_error_line(run({"inspect", corrupt.string()}), "corrupt file (inspect)");
  expect_one_error_line(run({"bench", "-m", corrupt.string()}), "corrupt file (bench)");
  expect_one_error_line(run({"make-model", "llama-70b", "-o", (dir_ / "x.gguf").string()}),
                        "unknown shape");
  expect_one_error_line(run({"make-model", "--hidden", "64", "--ffn", "128", "--layers", "1",
                             "--heads", "3", "--vocab", "1024", "-o", (dir_ / "y.gguf").string()}),
                        "heads do not divide hidden");
  expect_one_error_line(run({"make-model", "llama-1b", "--type", "iq2_xxs", "--dry-run"}),
                        "unknown type");
  expect_one_error_line(run({"generate", "-m", tiny.string(), "--top-p", "1.5"}), "bad top-p");
  expect_one_error_line(run({"generate", "-m", tiny.string(), "--batch", "0"}), "generate --batch 0");
  expect_one_error_line(run({"bench", "-m", tiny.string(), "--backend", "cpu", "--batch", "0"}),
                        "bench --batch 0");
  EXPECT_FALSE(fs::exists(dir_ / "x.gguf"));
  EXPECT_FALSE(fs::exists(dir_ / "y.gguf"));
}

// Usage errors: one "[where] what" line and exit status 1 (CLI11's own exit codes are
// 104-109); --help and --version still print and exit 0.
TEST_F(CliTest, UsageErrorsAreOneLineAndExitOne) {
  auto usage_error = [&](const std::vector<std::string>& args, const std::string& part) {
    const ToolRun r = run(args);
    SCOPED_TRACE(args.empty() ? std::string("(no arguments)") : args[0]);
    EXPECT_EQ(r.status, 1) << r.err;
    expect_one_error_line(r, part);
    EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
  };
  usage_error({"frobnicate"}, "[onepass] unknown command 'frobnicate' (commands: generate, chat, bench, ");
  usage_error({"generat", "-p", "x"}, "[onepass] unknown command 'generat'; did you mean 'generate'?");
  usage_error({"inspcet"}, "did you mean 'inspect'?");
  usage_error({}, "[onepass] a command is required (generate, chat, bench, profile, inspect, make-model, serve, perplexity)");
  usage_error({"chta"}, "did you mean 'chat'?");
  usage_error({"generate", "--frobnicate"}, "[generate] ");
  usage_error({"generate", "-n"}, "[generate] ");
  usage_error({"generate", "--top-k", "many"}, "[generate] ");
  // Out-of-range integers are rejected, not wrapped or saturated.
  usage_error({"generate", "-n", "99999999999999999999999"}, "value out of range");
  usage_error({"generate", "--seed", "-1"}, "not a non-negative decimal whole number");
  usage_error({"generate", "-n", "9223372036854775807"}, "[generate] -n/--tokens: value out of range");
  usage_error({"make-model", "--hidden", "99999999999999999999", "--dry-run"}, "value out of range");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--help"}, {"generate", "--help"}, {"--version"}}) {
    const ToolRun r = run(args);
    EXPECT_EQ(r.status, 0) << args[0] << ": " << r.err;
    EXPECT_FALSE(r.out.empty());
  }
}

// make-model's errors come from the library's shape, vocabulary and file checks; they speak as
// the command the user ran, not as the library function that found them.
TEST_F(CliTest, MakeModelErrorsNameTheCommand) {
  auto make = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"make-model", "--ffn", "128", "--layers", "1", "--heads", "4", "--type", "f16"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args, 120);
  };
  const std::string out = (dir_ / "m.gguf").string();
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{"--hidden", "64", "--vocab", "10", "-o", out}, "[make-model] vocab_size 10 is too small: need 256 byte tokens"},
           {{"--hidden", "64", "--vocab", "512", "--pre", "klingon", "-o", out}, "[make-model] unknown pre-tokenizer 'klingon'; supported: "},
           {{"--hidden", "64", "--vocab", "512", "--kv-heads", "3", "--dry-run"}, "[make-model] random-64x1: heads (4) must be a multiple of kv_heads (3)"},
           {{"--hidden", "66", "--vocab", "512", "--dry-run"}, "[make-model] hidden (66) must be a multiple of heads (4)"},
           {{"--hidden", "64", "--vocab", "512", "-o", (dir_ / "no" / "such" / "dir.gguf").string()}, "[make-model] cannot create '"}}) {
    const ToolRun r = make(c.args);
    SCOPED_TRACE(c.message);
    EXPECT_EQ(r.status, 1) << r.err;
    expect_one_error_line(r, c.message);
    EXPECT_EQ(r.err.rfind(c.message, 0), 0u) << r.err;
  }
  EXPECT_FALSE(fs::exists(out));
}

// Dimensions past the configuration bounds are refused before any size is computed.
TEST_F(CliTest, MakeModelDryRunRejectsHugeDimensions) {
  const ToolRun r = run({"make-model", "--hidden", "4294967296", "--ffn", "4294967296", "--layers",
                         "4294967296", "--heads", "1", "--vocab", "4294967296", "--dry-run"});
  EXPECT_EQ(r.status, 1);
  expect_one_error_line(r, "huge dimensions");
  EXPECT_NE(r.err.find("expected 1..16777216"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

// A FIFO given as the model: refused at once instead of blocking in open().
TEST_F(CliTest, SpecialFilesAreRefused) {
  const fs::path fifo = dir_ / "fifo.gguf";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"generate", "-m", fifo.string()}, {"inspect", fifo.string()},
        {"bench", "-m", fifo.string()}}) {
    const ToolRun r = run(args, 60);
    EXPECT_EQ(r.status, 1) << args[0] << " (124 or -1: it blocked)";
    expect_one_error_line(r, args[0]);
    EXPECT_NE(r.err.find("is a FIFO, expected a regular file"), std::string::npos) << r.err;
  }
}

// make-model -o replaces only a regular file (or creates one): never a FIFO, a directory, a
// symbolic link or a device node.
TEST_F(CliTest, MakeModelRefusesOutputsThatAreNotRegularFiles) {
  auto make = [&](const fs::path& out) {
    return run({"make-model", "--hidden", "64", "--ffn", "128", "--layers", "1", "--heads", "4",
                "--vocab", "512", "--type", "f16", "-o", out.string()},
               120);
  };
  const fs::path fifo = dir_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ToolRun r = make(fifo);
  EXPECT_EQ(r.status, 1);
  expect_one_error_line(r, "FIFO output");
  EXPECT_NE(r.err.find("exists and is a FIFO"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_FALSE(fs::exists(dir_ / "fifo.partial"));

  fs::create_directory(dir_ / "dir");
  r = make(dir_ / "dir");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("exists and is a directory"), std::string::npos) << r.err;

  {
    std::ofstream target(dir_ / "target");
    target << "keep";
  }
  fs::create_symlink(dir_ / "target", dir_ / "link");
  r = make(dir_ / "link");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("exists and is a symbolic link"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_symlink(dir_ / "link"));
  EXPECT_EQ(fs::file_size(dir_ / "target"), 4u);

  r = make("/dev/null");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("'/dev/null' exists and is a character device"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_character_file("/dev/null"));

  // A regular file is replaced.
  {
    std::ofstream old(dir_ / "old.gguf");
    old << "old";
  }
  r = make(dir_ / "old.gguf");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_GT(fs::file_size(dir_ / "old.gguf"), 3u);
}

// inspect lists any GGUF file: tensors of types onepass does not compute with (a known
// GGML type, iq2_xxs, and an id it does not know, 99) are named and marked unsupported.
TEST_F(CliTest, InspectListsUnsupportedTensorTypes) {
  const fs::path file = dir_ / "types.gguf";
  const std::vector<float> values(256, 1.0f);
  {
    model::GgufWriter w(file);
    w.set_string("general.architecture", "llama");
    for (const char* name : {"tensor_iq2", "tensor_t99", "tensor_f32"}) {
      w.add_tensor(name, DType::f32, Shape{256});
    }
    for (const char* name : {"tensor_iq2", "tensor_t99", "tensor_f32"}) {
      w.write_tensor(name, values.data(), values.size() * 4);
    }
    w.finish();
  }
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  // Each tensor info: name, n_dims (1), one dimension, then the type (f32 = 0).
  for (const auto& [name, type] : {std::pair<std::string, uint32_t>{"tensor_iq2", 16}, {"tensor_t99", 99}}) {
    const size_t at = bytes.find(name) + name.size() + 4 + 8;
    ASSERT_EQ(bytes.compare(at, 4, std::string(4, '\0')), 0);
    std::memcpy(&bytes[at], &type, 4);
  }
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  const ToolRun r = run({"inspect", file.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("tensor_iq2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("iq2_xxs (unsupported)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("type 99 (unsupported)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tensors: 3\n"), std::string::npos) << r.out;
}

// inspect prints what the file says with control characters escaped: a metadata key, a
// string value or a tensor name cannot clear the screen or set the window title.
TEST_F(CliTest, InspectEscapesControlCharacters) {
  const fs::path file = dir_ / "escapes.gguf";
  {
    model::GgufWriter w(file);
    w.set_string("general.architecture", "llama");
    w.set_string("evil\x1b]0;owned\x07.key", "value \x1b[2J\xc2\x9b" "31m caf\xc3\xa9");
    w.add_tensor("tensor\x1b[2J\r", DType::f32, Shape{2});
    const float values[2] = {1, 2};
    w.write_tensor("tensor\x1b[2J\r", values, 8);
    w.finish();
  }
  const ToolRun r = run({"inspect", file.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\x07'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\r'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\xc2\x9b"), std::string::npos) << r.out;  // C1 CSI in UTF-8
  EXPECT_NE(r.out.find("evil\\x1b]0;owned\\x07.key"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tensor\\x1b[2J\\x0d"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\\xc2\\x9b31m caf\xc3\xa9"), std::string::npos) << r.out;  // é is kept
}

// llama-cli's prompt sources: -p TEXT, -p - (standard input), -f FILE and -f - give the model
// the same prompt (one trailing newline of a file or a pipe is no part of it).
TEST_F(CliTest, PromptFromStandardInputAndFiles) {
  const fs::path tiny = make_tiny();
  const std::vector<std::string> common = {"generate", "-m", tiny.string(), "-n", "8", "--backend", "cpu"};
  auto generate = [&](std::vector<std::string> extra, const std::string& input = "") {
    std::vector<std::string> args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    const ToolRun r = run_with_input(args, input);
    EXPECT_EQ(r.status, 0) << r.err;
    return r.out;
  };
  const std::string direct = generate({"-p", "hello world"});
  ASSERT_FALSE(direct.empty());
  EXPECT_NE(generate({"-p", "-"}), direct);  // the literal prompt "-" differs
  EXPECT_EQ(generate({"-p", "-"}, "hello world\n"), direct);
  const fs::path file = dir_ / "prompt.txt";
  std::ofstream(file) << "hello world\n";
  EXPECT_EQ(generate({"-f", file.string()}), direct);
  EXPECT_EQ(generate({"-f", "-"}, "hello world"), direct);
  // -p and -f together, and a missing file, are usage errors.
  ToolRun both = run({"generate", "-m", tiny.string(), "-p", "x", "-f", file.string()});
  EXPECT_EQ(both.status, 1);
  expect_one_error_line(both, "-p with -f");
  ToolRun missing = run({"generate", "-m", tiny.string(), "-f", (dir_ / "none.txt").string()});
  EXPECT_EQ(missing.status, 1);
  expect_one_error_line(missing, "missing prompt file");
  EXPECT_NE(missing.err.find("-f/--file: cannot read"), std::string::npos) << missing.err;
}

// -c, -t, -s and --n-predict are the long options' short forms: the same run either way.
TEST_F(CliTest, ShortOptionsOfLlamaCli) {
  const fs::path tiny = make_tiny();
  const ToolRun a = run({"generate", "-m", tiny.string(), "-p", "hello", "-n", "6", "-c", "32", "-t", "1",
                         "-s", "7", "--temp", "0.8", "--backend", "cpu", "-v"});
  ASSERT_EQ(a.status, 0) << a.err;
  const ToolRun b = run({"generate", "-m", tiny.string(), "-p", "hello", "--n-predict", "6", "--ctx", "32",
                         "--threads", "1", "--seed", "7", "--temp", "0.8", "--backend", "cpu", "-v"});
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.err.find("context 32 tokens"), std::string::npos) << a.err;
  EXPECT_NE(a.err.find("(1 threads)"), std::string::npos) << a.err;
  EXPECT_NE(a.err.find("seed 7"), std::string::npos) << a.err;
}

// Every command that runs a model takes -t/--threads and checks it.
TEST_F(CliTest, ThreadsOnEveryModelCommand) {
  const fs::path tiny = make_tiny();
  for (const std::string command : {"generate", "chat", "bench", "profile"}) {
    SCOPED_TRACE(command);
    const ToolRun r = run({command, "-m", tiny.string(), "--backend", "cpu", "-t", "2000"});
    EXPECT_EQ(r.status, 1);
    expect_one_error_line(r, command);
    EXPECT_NE(r.err.find("-t/--threads: expected"), std::string::npos) << r.err;
  }
  const ToolRun bench = run({"bench", "-m", tiny.string(), "--backend", "cpu", "-p", "4", "-n", "2", "-r", "1",
                             "-t", "1", "--json"});
  ASSERT_EQ(bench.status, 0) << bench.err;
  EXPECT_EQ(nlohmann::json::parse(bench.out)["threads"], 1);
  const ToolRun profile = run({"profile", "-m", tiny.string(), "--backend", "cpu", "--prompt", "4", "--decode",
                               "1", "-t", "1"});
  ASSERT_EQ(profile.status, 0) << profile.err;
  EXPECT_NE(profile.out.find("cpu (1 threads)"), std::string::npos) << profile.out;
}

// Values out of range are refused with the option's name and exit status 1, before any
// model is loaded.
TEST_F(CliTest, InvalidSamplingValuesAreRefused) {
  const fs::path tiny = make_tiny();
  auto refused = [&](std::vector<std::string> args, const std::string& part) {
    const ToolRun r = run(args);
    SCOPED_TRACE(part);
    EXPECT_EQ(r.status, 1) << r.err;
    expect_one_error_line(r, part);
    EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
  };
  const std::string m = tiny.string();
  refused({"generate", "-m", m, "--temp", "-1"}, "[generate] --temp: expected a number >= 0");
  refused({"generate", "-m", m, "--temp", "nan"}, "[generate] --temp: expected a number >= 0");
  refused({"generate", "-m", m, "--top-p", "2"}, "[generate] --top-p: expected a number in (0, 1], got 2");
  refused({"generate", "-m", m, "--top-k", "-3"}, "[generate] --top-k: expected");
  refused({"generate", "-m", m, "--min-p", "1.5"}, "[generate] --min-p: expected a number in [0, 1]");
  refused({"generate", "-m", m, "--repeat-penalty", "0"}, "[generate] --repeat-penalty: expected a number above 0");
  refused({"generate", "-m", m, "--repeat-last-n", "-1"}, "[generate] --repeat-last-n: expected");
  refused({"generate", "-m", m, "--presence-penalty", "3"}, "[generate] --presence-penalty: expected a number in [-2, 2]");
  refused({"generate", "-m", m, "--frequency-penalty", "nan"}, "[generate] --frequency-penalty: expected");
  refused({"generate", "-m", m, "--stop", ""}, "[generate] --stop: the stop string is empty");
  refused({"chat", "-m", m, "--top-p", "0"}, "[chat] --top-p: expected");
  refused({"bench", "-m", m, "-p", "0"}, "[bench] -p/--prefill: expected a comma-separated list");
  refused({"bench", "-m", m, "-n", "8,x"}, "[bench] -n/--decode: expected a comma-separated list");
  refused({"bench", "-m", m, "-t", "1,,2"}, "[bench] -t/--threads: expected a comma-separated list");
  refused({"bench", "-m", m, "-o", "html"}, "[bench] -o/--output: expected text, md or json");
}

// Generation ends before a stop string is printed, also when the string ends inside a
// token or begins in one token and ends in another; any of several strings stops it.
TEST_F(CliTest, StopStrings) {
  if (!fs::exists(kDefaultModel)) GTEST_SKIP() << kDefaultModel << " not installed (scripts/setup)";
  const std::vector<std::string> base = {"generate", "-p", "The capital of France is", "-n", "12", "--backend", "cpu"};
  auto generate = [&](std::vector<std::string> stops) {
    std::vector<std::string> args = base;
    for (const std::string& s : stops) {
      args.push_back("--stop");
      args.push_back(s);
    }
    const ToolRun r = run(args);
    EXPECT_EQ(r.status, 0) << r.err;
    return r.out;
  };
  const std::string full = generate({});
  ASSERT_EQ(full.rfind(" Paris.", 0), 0u) << full;  // the continuation the stops cut
  EXPECT_EQ(generate({"."}), " Paris\n");
  EXPECT_EQ(generate({"aris"}), " P\n");        // inside a token
  EXPECT_EQ(generate({"s.\n"}), " Pari\n");     // across tokens
  EXPECT_EQ(generate({"never", "."}), " Paris\n");
  EXPECT_EQ(generate({"never printed"}), full);  // held-back text is printed at the end
}

// Greedy decoding of the default model loops on this prompt; a repetition penalty breaks
// the loop (decoded on the host, since the penalty depends on the tokens seen).
TEST_F(CliTest, RepeatPenaltyBreaksAGreedyLoop) {
  if (!fs::exists(kDefaultModel)) GTEST_SKIP() << kDefaultModel << " not installed (scripts/setup)";
  const std::vector<std::string> args = {"generate", "-p", "I like cats.", "-n", "48", "--backend", "cpu"};
  const ToolRun plain = run(args);
  ASSERT_EQ(plain.status, 0) << plain.err;
  auto count = [](const std::string& text, const std::string& part) {
    size_t n = 0;
    for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
    return n;
  };
  ASSERT_GE(count(plain.out, "I'm a cat."), 5u) << plain.out;
  std::vector<std::string> penalised = args;
  penalised.insert(penalised.end(), {"--repeat-penalty", "1.3"});
  const ToolRun r = run(penalised);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out, plain.out);
  EXPECT_LE(count(r.out, "I'm a cat."), 1u) << r.out;
  // The presence and frequency penalties (subtracted from the logits of tokens seen) break it too.
  for (const char* option : {"--presence-penalty", "--frequency-penalty"}) {
    std::vector<std::string> with = args;
    with.insert(with.end(), {option, "1.5"});
    const ToolRun p = run(with);
    ASSERT_EQ(p.status, 0) << option << ": " << p.err;
    EXPECT_LE(count(p.out, "I'm a cat."), 2u) << option << ": " << p.out;
  }
}

// A prompt and -n past the model's training context: a warning on stderr, and the run
// goes on.
TEST_F(CliTest, WarnsPastTheTrainingContext) {
  const fs::path tiny = make_tiny("q8_0", {"--context", "16"});
  const ToolRun past = run({"generate", "-m", tiny.string(), "-p", "hello world", "-n", "20", "--backend", "cpu"});
  ASSERT_EQ(past.status, 0) << past.err;
  EXPECT_NE(past.err.find("[generate] warning: the prompt ("), std::string::npos) << past.err;
  EXPECT_NE(past.err.find("past the model's training context of 16"), std::string::npos) << past.err;
  const ToolRun chat = run_with_input({"chat", "-m", tiny.string(), "-n", "4", "-c", "64", "--backend", "cpu"}, "hi\n");
  ASSERT_EQ(chat.status, 0) << chat.err;
  EXPECT_NE(chat.err.find("[chat] warning: the context of 64 tokens (-c) is past the model's training context of 16"),
            std::string::npos)
      << chat.err;
  const ToolRun within = run({"generate", "-m", tiny.string(), "-p", "hello world", "-n", "2", "--backend", "cpu"});
  ASSERT_EQ(within.status, 0) << within.err;
  EXPECT_EQ(within.err.find("warning"), std::string::npos) << within.err;
}

// onepass chat on a pipe: one message per line, each answer on stdout; the history is
// kept (the second answer uses the first message), /reset forgets it, end of input quits
// with status 0. The first answer is generate --chat's.
TEST_F(CliTest, ChatKeepsHistoryUntilReset) {
  if (!fs::exists(kDefaultModel)) GTEST_SKIP() << kDefaultModel << " not installed (scripts/setup)";
  const ToolRun r = run_with_input({"chat", "-n", "40", "--backend", "cpu"},
                                   "My name is Zorblax. Remember it.\nWhat is my name?\n/reset\nWhat is my name?\n",
                                   600);
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> answers;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) answers.push_back(line);
  }
  ASSERT_EQ(answers.size(), 3u) << r.out;
  EXPECT_NE(answers[1].find("Zorblax"), std::string::npos) << r.out;
  EXPECT_EQ(answers[2].find("Zorblax"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("[chat] history cleared"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("> "), std::string::npos) << "no prompt on a pipe: " << r.err;

  const ToolRun once = run({"generate", "--chat", "-p", "My name is Zorblax. Remember it.", "-n", "40",
                            "--backend", "cpu"});
  ASSERT_EQ(once.status, 0) << once.err;
  std::string first = once.out;
  while (!first.empty() && first.back() == '\n') first.pop_back();
  EXPECT_EQ(first, answers[0]);

  // End of input at once: no answer, status 0.
  const ToolRun empty = run_with_input({"chat", "-m", make_tiny().string(), "--backend", "cpu"}, "");
  EXPECT_EQ(empty.status, 0) << empty.err;
  EXPECT_TRUE(empty.out.empty()) << empty.out;
}

// bench runs every combination of its comma lists, reports mean ± stddev and the median
// of the reps, the build, the CPU and its ISA path, and the floor from the measured
// memory read bandwidth.
TEST_F(CliTest, BenchConfigurationsAndStatistics) {
  const fs::path tiny = make_tiny();
  const ToolRun r = run({"bench", "-m", tiny.string(), "--backend", "cpu", "-p", "8,16", "-n", "4", "-t", "1,2",
                         "-r", "3", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << r.out;
  EXPECT_FALSE(j["build"]["version"].get<std::string>().empty());
  EXPECT_FALSE(j["build"]["commit"].get<std::string>().empty());
  std::string cpu_model;
  {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("model name", 0) == 0) {
        cpu_model = line.substr(line.find(':') + 2);
        break;
      }
    }
  }
  if (!cpu_model.empty()) {
    EXPECT_EQ(j["cpu_model"], cpu_model);
  }
  EXPECT_FALSE(j["isa"].get<std::string>().empty());
  ASSERT_EQ(j["results"].size(), 4u) << r.out;
  std::set<std::pair<int, int>> combinations;
  for (const nlohmann::json& row : j["results"]) {
    combinations.insert({row["threads"].get<int>(), row["prefill_tokens"].get<int>()});
    EXPECT_EQ(row["decode_tokens"], 4);
    const std::vector<double> runs = row["decode_tok_s_runs"].get<std::vector<double>>();
    ASSERT_EQ(runs.size(), 3u);
    double mean = 0;
    for (const double v : runs) mean += v / 3.0;
    double squares = 0;
    for (const double v : runs) squares += (v - mean) * (v - mean);
    std::vector<double> sorted = runs;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_NEAR(row["decode_tok_s_mean"].get<double>(), mean, 1e-9 * mean);
    EXPECT_NEAR(row["decode_tok_s_stddev"].get<double>(), std::sqrt(squares / 2.0), 1e-9 * mean);
    EXPECT_DOUBLE_EQ(row["decode_tok_s"].get<double>(), sorted[1]);
    EXPECT_GT(row["read_bandwidth_gb_s"].get<double>(), 0.0);
    EXPECT_NEAR(row["read_floor_tok_s"].get<double>(),
                row["read_bandwidth_gb_s"].get<double>() * 1e9 / row["bytes_per_token"].get<double>(),
                1e-6 * row["read_floor_tok_s"].get<double>());
  }
  EXPECT_EQ(combinations, (std::set<std::pair<int, int>>{{1, 8}, {1, 16}, {2, 8}, {2, 16}}));
  EXPECT_FALSE(j.contains("decode_tok_s")) << "several configurations: no top-level row";

  // The text output names the build and the CPU; -o md is a markdown table, a row per test.
  const ToolRun text = run({"bench", "-m", tiny.string(), "--backend", "cpu", "-p", "8", "-n", "4", "-r", "2"});
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("build:    onepass "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("cpu:      " + cpu_model), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("memory read "), std::string::npos) << text.out;
  const ToolRun md = run({"bench", "-m", tiny.string(), "--backend", "cpu", "-p", "8", "-n", "4,6", "-r", "2",
                          "-o", "md"});
  ASSERT_EQ(md.status, 0) << md.err;
  EXPECT_NE(md.out.find("| model | size | backend | threads | test | t/s (mean ± sd) |"), std::string::npos)
      << md.out;
  EXPECT_NE(md.out.find("| --- |"), std::string::npos) << md.out;
  size_t rows = 0;
  for (const std::string test : {"| pp8 |", "| tg4 |", "| tg6 |"}) {
    for (size_t at = md.out.find(test); at != std::string::npos; at = md.out.find(test, at + 1)) ++rows;
  }
  EXPECT_EQ(rows, 4u) << md.out;  // pp8 twice (one per -n), tg4, tg6
}

// The PNG's width and height (from its IHDR chunk).
std::pair<uint32_t, uint32_t> png_size(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  unsigned char header[24] = {};
  in.read(reinterpret_cast<char*>(header), 24);
  auto be32 = [&](int at) {
    return (uint32_t{header[at]} << 24) | (uint32_t{header[at + 1]} << 16) | (uint32_t{header[at + 2]} << 8) |
           uint32_t{header[at + 3]};
  };
  return {be32(16), be32(20)};
}

// profile --dot groups a decode step's dispatches into a cluster per layer (plus input and
// output), so that it renders as a picture of rows of layers, not one long chain.
// profile --parallel B times the batched step of B sequences: a row per kernel kind,
// including the paged attention the single-sequence step does not have.
TEST_F(CliTest, ProfileOfABatchedStep) {
  const fs::path tiny = make_tiny();
  const ToolRun r = run({"profile", "-m", tiny.string(), "--backend", "cpu", "--prompt", "4", "--decode", "2",
                         "--parallel", "3", "--group", "op"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("decode step of 3 sequences"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("attention"), std::string::npos) << r.out;
  const ToolRun bad = run({"profile", "-m", tiny.string(), "--backend", "cpu", "--parallel", "0"});
  EXPECT_EQ(bad.status, 1) << bad.out;
}

TEST_F(CliTest, ProfileDotHasAClusterPerLayer) {
  const fs::path tiny = make_tiny();
  const fs::path dot = dir_ / "step.dot";
  const ToolRun r = run({"profile", "-m", tiny.string(), "--backend", "cpu", "--prompt", "4", "--decode", "1",
                         "--dot", dot.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  std::ifstream in(dot);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t clusters = 0;
  for (size_t at = text.find("subgraph cluster_"); at != std::string::npos; at = text.find("subgraph cluster_", at + 1))
    ++clusters;
  EXPECT_EQ(clusters, 4u) << text;  // input, layer 0, layer 1, output
  EXPECT_NE(text.find("label=\"layer 1\""), std::string::npos) << text;
  if (std::system("command -v dot >/dev/null 2>&1") != 0) GTEST_SKIP() << "graphviz dot not installed";
  EXPECT_EQ(std::system(cat("dot -Tsvg ", quote(dot.string()), " -o ", quote((dir_ / "step.svg").string())).c_str()), 0);

  // The default model's step (30 layers, ~180 dispatches) renders at a readable size.
  if (!fs::exists(kDefaultModel)) return;
  const fs::path big = dir_ / "default.dot";
  const ToolRun d = run({"profile", "--backend", "cpu", "--prompt", "4", "--decode", "1", "--dot", big.string()});
  ASSERT_EQ(d.status, 0) << d.err;
  const fs::path png = dir_ / "default.png";
  ASSERT_EQ(std::system(cat("dot -Tpng ", quote(big.string()), " -o ", quote(png.string())).c_str()), 0);
  const auto [width, height] = png_size(png);
  std::printf("[cli] default model decode step: %u x %u PNG\n", width, height);
  EXPECT_LT(width, 6000u);
  EXPECT_LT(height, 6000u);
  EXPECT_GT(width, 0u);
}

}  // namespace
}  // namespace onepass
