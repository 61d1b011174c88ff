// Tokenizer tests. Byte-level BPE is checked id for id against the PyPI `tokenizers`
// library (tests/tools/tokenizer_reference.py) on the SmolLM2 GGUF vocabulary when the model
// is installed, and on synthesized vocabularies for every supported pre-tokenizer;
// SentencePiece against hand-computed ids.
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <unordered_map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "onepass/core/error.h"
#include "onepass/model/chat.h"
#include "onepass/model/tokenizer.h"

namespace onepass {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// CPU time of the calling thread in milliseconds: the speed checks below measure the work
// itself, whatever else shares the machine (wall time is several times longer under ctest -j
// on a loaded one).
double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

// ---------------------------------------------------------------------------------------
// The Python reference

fs::path source_root() {
  // tests/model/tokenizer_test.cpp -> the repository root; the working directory otherwise.
  const fs::path from_file = fs::path(__FILE__).parent_path().parent_path().parent_path();
  if (fs::exists(from_file / "tests/tools/tokenizer_reference.py")) return from_file;
  return fs::current_path();
}

fs::path reference_script() {
  return source_root() / "tests/tools/tokenizer_reference.py";
}

fs::path smollm2_path() {
  return source_root() / "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// A scratch directory removed with the object.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "onepass_tok_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw Error("test", "mkdtemp failed");
    path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

// Why the reference could not run, empty when it did.
struct ReferenceRun {
  bool skipped = false;
  std::string message;
};

// Runs the reference script; a missing python3 or package is a skip, anything else a failure.
ReferenceRun run_reference(const std::vector<std::string>& args, const fs::path& log) {
  if (!fs::exists(reference_script()))
    return {true, "tests/tools/tokenizer_reference.py not found"};
  if (std::system("python3 -c 'import sys' > /dev/null 2>&1") != 0)
    return {true, "python3 is not available"};
  std::string command = "python3 '" + reference_script().string() + "'";
  for (const std::string& arg : args) command += " '" + arg + "'";
  command += " > '" + log.string() + "' 2>&1";
  const int status = std::system(command.c_str());
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 0) return {};
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (code == 3) return {true, text};
  return {false, "reference script failed (exit " + std::to_string(code) + "): " + text};
}

Json to_json(const model::TokenizerData& data) {
  Json j;
  j["model"] = data.model;
  j["pre"] = data.pre;
  j["tokens"] = data.tokens;
  j["scores"] = data.scores;
  j["token_types"] = data.token_types;
  j["merges"] = data.merges;
  j["bos_id"] = data.bos_id;
  j["eos_id"] = data.eos_id;
  j["unk_id"] = data.unk_id;
  j["pad_id"] = data.pad_id;
  j["eot_id"] = data.eot_id ? Json(*data.eot_id) : Json(nullptr);
  j["add_bos"] = data.add_bos;
  j["add_eos"] = data.add_eos;
  j["add_space_prefix"] = data.add_space_prefix;
  j["chat_template"] = data.chat_template;
  return j;
}

model::TokenizerData from_json(const Json& j) {
  model::TokenizerData data;
  data.model = j.at("model").get<std::string>();
  data.pre = j.at("pre").get<std::string>();
  data.tokens = j.at("tokens").get<std::vector<std::string>>();
  data.scores = j.at("scores").get<std::vector<float>>();
  data.token_types = j.at("token_types").get<std::vector<int32_t>>();
  data.merges = j.at("merges").get<std::vector<std::string>>();
  data.bos_id = j.at("bos_id").get<int32_t>();
  data.eos_id = j.at("eos_id").get<int32_t>();
  data.unk_id = j.at("unk_id").get<int32_t>();
  data.pad_id = j.at("pad_id").get<int32_t>();
  if (!j.at("eot_id").is_null()) data.eot_id = j.at("eot_id").get<int32_t>();
  data.add_bos = j.at("add_bos").get<bool>();
  data.add_eos = j.at("add_eos").get<bool>();
  data.add_space_prefix = j.at("add_space_prefix").get<bool>();
  data.chat_template = j.at("chat_template").get<std::string>();
  return data;
}

void write_json(const fs::path& path, const Json& j) {
  std::ofstream out(path);
  out << j.dump();
}

Json read_json(const fs::path& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

// ---------------------------------------------------------------------------------------
// Test texts

std::vector<std::string> fixed_texts() {
  return {
      "Hello, world!",
      "The quick brown fox jumps over the lazy dog.",
      "I'm sure you're right; they'll've done it, we'd said, she's gone and I've seen",
      "IT'S DON'T WE'LL YOU'RE I'M",
      "'s 's' ''t",
      "café naïve résumé Ångström façade jalapeño",
      "日本語のテキストです。中文分词测试。한국어 문장입니다.",
      "emoji 😀🎉👍🏽 family 👨‍👩‍👧 flags 🇫🇷🇯🇵",
      "Привет, мир! Γειά σου Κόσμε",
      "مرحبا بالعالم",
      "नमस्ते दुनिया",
      "e\xCC\x81 combining a\xCC\x8A\xCC\x81",
      "   leading spaces",
      "trailing spaces   ",
      "multiple    inner     spaces",
      "tabs\tand\t\ttabs",
      "new\nlines\n\n\nand\r\nCRLF\r\n",
      " \n \n  \n\t\n",
      "\n",
      " ",
      "   ",
      "numbers 1234567890 and 3.14159 and 1,000,000 and 007",
      "123456789012345678901234567890",
      "x=42;y=-7;z=x*y/2",
      "Roman Ⅻ superscript ²³ fraction ½ Arabic-Indic ٣٤٥ fullwidth １２３",
      "def f(x):\n    return x ** 2  # square\n",
      "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
      "https://example.com/path?q=1&r=2#frag",
      "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
      "<|im_start|><|im_end|><|endoftext|>",
      "abc<|endoftext|>def",
      "<|im_start",
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
      "non\xC2\xA0"
      "breaking\xE3\x80\x80"
      "ideographic",
      "next\xC2\x85line",
      "long s \xC5\xBF and 'S and Kelvin \xE2\x84\xAA",
      "!!!???...,,,;;;",
      "a",
      "UPPER lower MiXeD",
      "\xF0\x9D\x90\x80\xF0\x9D\x90\x81 math bold",
  };
}

void append_cp(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Random text from pieces of many kinds: words, numbers, whitespace runs, contractions,
// punctuation, letters of several scripts, combining marks, emoji and special tokens. Code
// points come from blocks assigned long ago, so the regex engines' Unicode tables agree.
std::vector<std::string> random_texts(size_t count, uint64_t seed,
                                      const std::vector<std::string>& specials) {
  std::mt19937_64 rng(seed);
  auto pick = [&](uint32_t lo, uint32_t hi) {
    return static_cast<uint32_t>(std::uniform_int_distribution<uint32_t>(lo, hi)(rng));
  };
  const std::vector<std::pair<uint32_t, uint32_t>> scripts = {
      {0xC0, 0x17F},    {0x391, 0x3C9},     {0x410, 0x44F},     {0x4E00, 0x9FA5},
      {0x3041, 0x3093}, {0x30A1, 0x30F6},   {0xAC00, 0xD7A3},   {0x621, 0x64A},
      {0x905, 0x939},   {0x1F600, 0x1F64F}, {0x1F300, 0x1F5FF}, {0x2190, 0x21FF},
      {0x2200, 0x22FF}, {0xFF10, 0xFF19},   {0x660, 0x669},     {0x2160, 0x216F}};
  const std::vector<std::string> contractions = {"'s",  "'t", "'re", "'ve", "'m",
                                                 "'ll", "'d", "'S",  "'LL", "'Re"};
  const std::string punct = ".,;:!?()[]{}<>\"'-_=+*/\\#@&%$|~`^";
  std::vector<std::string> texts;
  for (size_t t = 0; t < count; ++t) {
    std::string text;
    const uint32_t pieces = pick(1, 14);
    for (uint32_t p = 0; p < pieces; ++p) {
      switch (pick(0, 13)) {
        case 0:
        case 1: {  // a word, maybe capitalised, maybe after a space
          if (pick(0, 2) != 0) text += ' ';
          const uint32_t length = pick(1, 10);
          for (uint32_t i = 0; i < length; ++i) {
            const bool upper = (i == 0 && pick(0, 3) == 0) || pick(0, 20) == 0;
            text += static_cast<char>((upper ? 'A' : 'a') + pick(0, 25));
          }
          break;
        }
        case 2: {
          const uint32_t length = pick(1, 13);
          if (pick(0, 1) != 0) text += ' ';
          for (uint32_t i = 0; i < length; ++i) text += static_cast<char>('0' + pick(0, 9));
          break;
        }
        case 3:
          text.append(pick(1, 6), ' ');
          break;
        case 4: {
          const std::vector<std::string> ws = {"\n", "\r\n", "\t", "\n\n", " \n", "\t\t", "\r"};
          text += ws[pick(0, static_cast<uint32_t>(ws.size() - 1))];
          break;
        }
        case 5:
          text += contractions[pick(0, static_cast<uint32_t>(contractions.size() - 1))];
          break;
        case 6: {
          const uint32_t length = pick(1, 4);
          if (pick(0, 1) != 0) text += ' ';
          for (uint32_t i = 0; i < length; ++i)
            text += punct[pick(0, static_cast<uint32_t>(punct.size() - 1))];
          break;
        }
        case 7:
        case 8:
        case 9: {  // a run of one script
          const auto& [lo, hi] = scripts[pick(0, static_cast<uint32_t>(scripts.size() - 1))];
          if (pick(0, 1) != 0) text += ' ';
          const uint32_t length = pick(1, 6);
          for (uint32_t i = 0; i < length; ++i) append_cp(text, pick(lo, hi));
          break;
        }
        case 10:
          append_cp(text, pick(0x300, 0x36F));
          break;  // a combining mark
        case 11: {
          const std::vector<uint32_t> odd = {0xA0,   0x3000, 0x2028, 0x200B,
                                             0xFEFF, 0x2003, 0xB2,   0xBD};
          append_cp(text, odd[pick(0, static_cast<uint32_t>(odd.size() - 1))]);
          break;
        }
        case 12:
          if (!specials.empty())
            text += specials[pick(0, static_cast<uint32_t>(specials.size() - 1))];
          break;
        default:
          append_cp(text, pick(0x20, 0x7E));
          break;
      }
    }
    texts.push_back(std::move(text));
  }
  return texts;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  return out + "]";
}

std::string escape(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out += c;
    }
  }
  return out;
}

// Encodes `texts` with our tokenizer and the reference; expects identical ids, and that our
// decode gives back each text. Returns false (after GTEST_SKIP-worthy message) if skipped.
struct CompareResult {
  bool skipped = false;
  std::string skip_reason;
  size_t compared = 0;
  size_t mismatches = 0;
};

CompareResult compare_with_reference(const model::TokenizerData& data,
                                     const std::vector<std::string>& texts,
                                     const fs::path* data_json = nullptr) {
  CompareResult result;
  TempDir dir;
  fs::path data_path = dir.path / "data.json";
  if (data_json != nullptr) {
    data_path = *data_json;
  } else {
    write_json(data_path, to_json(data));
  }
  write_json(dir.path / "texts.json", Json(texts));
  const ReferenceRun run =
      run_reference({"encode", data_path.string(), (dir.path / "texts.json").string(),
                     (dir.path / "ids.json").string()},
                    dir.path / "log.txt");
  if (run.skipped) return {true, run.message, 0, 0};
  if (!run.message.empty()) {
    ADD_FAILURE() << run.message;
    return result;
  }
  const Json reference = read_json(dir.path / "ids.json");
  const model::Tokenizer tokenizer(data);
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto expected = reference["ids"][i].get<std::vector<int32_t>>();
    const auto ids = tokenizer.encode(texts[i], {.add_special = false, .parse_special = true});
    ++result.compared;
    if (ids != expected) {
      ++result.mismatches;
      ADD_FAILURE() << "text " << i << " \"" << escape(texts[i]) << "\"\n  ours:      " << show(ids)
                    << "\n  reference: " << show(expected);
    }
    const std::string decoded = tokenizer.decode(ids, {.render_special = true});
    EXPECT_EQ(decoded, texts[i]) << "round trip of text " << i;
    EXPECT_EQ(decoded, reference["decoded"][i].get<std::string>()) << "decode of text " << i;
  }
  return result;
}

std::vector<std::string> control_texts(const model::TokenizerData& data) {
  std::vector<std::string> out;
  for (size_t i = 0; i < data.tokens.size(); ++i) {
    if (data.token_types[i] == static_cast<int32_t>(model::TokenType::kControl))
      out.push_back(data.tokens[i]);
  }
  // Random texts need only a few of Llama-3's 256 specials.
  if (out.size() > 12) out.resize(12);
  return out;
}

// ---------------------------------------------------------------------------------------
// SmolLM2 (real vocabulary)

struct SmolLm2 {
  bool available = false;
  std::string reason;
  model::TokenizerData data;
  std::unique_ptr<TempDir> dir;  // keeps data.json for the encode step
  fs::path json;
};

const SmolLm2& smollm2() {
  static const SmolLm2 cached = [] {
    SmolLm2 s;
    if (!fs::exists(smollm2_path())) {
      s.reason = smollm2_path().string() + " is not installed (scripts/fetch-model)";
      return s;
    }
    s.dir = std::make_unique<TempDir>();
    s.json = s.dir->path / "smollm2.json";
    const ReferenceRun run = run_reference({"dump-gguf", smollm2_path().string(), s.json.string()},
                                           s.dir->path / "log.txt");
    if (run.skipped || !run.message.empty()) {
      s.reason = run.message;
      return s;
    }
    s.data = from_json(read_json(s.json));
    s.available = true;
    return s;
  }();
  return cached;
}

TEST(TokenizerReference, SmolLM2MatchesHuggingFaceTokenizers) {
  const SmolLm2& model = smollm2();
  if (!model.available) GTEST_SKIP() << model.reason;
  EXPECT_EQ(model.data.model, "gpt2");
  EXPECT_EQ(model.data.pre, "smollm");
  std::vector<std::string> texts = fixed_texts();
  const auto random = random_texts(300, 1234, control_texts(model.data));
  texts.insert(texts.end(), random.begin(), random.end());
  const CompareResult result = compare_with_reference(model.data, texts, &model.json);
  if (result.skipped) GTEST_SKIP() << result.skip_reason;
  std::printf("[ SmolLM2  ] %zu texts compared with tokenizers, %zu mismatches\n", result.compared,
              result.mismatches);
  EXPECT_EQ(result.compared, texts.size());
}

TEST(TokenizerReference, SmolLM2KnownIdsAndChat) {
  const SmolLm2& model = smollm2();
  if (!model.available) GTEST_SKIP() << model.reason;
  const model::Tokenizer tokenizer(model.data);
  EXPECT_EQ(tokenizer.vocab_size(), 49152);
  EXPECT_EQ(tokenizer.bos_id(), 1);
  EXPECT_EQ(tokenizer.eos_id(), 2);
  EXPECT_TRUE(tokenizer.is_end_of_generation(2));
  EXPECT_EQ(tokenizer.encode("<|im_start|>"), (std::vector<int32_t>{1}));
  // Control tokens as plain text when specials are not parsed.
  EXPECT_GT(tokenizer.encode("<|im_start|>", {.parse_special = false}).size(), 1u);

  const std::vector<model::ChatMessage> messages = {{"user", "What is 2+2?"}};
  const std::string prompt = model::render_chat(tokenizer, messages);
  EXPECT_EQ(prompt,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
  const auto ids = tokenizer.encode(prompt);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 3);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 2);
}

// ---------------------------------------------------------------------------------------
// Synthesized vocabularies against the reference, one per pre-tokenizer

class TokenizerSynthReference : public ::testing::TestWithParam<std::pair<const char*, int32_t>> {};

TEST_P(TokenizerSynthReference, MatchesHuggingFaceTokenizers) {
  const auto [pre, vocab_size] = GetParam();
  const model::TokenizerData data = model::synthesize_bpe_vocab(vocab_size, pre, 7);
  std::vector<std::string> texts = fixed_texts();
  const auto random = random_texts(300, 99, control_texts(data));
  texts.insert(texts.end(), random.begin(), random.end());
  const CompareResult result = compare_with_reference(data, texts);
  if (result.skipped) GTEST_SKIP() << result.skip_reason;
  std::printf("[ %-9s] %zu texts compared with tokenizers, %zu mismatches\n", pre, result.compared,
              result.mismatches);
  EXPECT_EQ(result.compared, texts.size());
}

INSTANTIATE_TEST_SUITE_P(Pre, TokenizerSynthReference,
                         ::testing::Values(std::make_pair("llama-bpe", 128256),
                                           std::make_pair("smollm", 49152),
                                           std::make_pair("qwen2", 20000),
                                           std::make_pair("tekken", 20000),
                                           std::make_pair("deepseek-r1-qwen", 20000),
                                           std::make_pair("gpt2", 20000)),
                         [](const auto& test_info) {
                           std::string name = test_info.param.first;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// ---------------------------------------------------------------------------------------
// Byte-level BPE behaviour

// A tiny byte-level vocabulary: the 256 byte tokens, a few merges, specials of each kind.
model::TokenizerData tiny_bpe(std::string pre = "gpt2") {
  model::TokenizerData data =
      model::synthesize_bpe_vocab(256 + 3, "gpt2", 1);  // bytes + ChatML specials
  data.pre = std::move(pre);
  auto add = [&](std::string text, model::TokenType type) {
    data.tokens.push_back(std::move(text));
    data.token_types.push_back(static_cast<int32_t>(type));
    return static_cast<int32_t>(data.tokens.size() - 1);
  };
  add("<|x|>", model::TokenType::kControl);
  add("<|x|>y", model::TokenType::kControl);  // longer special sharing a prefix
  add("[USER]", model::TokenType::kUserDefined);
  return data;
}

TEST(TokenizerBpe, SpecialTokensMatchLeftmostLongest) {
  const model::Tokenizer tokenizer(tiny_bpe());
  const int32_t x = *tokenizer.find_token("<|x|>");
  const int32_t xy = *tokenizer.find_token("<|x|>y");
  const int32_t user = *tokenizer.find_token("[USER]");
  const int32_t im_start = *tokenizer.find_token("<|im_start|>");
  EXPECT_EQ(tokenizer.encode("<|x|>y<|x|>"), (std::vector<int32_t>{xy, x}));
  EXPECT_EQ(tokenizer.encode("<|im_start|>[USER]"), (std::vector<int32_t>{im_start, user}));
  // Without parsing specials, control tokens are text but user-defined ones still match.
  const auto plain = tokenizer.encode("<|x|>[USER]", {.parse_special = false});
  EXPECT_EQ(plain.back(), user);
  EXPECT_EQ(plain.size(), 6u);  // "<|x|>" as five byte tokens
  EXPECT_EQ(tokenizer.decode(plain), "<|x|>[USER]");
  // Control tokens are not rendered unless asked; user-defined ones always are.
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{x, user}), "[USER]");
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{x, user}, {.render_special = true}),
            "<|x|>[USER]");
}

TEST(TokenizerBpe, MergesByRankLeftmostFirst) {
  model::TokenizerData data = model::synthesize_bpe_vocab(256 + 3, "gpt2", 1);
  // Ranks: "a a" first, then "aa a" — "aaa" must become [aa, a] then [aaa]; "aaaa" [aa, aa]
  // because the leftmost pair merges first and "aa aa" is not a merge.
  data.tokens.insert(data.tokens.end(), {"aa", "aaa"});
  data.token_types.insert(data.token_types.end(), {1, 1});
  data.merges = {"a a", "aa a"};
  const model::Tokenizer tokenizer(data);
  const int32_t a = *tokenizer.find_token("a"), aa = *tokenizer.find_token("aa");
  const int32_t aaa = *tokenizer.find_token("aaa");
  EXPECT_EQ(tokenizer.encode("aaa", {.add_special = false}), (std::vector<int32_t>{aaa}));
  EXPECT_EQ(tokenizer.encode("aaaa", {.add_special = false}), (std::vector<int32_t>{aa, aa}));
  EXPECT_EQ(tokenizer.encode("aaaaa", {.add_special = false}), (std::vector<int32_t>{aa, aaa}));
  EXPECT_EQ(tokenizer.encode("a", {.add_special = false}), (std::vector<int32_t>{a}));
}

// Llama-3 (HF ignore_merges) takes a pre-token that is itself a token whole, even where the
// merges would split it: with "b c" ranked before "a b", merging gives "abc" -> [a, bc].
TEST(TokenizerBpe, Llama3TakesWholeWordTokens) {
  for (const std::string pre : {"llama-bpe", "gpt2"}) {
    model::TokenizerData data = model::synthesize_bpe_vocab(256 + 3, "gpt2", 1);
    data.pre = pre;
    data.tokens.insert(data.tokens.end(), {"bc", "ab", "abc"});
    data.token_types.insert(data.token_types.end(), {1, 1, 1});
    data.merges = {"b c", "a b", "ab c"};
    const model::Tokenizer tokenizer(data);
    const int32_t a = *tokenizer.find_token("a"), bc = *tokenizer.find_token("bc");
    const int32_t abc = *tokenizer.find_token("abc");
    const auto expected = pre == "gpt2" ? std::vector<int32_t>{a, bc} : std::vector<int32_t>{abc};
    EXPECT_EQ(tokenizer.encode("abc"), expected) << pre;
    EXPECT_EQ(tokenizer.encode("abcabc"), (std::vector<int32_t>{a, bc, a, bc})) << pre;
    const CompareResult result = compare_with_reference(data, {"abc", " abc", "abcabc", "x abc"});
    if (result.skipped) std::printf("reference skipped: %s\n", result.skip_reason.c_str());
  }
}

TEST(TokenizerBpe, BosEosAndEndOfGeneration) {
  model::TokenizerData data = model::synthesize_bpe_vocab(4096, "llama-bpe", 3);
  data.add_eos = true;
  const model::Tokenizer tokenizer(data);
  const auto ids = tokenizer.encode("hi");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), tokenizer.bos_id());
  EXPECT_EQ(ids.back(), tokenizer.eos_id());
  EXPECT_EQ(tokenizer.encode("hi", {.add_special = false}).size(), ids.size() - 2);
  EXPECT_EQ(tokenizer.decode(ids), "hi");
  EXPECT_EQ(tokenizer.decode(ids, {.render_special = true}), "<|begin_of_text|>hi<|end_of_text|>");
  ASSERT_TRUE(tokenizer.eot_id().has_value());
  EXPECT_EQ(*tokenizer.eot_id(), *tokenizer.find_token("<|eot_id|>"));
  EXPECT_TRUE(tokenizer.is_end_of_generation(*tokenizer.eot_id()));
  EXPECT_TRUE(tokenizer.is_end_of_generation(tokenizer.eos_id()));
  EXPECT_TRUE(tokenizer.is_end_of_generation(*tokenizer.find_token("<|eom_id|>")));
  EXPECT_FALSE(tokenizer.is_end_of_generation(tokenizer.bos_id()));
  EXPECT_EQ(tokenizer.token_type(tokenizer.bos_id()), model::TokenType::kControl);
}

TEST(TokenizerBpe, EncodesTenKilobytesInLinearTime) {
  const model::Tokenizer tokenizer(model::synthesize_bpe_vocab(128256, "llama-bpe", 5));
  std::string text;
  for (const std::string& piece : random_texts(2000, 17, {})) {
    if (text.size() > 10240) break;
    text += piece + " ";
  }
  tokenizer.encode(text);  // warm up
  const double start = thread_cpu_ms();
  const auto ids = tokenizer.encode(text);
  const double ms = thread_cpu_ms() - start;
  std::printf("[ encode   ] %zu bytes -> %zu tokens in %.3f ms\n", text.size(), ids.size(), ms);
  EXPECT_EQ(tokenizer.decode(ids), text);
  // A guard against quadratic work, not a speed claim (a few ms in Release).
  EXPECT_LT(ms, 500.0);
  // A single huge pre-token (no spaces) and a huge whitespace run stay fast too.
  const std::string word(100000, 'a'), spaces(100000, ' ');
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(tokenizer.decode(tokenizer.encode(word)), word);
  EXPECT_EQ(tokenizer.decode(tokenizer.encode(spaces)), spaces);
  const double long_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ encode   ] 2 x 100 kB single pre-tokens in %.1f ms\n", long_ms);
}

TEST(TokenizerBpe, RejectsBadInput) {
  model::TokenizerData data = model::synthesize_bpe_vocab(300, "gpt2", 1);
  {
    model::TokenizerData bad = data;
    bad.pre = "nonexistent";
    try {
      model::Tokenizer tokenizer(bad);
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.where(), "tokenizer");
      EXPECT_NE(std::string(e.what()).find("unknown pre-tokenizer 'nonexistent'"),
                std::string::npos)
          << e.what();
      for (const std::string& name : model::supported_pre_tokenizers()) {
        EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
      }
    }
  }
  {
    model::TokenizerData bad = data;
    bad.model = "wordpiece";
    EXPECT_THROW(model::Tokenizer{bad}, Error);
  }
  {
    model::TokenizerData bad = data;
    bad.token_types.pop_back();
    EXPECT_THROW(model::Tokenizer{bad}, Error);
  }
  {
    model::TokenizerData bad = data;
    bad.bos_id = 100000;
    EXPECT_THROW(model::Tokenizer{bad}, Error);
  }
  {
    model::TokenizerData bad = data;
    bad.merges.push_back("nospace");
    EXPECT_THROW(model::Tokenizer{bad}, Error);
  }
  const model::Tokenizer tokenizer(data);
  EXPECT_THROW(tokenizer.encode("bad \xC3 utf-8"), Error);
  EXPECT_THROW(tokenizer.encode("\xED\xA0\x80"), Error);  // a surrogate
  EXPECT_THROW(tokenizer.decode(std::vector<int32_t>{-1}), Error);
  EXPECT_THROW(tokenizer.decode(std::vector<int32_t>{300}), Error);
  EXPECT_TRUE(tokenizer.encode("", {.add_special = false}).empty());
}

// ---------------------------------------------------------------------------------------
// Detokenizer

TEST(Detokenizer, HoldsBackCharactersSplitOverTokens) {
  const model::Tokenizer tokenizer(
      model::synthesize_bpe_vocab(259, "gpt2", 1));  // byte tokens only
  std::array<int32_t, 256> byte_token{};
  for (int32_t id = 0; id < 256; ++id) {
    const std::string piece = tokenizer.token_to_piece(id);
    ASSERT_EQ(piece.size(), 1u);
    byte_token[static_cast<uint8_t>(piece[0])] = id;
  }
  auto bytes = [&](std::string_view text) {
    std::vector<int32_t> ids;
    for (const char c : text) ids.push_back(byte_token[static_cast<uint8_t>(c)]);
    return ids;
  };
  model::Detokenizer detokenizer(tokenizer);
  const auto e_acute = bytes("\xC3\xA9");
  EXPECT_EQ(detokenizer.push(e_acute[0]), "");
  EXPECT_EQ(detokenizer.push(e_acute[1]), "\xC3\xA9");
  const auto emoji = bytes("\xF0\x9F\x98\x80");
  EXPECT_EQ(detokenizer.push(emoji[0]), "");
  EXPECT_EQ(detokenizer.push(emoji[1]), "");
  EXPECT_EQ(detokenizer.push(emoji[2]), "");
  EXPECT_EQ(detokenizer.push(emoji[3]), "\xF0\x9F\x98\x80");
  // Invalid bytes become U+FFFD at once; an interrupted sequence too.
  EXPECT_EQ(detokenizer.push(bytes("\xFF")[0]), "\xEF\xBF\xBD");
  EXPECT_EQ(detokenizer.push(emoji[0]), "");
  EXPECT_EQ(detokenizer.push(bytes("a")[0]),
            "\xEF\xBF\xBD"
            "a");
  // flush() gives up on an incomplete tail.
  EXPECT_EQ(detokenizer.push(emoji[0]), "");
  EXPECT_EQ(detokenizer.push(emoji[1]), "");
  EXPECT_EQ(detokenizer.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(detokenizer.flush(), "");

  // Whatever the split of a text into tokens, the streamed pieces concatenate to the text.
  const std::string text = "naïve 日本 😀 done";
  std::string streamed;
  model::Detokenizer stream(tokenizer);
  for (const int32_t id : bytes(text)) {
    const std::string piece = stream.push(id);
    EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos);
    streamed += piece;
  }
  streamed += stream.flush();
  EXPECT_EQ(streamed, text);
}

// ---------------------------------------------------------------------------------------
// SentencePiece on a hand-built vocabulary

// ids: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then the normal pieces below.
constexpr std::string_view kSp = "\xE2\x96\x81";  // U+2581

model::TokenizerData tiny_spm() {
  model::TokenizerData data;
  data.model = "llama";
  data.pre = "default";
  auto add = [&](std::string text, float score, model::TokenType type) {
    data.tokens.push_back(std::move(text));
    data.scores.push_back(score);
    data.token_types.push_back(static_cast<int32_t>(type));
  };
  add("<unk>", 0, model::TokenType::kUnknown);
  add("<s>", 0, model::TokenType::kControl);
  add("</s>", 0, model::TokenType::kControl);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    add(name, 0, model::TokenType::kByte);
  }
  const std::string sp(kSp);
  const std::vector<std::pair<std::string, float>> pieces = {
      {sp, -1.0f},        {"e", -2.0f},        {"l", -2.5f},          {"o", -2.6f},
      {"h", -3.0f},       {"r", -3.1f},        {"d", -3.3f},          {"w", -3.5f},
      {"ll", -4.0f},      {"or", -4.2f},       {"he", -4.5f},         {sp + "h", -5.0f},
      {sp + "w", -5.2f},  {"lo", -5.5f},       {"ld", -5.8f},         {"llo", -6.0f},
      {sp + "he", -6.5f}, {sp + "wor", -7.0f}, {sp + "world", -7.2f}, {sp + "hello", -7.5f}};
  for (const auto& [text, score] : pieces) add(text, score, model::TokenType::kNormal);
  add("lol", 0, model::TokenType::kControl);  // a control token plain text could spell
  data.bos_id = 1;
  data.eos_id = 2;
  data.unk_id = 0;
  data.add_bos = true;
  return data;
}

// Id of a normal piece by its position in the list above.
int32_t piece_id(int index) {
  return 259 + index;
}
int32_t byte_id(int byte) {
  return 3 + byte;
}

TEST(TokenizerSpm, MergesByScoreAsComputedByHand) {
  const model::Tokenizer tokenizer(tiny_spm());
  const int32_t sp = piece_id(0), l = piece_id(2), ll = piece_id(8), he = piece_id(10);
  const int32_t sp_h = piece_id(11), llo = piece_id(15), lo = piece_id(13);
  const int32_t sp_world = piece_id(18), sp_hello = piece_id(19);
  const model::EncodeOptions plain{.add_special = false};

  // "▁hello▁world": ll, or, he, ▁w, ld, llo, ▁he, ▁wor, ▁world, ▁hello in score order.
  EXPECT_EQ(tokenizer.encode("hello world", plain), (std::vector<int32_t>{sp_hello, sp_world}));
  EXPECT_EQ(tokenizer.encode("hello world"), (std::vector<int32_t>{1, sp_hello, sp_world}));
  // Equal scores: the leftmost "l l" merges first, so "▁lll" is ▁ + ll + l, not ▁ + l + ll.
  EXPECT_EQ(tokenizer.encode("lll", plain), (std::vector<int32_t>{sp, ll, l}));
  // "é" is not a piece: its two UTF-8 bytes as <0xC3><0xA9>.
  EXPECT_EQ(tokenizer.encode("hé", plain),
            (std::vector<int32_t>{sp_h, byte_id(0xC3), byte_id(0xA9)}));
  // Specials split the text; the space prefix comes back after each one.
  EXPECT_EQ(tokenizer.encode("<s>hello</s>", plain), (std::vector<int32_t>{1, sp_hello, 2}));
  // Not parsed: "<s>" is spelt in bytes; "he" and "llo" merge but not into "hello".
  EXPECT_EQ(tokenizer.encode("<s>hello</s>", {.add_special = false, .parse_special = false}),
            (std::vector<int32_t>{sp, byte_id('<'), byte_id('s'), byte_id('>'), he, llo,
                                  byte_id('<'), byte_id('/'), byte_id('s'), byte_id('>')}));
  // "lol" is a control token: matched whole when specials are parsed, but merging plain text
  // never forms it (lo + l).
  EXPECT_EQ(tokenizer.encode("lol", plain), (std::vector<int32_t>{piece_id(20)}));
  EXPECT_EQ(tokenizer.encode("lol", {.add_special = false, .parse_special = false}),
            (std::vector<int32_t>{sp, lo, l}));
  EXPECT_TRUE(tokenizer.encode("", plain).empty());
}

TEST(TokenizerSpm, DecodesAndStreamsByteFallback) {
  const model::Tokenizer tokenizer(tiny_spm());
  for (const std::string text :
       {"hello world", "hé", "  hello   world ", "日本", "<s>hello</s>", "lll"}) {
    const auto ids = tokenizer.encode(text, {.parse_special = false});
    EXPECT_EQ(tokenizer.decode(ids), text) << show(ids);
  }
  // The space prefix added after a special token is dropped again on decoding.
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("hello<s>world"),
                             {.render_special = true, .strip_space_prefix = true}),
            "<s>hello<s>world");
  // Streaming: the first word keeps its space when continuing a prompt, and <0xC3><0xA9>
  // come out together.
  model::Detokenizer detokenizer(tokenizer);
  const int32_t sp_h = piece_id(11);
  EXPECT_EQ(detokenizer.push(sp_h), " h");
  EXPECT_EQ(detokenizer.push(byte_id(0xC3)), "");
  EXPECT_EQ(detokenizer.push(byte_id(0xA9)), "\xC3\xA9");
  EXPECT_EQ(detokenizer.push(1), "");              // <s> not rendered
  EXPECT_EQ(detokenizer.push(0), "\xEF\xBF\xBD");  // <unk>
  model::Detokenizer stripping(tokenizer, {.strip_space_prefix = true});
  EXPECT_EQ(stripping.push(1), "");
  EXPECT_EQ(stripping.push(sp_h), "h");
  EXPECT_EQ(stripping.push(sp_h), " h");
  EXPECT_EQ(tokenizer.token_to_piece(1), "");
  EXPECT_EQ(tokenizer.token_to_piece(1, true), "<s>");
  EXPECT_EQ(tokenizer.token_to_piece(byte_id('A')), "A");
}

TEST(TokenizerSpm, UnknownCharacterWithoutByteTokens) {
  model::TokenizerData data = tiny_spm();
  for (int b = 0; b < 256; ++b)
    data.tokens[static_cast<size_t>(byte_id(b))] = "byte" + std::to_string(b);
  const model::Tokenizer tokenizer(data);
  EXPECT_EQ(tokenizer.encode("hé", {.add_special = false}),
            (std::vector<int32_t>{piece_id(11), 0}));
  data.unk_id = -1;
  EXPECT_THROW(model::Tokenizer(data).encode("hé"), Error);
  data.scores.clear();
  EXPECT_THROW(model::Tokenizer{data}, Error);
}

// ---------------------------------------------------------------------------------------
// The synthesizer

void expect_consistent(const model::TokenizerData& data, int32_t vocab_size) {
  ASSERT_EQ(static_cast<int32_t>(data.tokens.size()), vocab_size);
  ASSERT_EQ(data.token_types.size(), data.tokens.size());
  std::set<std::string> seen;
  for (const std::string& token : data.tokens)
    EXPECT_TRUE(seen.insert(token).second) << "duplicate " << token;
  // Merge r joins two earlier tokens into token 256 + r.
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < data.tokens.size(); ++i) index.emplace(data.tokens[i], i);
  for (size_t rank = 0; rank < data.merges.size(); ++rank) {
    const std::string& merge = data.merges[rank];
    const size_t space = merge.find(' ', 1);
    ASSERT_NE(space, std::string::npos);
    const std::string left = merge.substr(0, space), right = merge.substr(space + 1);
    const size_t result = 256 + rank;
    ASSERT_TRUE(index.count(left) && index.count(right)) << merge;
    EXPECT_LT(index[left], result) << merge;
    EXPECT_LT(index[right], result) << merge;
    EXPECT_EQ(data.tokens[result], left + right) << merge;
    EXPECT_EQ(data.token_types[result], 1);
  }
  const size_t specials = data.tokens.size() - 256 - data.merges.size();
  for (size_t i = data.tokens.size() - specials; i < data.tokens.size(); ++i) {
    EXPECT_EQ(data.token_types[i], static_cast<int32_t>(model::TokenType::kControl));
  }
}

// Whether `text` is well-formed UTF-8 (lead bytes and continuation counts; enough here).
bool valid_utf8(const std::string& text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const auto lead = static_cast<uint8_t>(text[pos]);
    const size_t n = lead < 0x80   ? 1
                     : lead < 0xC2 ? 0
                     : lead < 0xE0 ? 2
                     : lead < 0xF0 ? 3
                     : lead < 0xF5 ? 4
                                   : 0;
    if (n == 0 || pos + n > text.size()) return false;
    for (size_t i = 1; i < n; ++i) {
      if ((static_cast<uint8_t>(text[pos + i]) & 0xC0) != 0x80) return false;
    }
    pos += n;
  }
  return true;
}

TEST(BpeSynth, ExactSizeConsistentAndDeterministic) {
  for (const auto& [pre, size] :
       {std::pair<std::string, int32_t>{"llama-bpe", 128256}, {"smollm", 49152}}) {
    const double start = thread_cpu_ms();
    const model::TokenizerData data = model::synthesize_bpe_vocab(size, pre, 42);
    const double ms = thread_cpu_ms() - start;
    std::printf("[ synth    ] %s vocab of %d tokens in %.1f ms\n", pre.c_str(), size, ms);
    // A guard against quadratic work (a 128k vocab takes ~0.3 s in Release, ~1 s under the
    // sanitizers on a loaded 2-core machine), not a speed claim: the speed is in the output above.
    EXPECT_LT(ms, 10000.0);
    expect_consistent(data, size);
    EXPECT_EQ(data.model, "gpt2");
    EXPECT_EQ(data.pre, pre);
    const model::Tokenizer tokenizer(data);
    if (pre == "llama-bpe") {
      EXPECT_EQ(tokenizer.bos_id(), 128000);  // Llama-3's layout of the 256 specials
      EXPECT_EQ(*tokenizer.find_token("<|eot_id|>"), 128009);
      EXPECT_NE(model::chat_template_of(tokenizer).find("<|start_header_id|>"), std::string::npos);
    } else {
      EXPECT_NE(model::chat_template_of(tokenizer).find("<|im_start|>"), std::string::npos);
    }
    // Every merge result is reachable: its own text encodes to it alone.
    size_t checked = 0;
    for (int32_t id = 256; id < 256 + static_cast<int32_t>(data.merges.size()); ++id) {
      const std::string text = tokenizer.token_to_piece(id);
      if (!valid_utf8(text)) continue;  // a partial character, only ever a step of a merge
      ++checked;
      const auto ids = tokenizer.encode(text, {.add_special = false, .parse_special = false});
      ASSERT_EQ(ids, (std::vector<int32_t>{id}))
          << "token " << id << " '" << data.tokens[static_cast<size_t>(id)] << "'";
    }
    EXPECT_GT(checked, data.merges.size() * 9 / 10);
    // Same seed, same vocabulary; another seed, another one.
    EXPECT_EQ(model::synthesize_bpe_vocab(size, pre, 42).merges, data.merges);
    EXPECT_NE(model::synthesize_bpe_vocab(size, pre, 43).merges, data.merges);
  }
}

TEST(BpeSynth, RoundTripsRandomUnicode) {
  const model::Tokenizer tokenizer(model::synthesize_bpe_vocab(49152, "smollm", 11));
  for (const std::string& text : random_texts(500, 2024, {"<|im_start|>", "<|im_end|>"})) {
    const auto ids = tokenizer.encode(text, {.add_special = false});
    EXPECT_EQ(tokenizer.decode(ids, {.render_special = true}), text);
  }
}

TEST(BpeSynth, EverySizeIsExact) {
  for (const std::string pre : {"llama-bpe", "smollm", "qwen2", "gpt2"}) {
    for (const int32_t size : {261, 262, 300, 1000, 4095, 4096, 4097, 10007, 32000}) {
      SCOPED_TRACE(pre + " " + std::to_string(size));
      expect_consistent(model::synthesize_bpe_vocab(size, pre, static_cast<uint64_t>(size)), size);
    }
  }
}

TEST(BpeSynth, RejectsImpossibleRequests) {
  EXPECT_THROW(model::synthesize_bpe_vocab(200, "gpt2", 1), Error);
  EXPECT_THROW(model::synthesize_bpe_vocab(1000, "klingon", 1), Error);
  expect_consistent(model::synthesize_bpe_vocab(256 + 5, "llama-bpe", 1), 256 + 5);
}

}  // namespace
}  // namespace onepass
