// Hugging Face tokenizer.json files against the PyPI `tokenizers` library. The files are
// built by tests/tools/tokenizer_reference.py (make-hf) from the installed GGUF vocabularies
// with each family's normalizer, pre-tokenizer and post-processor (byte-level BPE from
// SmolLM2's vocabulary, SentencePiece merged by rank from Gemma 3's), one family per test
// process as ctest runs them. Also: the errors for
// unsupported fields, the NFC check against Python's unicodedata, and an mlx-lm directory
// whose tokenizer and chat template reach `onepass generate`.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/jinja_reference.h"
#include "model/unicode.h"
#include "onepass/core/error.h"
#include "onepass/core/half.h"
#include "onepass/model/chat.h"
#include "onepass/model/loader.h"
#include "onepass/model/tokenizer.h"

namespace onepass::model {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

fs::path source_root() {
  const fs::path from_file = fs::path(__FILE__).parent_path().parent_path().parent_path();
  if (fs::exists(from_file / "tests/tools/tokenizer_reference.py")) return from_file;
  return fs::current_path();
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "onepass_hf_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw Error("test", "mkdtemp failed");
    path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

std::string quote(const std::string& arg) {
  std::string out = "'";
  for (const char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs a command; returns "" on success, "skip: ..." when python or a package is missing,
// else the failure with the command's output.
std::string run_command(const std::string& command, const fs::path& log) {
  const int status = std::system((command + " > " + quote(log.string()) + " 2>&1").c_str());
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 0) return {};
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string result = code == 3 ? "skip: " : "failed: ";
  result += text;
  return result;
}

std::string reference(const std::vector<std::string>& args, const fs::path& log) {
  if (std::system("python3 -c 'import tokenizers' > /dev/null 2>&1") != 0) {
    return "skip: python3 with the tokenizers package is not available";
  }
  std::string command = "python3 " + quote((source_root() / "tests/tools/tokenizer_reference.py").string());
  for (const std::string& arg : args) {
    command += ' ';
    command += quote(arg);
  }
  return run_command(command, log);
}

Json read_json(const fs::path& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

// The tokenizer.json directory of one family, made on first use: byte-level kinds from
// SmolLM2's vocabulary, SentencePiece kinds from Gemma 3's.
struct HfDirectories {
  TempDir dir;
  std::map<std::string, std::string> problem;  // kind -> why it is missing, "" when made
};

constexpr std::string_view kSentencePieceKinds[] = {"gemma", "llama2", "metaspace-first"};

// The directory of `kind`, or why it could not be made ("skip: ..." or a failure).
std::pair<fs::path, std::string> hf_directory(const std::string& kind) {
  static HfDirectories dirs;
  if (!dirs.problem.contains(kind)) {
    const bool sentencepiece = std::find(std::begin(kSentencePieceKinds), std::end(kSentencePieceKinds),
                                         kind) != std::end(kSentencePieceKinds);
    const char* model =
        sentencepiece ? "models/gemma-3-270m-q4_k_m.gguf" : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    const fs::path gguf = source_root() / model;
    dirs.problem[kind] = fs::exists(gguf) ? reference({"make-hf", kind, gguf.string(), dirs.dir.path.string()},
                                                      dirs.dir.path / "make.log")
                                          : cat("skip: ", model, " is not installed (scripts/setup)");
  }
  return {dirs.dir.path / kind, dirs.problem[kind]};
}

void append_cp(std::string& out, uint32_t cp) {
  unicode::append_utf8(out, cp);
}

// Varied text: ASCII words of mixed case, digit runs, CJK, emoji, whitespace runs,
// contractions, punctuation, several scripts; plus random mixes of those.
std::vector<std::string> test_texts(const std::vector<std::string>& specials) {
  std::vector<std::string> texts = {
      "Hello world",
      " Hello  world ",
      "The year 2024 had 366 days; 1234567890 digits.",
      "I'm sure they've said we'll go, isn't it? DON'T SHOUT, You'Re fine.",
      "camelCaseWords and HTTPServer, XMLHttpRequest, iPhone",
      "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3002",
      "\xf0\x9f\x98\x80 emoji \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd and \xe2\x9d\xa4\xef\xb8\x8f",
      "tabs\tand\t\tmore\n\nnew lines\r\nand   spaces    here",
      "   leading spaces",
      "trailing spaces   ",
      "\n",
      " ",
      "a",
      "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
      "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber Stra\u00dfe",
      "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
      "def f(x):\n    return x ** 2  # square\n",
      "<html><body class=\"x\">a&amp;b</body></html>",
      "1+1=2, 3.14159, -42, 1e-9, 0x1F",
      "e\u0301",  // a decomposed character: NFC vocabularies refuse it
  };
  for (const std::string& special : specials) {
    texts.push_back(special + "Hello" + special + " world");
    texts.push_back("x " + special + "\n" + special + special);
  }
  std::mt19937 rng(17);
  auto pick = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
  const std::pair<uint32_t, uint32_t> scripts[] = {{0x41, 0x5A},       {0x61, 0x7A},     {0x30, 0x39},
                                                   {0xC0, 0x17F},      {0x410, 0x44F},   {0x4E00, 0x9FA5},
                                                   {0x3041, 0x3093},   {0xAC00, 0xD7A3}, {0x1F600, 0x1F64F},
                                                   {0x21, 0x2F},       {0x905, 0x939},   {0x391, 0x3C9}};
  const char* pieces[] = {" ", "  ", "\n", "\t", "'s", "'LL", "\r\n", "   \n", ". ", "/"};
  for (int t = 0; t < 150; ++t) {
    std::string text;
    const uint32_t count = pick(1, 12);
    for (uint32_t p = 0; p < count; ++p) {
      if (pick(0, 3) == 0) {
        text += pieces[pick(0, 9)];
      } else if (!specials.empty() && pick(0, 15) == 0) {
        text += specials[pick(0, static_cast<uint32_t>(specials.size() - 1))];
      } else {
        const auto& [lo, hi] = scripts[pick(0, 11)];
        const uint32_t length = pick(1, 7);
        for (uint32_t i = 0; i < length; ++i) append_cp(text, pick(lo, hi));
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

// ---------------------------------------------------------------------------------------
// Each family's tokenizer.json against the tokenizers library

class TokenizerJsonReference : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerJsonReference, MatchesHuggingFaceTokenizers) {
  const std::string kind = GetParam();
  const auto [dir, problem] = hf_directory(kind);
  if (problem.starts_with("skip: ")) GTEST_SKIP() << problem;
  ASSERT_TRUE(problem.empty()) << problem;

  const std::optional<TokenizerData> data = tokenizer_data_from_hf(dir);
  ASSERT_TRUE(data.has_value());
  const Tokenizer tokenizer(*data);
  std::vector<std::string> specials;
  for (const char* name : {"<|im_start|>", "<|endoftext|>", "<start_of_turn>", "<bos>", "<eos>"}) {
    if (tokenizer.find_token(name)) specials.emplace_back(name);
  }
  const std::vector<std::string> texts = test_texts(specials);
  TempDir work;
  std::ofstream(work.path / "texts.json") << Json(texts).dump();
  const std::string run = reference({"encode-hf", dir.string(), (work.path / "texts.json").string(),
                                     (work.path / "ids.json").string()},
                                    work.path / "log.txt");
  if (run.starts_with("skip: ")) GTEST_SKIP() << run;
  ASSERT_TRUE(run.empty()) << run;
  const Json expected = read_json(work.path / "ids.json");

  size_t compared = 0, refused = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    SCOPED_TRACE(cat(kind, " text ", i, ": '", texts[i], "'"));
    const auto plain = expected["ids"][i].get<std::vector<int32_t>>();
    const auto with_specials = expected["ids_with_specials"][i].get<std::vector<int32_t>>();
    std::vector<int32_t> ours;
    try {
      ours = tokenizer.encode(texts[i], {.add_special = false});
    } catch (const Error& e) {
      // Only an NFC vocabulary may refuse, and only text it cannot vouch for.
      EXPECT_TRUE(data->nfc) << e.what();
      EXPECT_NE(std::string(e.what()).find("NFC"), std::string::npos) << e.what();
      ++refused;
      continue;
    }
    EXPECT_EQ(show(ours), show(plain));
    EXPECT_EQ(show(tokenizer.encode(texts[i])), show(with_specials));
    // Decoding: the tokenizers decoders drop SentencePiece's prefix space once, at the
    // start; onepass also drops the one it adds after each special or user-defined token (as
    // llama.cpp does), giving back the text where the library keeps an extra space.
    bool has_special = false;
    for (const std::string& s : specials) has_special |= texts[i].find(s) != std::string::npos;
    if (!has_special) {
      const std::string decoded =
          tokenizer.decode(plain, {.render_special = true, .strip_space_prefix = true});
      const std::string reference_text = expected["decoded"][i].get<std::string>();
      if (decoded != reference_text) {
        EXPECT_TRUE(data->model == "sentencepiece-bpe" && data->add_space_prefix) << decoded;
        EXPECT_EQ(decoded, texts[i]) << "the library decodes '" << reference_text << "'";
      }
    }
    ++compared;
  }
  std::printf("[ %-16s] %zu texts compared with tokenizers, %zu refused (NFC)\n", kind.c_str(), compared,
              refused);
  EXPECT_LE(refused, data->nfc ? 3u : 0u);
}

INSTANTIATE_TEST_SUITE_P(Family, TokenizerJsonReference,
                         ::testing::Values("qwen2", "deepseek-r1-qwen", "deepseek-v3", "tekken",
                                           "llama3", "smollm", "gemma", "llama2",
                                           "metaspace-first"),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// ---------------------------------------------------------------------------------------
// Added tokens that strip the whitespace beside them (lstrip / rstrip, as Phi-3's chat
// tokens and RoBERTa's <mask> set them), against the tokenizers library: byte-level
// (qwen2), and Phi-3's SentencePiece normaliser over Gemma's vocabulary (llama2), where
// "\n", "\t" and "  " are added tokens themselves and so survive an rstrip before them.

class TokenizerJsonStrip : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerJsonStrip, MatchesHuggingFaceTokenizers) {
  const std::string kind = GetParam();
  const auto [source, problem] = hf_directory(kind);
  if (problem.starts_with("skip: ")) GTEST_SKIP() << problem;
  ASSERT_TRUE(problem.empty()) << problem;

  // The family's file with lstrip on one added token, rstrip on another, both on a third.
  Json root = read_json(source / "tokenizer.json");
  const std::vector<std::pair<std::string, std::pair<bool, bool>>> flags = {
      {"<|im_start|>", {true, false}},  {"<|im_end|>", {false, true}},
      {"<|endoftext|>", {true, true}},  {"<start_of_turn>", {false, true}},
      {"<end_of_turn>", {true, false}}, {"<eos>", {true, true}}};
  std::vector<std::string> stripping;
  for (Json& token : root["added_tokens"]) {
    for (const auto& [name, strip] : flags) {
      if (token["content"] != name) continue;
      token["lstrip"] = strip.first;
      token["rstrip"] = strip.second;
      stripping.push_back(name);
    }
  }
  ASSERT_EQ(stripping.size(), 3u) << "the vocabulary lacks the tokens this test strips";
  TempDir dir;
  std::ofstream(dir.path / "tokenizer.json") << root.dump();
  fs::copy_file(source / "tokenizer_config.json", dir.path / "tokenizer_config.json");
  const std::optional<TokenizerData> data = tokenizer_data_from_hf(dir.path);
  ASSERT_TRUE(data.has_value());
  ASSERT_EQ(std::count_if(data->added_token_rules.begin(), data->added_token_rules.end(),
                          [](const AddedTokenRule& r) { return r.left || r.right; }),
            3);
  const Tokenizer tokenizer(*data);

  // Whitespace of several kinds and lengths on both sides of each token, tokens back to back.
  const char* spaces[] = {" ", "  ", "\t", "\n", " \n ", "\u00a0", "\u3000", "\u2003 ", "\r\n\t"};
  std::vector<std::string> texts = test_texts(stripping);
  for (const std::string& token : stripping) {
    for (const char* ws : spaces) {
      texts.push_back(cat("a", ws, token, ws, "b"));
      texts.push_back(cat(ws, token));
      texts.push_back(cat(token, ws));
      texts.push_back(cat(ws, token, ws, token, ws, "x"));
      for (const std::string& other : stripping)
        texts.push_back(cat("Hi", ws, token, ws, other, ws, "there"));
    }
  }
  TempDir work;
  std::ofstream(work.path / "texts.json") << Json(texts).dump();
  const std::string run =
      reference({"encode-hf", dir.path.string(), (work.path / "texts.json").string(),
                 (work.path / "ids.json").string()},
                work.path / "log.txt");
  if (run.starts_with("skip: ")) GTEST_SKIP() << run;
  ASSERT_TRUE(run.empty()) << run;
  const Json expected = read_json(work.path / "ids.json");
  size_t compared = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    SCOPED_TRACE(cat(kind, " text ", i, ": '", texts[i], "'"));
    std::vector<int32_t> ours;
    try {
      ours = tokenizer.encode(texts[i], {.add_special = false});
    } catch (const Error& e) {
      EXPECT_TRUE(data->nfc) << e.what();  // only text NFC could change is refused
      continue;
    }
    EXPECT_EQ(show(ours), show(expected["ids"][i].get<std::vector<int32_t>>()));
    EXPECT_EQ(show(tokenizer.encode(texts[i])),
              show(expected["ids_with_specials"][i].get<std::vector<int32_t>>()));
    ++compared;
  }
  std::printf("[ %-16s] %zu texts with whitespace-stripping tokens compared with tokenizers\n",
              kind.c_str(), compared);
  EXPECT_GT(compared, texts.size() - 4);
}

INSTANTIATE_TEST_SUITE_P(Family, TokenizerJsonStrip, ::testing::Values("qwen2", "llama2"),
                         [](const auto& param_info) { return std::string(param_info.param); });

// ---------------------------------------------------------------------------------------
// Added tokens that match only as whole words (single_word), against the tokenizers library:
// before and after each, word characters of several kinds (letters, digits, "_", a combining
// mark, CJK), other characters and the ends of the text; tokens found in the text as given
// (special, or normalized: false) and in the second pass over the text between them
// (normalized: true), whose single_word check sees only that text; a match that fails is
// skipped whole, so a token overlapping it is not found either.

class TokenizerJsonSingleWord : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerJsonSingleWord, MatchesHuggingFaceTokenizers) {
  const std::string kind = GetParam();
  const auto [source, problem] = hf_directory(kind);
  if (problem.starts_with("skip: ")) GTEST_SKIP() << problem;
  ASSERT_TRUE(problem.empty()) << problem;

  Json root = read_json(source / "tokenizer.json");
  int64_t next_id = 0;
  for (const auto& [text, id] : root["model"]["vocab"].items()) next_id = std::max(next_id, id.get<int64_t>() + 1);
  for (const Json& token : root["added_tokens"]) next_id = std::max(next_id, token["id"].get<int64_t>() + 1);
  struct Added {
    std::string content;
    bool special, single_word, lstrip, rstrip, normalized;
  };
  const std::vector<Added> added = {
      {"zap", false, true, false, false, false},  // first pass
      {"qux", false, true, false, false, true},   // second pass
      {"<w>", true, true, false, false, false},   // no word characters of its own
      {"ab", false, true, true, true, false},     // with the whitespace beside it
      {"K9", true, false, false, false, false},   // a plain special ending in word characters
      {"apz", false, false, false, false, false}, // overlaps "zap"
  };
  std::vector<std::string> contents;
  for (const Added& a : added) {
    // A content already in the vocabulary keeps its id there, as the library gives it.
    const auto in_vocab = root["model"]["vocab"].find(a.content);
    const int64_t id = in_vocab != root["model"]["vocab"].end() ? in_vocab->get<int64_t>() : next_id++;
    root["added_tokens"].push_back({{"id", id},
                                    {"content", a.content},
                                    {"special", a.special},
                                    {"single_word", a.single_word},
                                    {"lstrip", a.lstrip},
                                    {"rstrip", a.rstrip},
                                    {"normalized", a.normalized}});
    contents.push_back(a.content);
  }
  TempDir dir;
  std::ofstream(dir.path / "tokenizer.json") << root.dump();
  fs::copy_file(source / "tokenizer_config.json", dir.path / "tokenizer_config.json");
  const std::optional<TokenizerData> data = tokenizer_data_from_hf(dir.path);
  ASSERT_TRUE(data.has_value());
  EXPECT_EQ(std::count_if(data->added_token_rules.begin(), data->added_token_rules.end(),
                          [](const AddedTokenRule& r) { return r.single_word; }),
            4);
  const Tokenizer tokenizer(*data);

  const char* neighbours[] = {"",  " ", "  ", "x", "Z", "9", "_", "-", ".", "\u00e9", "\u4e2d",
                              "\u0301", "\n", "K9", "<w>", "zap", "\u00a0", "\u0663"};
  std::vector<std::string> texts = test_texts(contents);
  for (const char* word : {"zap", "qux", "<w>", "ab"}) {
    for (const char* before : neighbours) {
      for (const char* after : neighbours) texts.push_back(cat(before, word, after));
    }
  }
  for (const char* text :
       {"zapzap", "zap zap", "a zap b", "xzap zapx zap", "zapz", "zapz apz", "1ab2", " ab ",
        "x  ab  y", "ab", "K9qux", "quxK9", "K9 qux", "K9zap", "K9qux9", "<w><w>", "a<w>b",
        "qux qux_qux quxqux", "ab ab", "zab ab", "K9ab", "abK9", "xK9", "the zap, the qux."}) {
    texts.push_back(text);
  }
  TempDir work;
  std::ofstream(work.path / "texts.json") << Json(texts).dump();
  const std::string run =
      reference({"encode-hf", dir.path.string(), (work.path / "texts.json").string(),
                 (work.path / "ids.json").string()},
                work.path / "log.txt");
  if (run.starts_with("skip: ")) GTEST_SKIP() << run;
  ASSERT_TRUE(run.empty()) << run;
  const Json expected = read_json(work.path / "ids.json");
  size_t compared = 0, refused = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    SCOPED_TRACE(cat(kind, " text ", i, ": '", texts[i], "'"));
    std::vector<int32_t> ours;
    try {
      ours = tokenizer.encode(texts[i], {.add_special = false});
    } catch (const Error& e) {
      EXPECT_TRUE(data->nfc) << e.what();  // only text NFC could change is refused
      ++refused;
      continue;
    }
    EXPECT_EQ(show(ours), show(expected["ids"][i].get<std::vector<int32_t>>()));
    ++compared;
  }
  std::printf("[ %-16s] %zu texts with single-word tokens compared with tokenizers, %zu refused (NFC)\n",
              kind.c_str(), compared, refused);
  EXPECT_GT(compared, texts.size() * 9 / 10);
}

INSTANTIATE_TEST_SUITE_P(Family, TokenizerJsonSingleWord,
                         ::testing::Values("qwen2", "gemma", "metaspace-first"),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// ---------------------------------------------------------------------------------------
// Unsupported fields: an error naming the file and the field

// A small valid byte-level tokenizer.json; `edit` changes it before it is written.
std::string load_error(const std::function<void(Json&, Json&)>& edit) {
  Json vocab = Json::object();
  const auto& bytes = unicode::byte_to_unicode();
  for (size_t b = 0; b < 256; ++b) vocab[bytes[unicode::gpt2_byte_order()[b]]] = b;
  Json root = {
      {"version", "1.0"},
      {"added_tokens",
       Json::array({{{"id", 256}, {"content", "<|end|>"}, {"special", true}, {"lstrip", false},
                     {"rstrip", false}, {"single_word", false}, {"normalized", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", Json::array()}, {"dropout", nullptr},
                 {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                 {"byte_fallback", false}, {"ignore_merges", false}}}};
  Json config = {{"eos_token", "<|end|>"}};
  edit(root, config);
  TempDir dir;
  std::ofstream(dir.path / "tokenizer.json") << root.dump();
  std::ofstream(dir.path / "tokenizer_config.json") << config.dump();
  try {
    const std::optional<TokenizerData> data = tokenizer_data_from_hf(dir.path);
    if (!data) return "no data";
    const Tokenizer tokenizer(*data);
    (void)tokenizer.encode("Hello world");
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(TokenizerJson, UnsupportedFieldsAreNamed) {
  EXPECT_EQ(load_error([](Json&, Json&) {}), "");
  struct Case {
    std::function<void(Json&, Json&)> edit;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](Json& r, Json&) { r["model"]["type"] = "Unigram"; },
       "model.type \"Unigram\" is not supported"},
      {[](Json& r, Json&) { r["model"]["continuing_subword_prefix"] = "##"; },
       "model.continuing_subword_prefix is \"##\""},
      {[](Json& r, Json&) { r["model"]["dropout"] = 0.1; }, "model.dropout is 0.1"},
      {[](Json& r, Json&) {
         r["pre_tokenizer"] = nullptr;
         r["normalizer"] = {
             {"type", "Sequence"},
             {"normalizers",
              Json::array({{{"type", "Prepend"}, {"prepend", "\u2581"}},
                           {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}})}};
         r["added_tokens"].push_back({{"id", 257}, {"content", "ab"}, {"special", false}});
       },
       "added_tokens[1] ('ab') is matched after normalisation (normalized: true)"},
      {[](Json& r, Json&) {
         r["pre_tokenizer"] = nullptr;
         r["normalizer"] = {
             {"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
         r["added_tokens"].push_back(
             {{"id", 257}, {"content", "ab"}, {"special", false}, {"lstrip", true}});
       },
       "added_tokens[1] ('ab') strips whitespace and is matched after spaces become U+2581"},
      {[](Json& r, Json&) {
         r["normalizer"] = {{"type", "Lowercase"}};
       },
       "normalizer.type \"Lowercase\" is not supported"},
      {[](Json& r, Json&) {
         r["pre_tokenizer"] = {{"type", "Whitespace"}};
       },
       "pre_tokenizer.type \"Whitespace\" is not supported"},
      {[](Json& r, Json&) { r["pre_tokenizer"]["add_prefix_space"] = true; },
       "pre_tokenizer.add_prefix_space: true is not supported"},
      {[](Json& r, Json&) {
         r["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers", Json::array({r["pre_tokenizer"],
                                                              {{"type", "Digits"}, {"individual_digits", true}}})}};
       },
       "pre_tokenizer.pretokenizers[1] (Digits) comes after the ByteLevel step"},
      {[](Json& r, Json&) {
         r["pre_tokenizer"] = {
             {"type", "Sequence"},
             {"pretokenizers",
              Json::array({{{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}},
                           {{"type", "ByteLevel"}, {"use_regex", false}}})}};
       },
       "regex does not compile"},
      {[](Json& r, Json&) {
         r["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "x"}}}, {"behavior", "Sideways"}};
       },
       "pre_tokenizer.behavior \"Sideways\" is not supported"},
      {[](Json& r, Json&) { r["model"]["merges"] = Json::array({"a b c"}); },
       "model.merges[0] is \"a b c\", expected two tokens separated by one space"},
      {[](Json& r, Json&) { r["model"]["merges"] = Json::array({Json::array({"a"})}); },
       "model.merges[0] is [\"a\"], expected"},
      {[](Json& r, Json&) {
         r["post_processor"] = {{"type", "BertProcessing"}};
       },
       "post_processor.type \"BertProcessing\" is not supported"},
      {[](Json&, Json& c) { c["bos_token"] = "<s>"; }, "bos_token '<s>' is not a token"},
      {[](Json&, Json& c) { c["add_bos_token"] = true; }, "BOS is to be added but no bos_token"},
      {[](Json& r, Json&) { r["model"]["vocab"]["Hello"] = 3; }, "id 3 is already"},
      {[](Json& r, Json&) { r["pre_tokenizer"] = nullptr; },
       "neither a ByteLevel pre-tokenizer nor spaces replaced by U+2581"},
      {[](Json& r, Json&) {
         r["pre_tokenizer"] = nullptr;
         r["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
         r["added_tokens"].push_back({{"id", 257}, {"content", "a  b"}, {"special", false}});
       },
       "added_tokens[1] ('a  b') is matched after normalisation (normalized: true)"},
  };
  for (const Case& c : cases) {
    const std::string error = load_error(c.edit);
    EXPECT_NE(error.find(c.expected), std::string::npos) << "expected '" << c.expected << "' in: " << error;
    EXPECT_NE(error.find("tokenizer"), std::string::npos) << error;
  }
}

// ---------------------------------------------------------------------------------------
// The NFC check never passes text that Python's unicodedata would change

TEST(TokenizerJson, NfcCheckAgreesWithUnicodedata) {
  if (std::system("python3 -c 'import unicodedata' > /dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  std::mt19937 rng(5);
  auto pick = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
  const std::pair<uint32_t, uint32_t> blocks[] = {{0x41, 0x7A},   {0xC0, 0x24F},   {0x300, 0x36F},
                                                  {0x591, 0x5C7}, {0x900, 0x97F},  {0x1100, 0x11FF},
                                                  {0xAC00, 0xAC40}, {0x1E00, 0x1FFF}, {0x2100, 0x214F},
                                                  {0xF900, 0xFA2F}, {0x3099, 0x309C}, {0x4E00, 0x4E40}};
  std::vector<std::string> texts;
  for (int t = 0; t < 4000; ++t) {
    std::string text;
    const uint32_t length = pick(1, 5);
    for (uint32_t i = 0; i < length; ++i) {
      const auto& [lo, hi] = blocks[pick(0, 11)];
      append_cp(text, pick(lo, hi));
    }
    texts.push_back(std::move(text));
  }
  TempDir dir;
  std::ofstream(dir.path / "texts.json") << Json(texts).dump();
  const std::string script =
      "import json,sys,unicodedata\n"
      "t=json.load(open(sys.argv[1],encoding='utf-8'))\n"
      "json.dump([unicodedata.is_normalized('NFC',s) for s in t],open(sys.argv[2],'w'))\n";
  std::ofstream(dir.path / "nfc.py") << script;
  const std::string run = run_command("python3 " + quote((dir.path / "nfc.py").string()) + " " +
                                          quote((dir.path / "texts.json").string()) + " " +
                                          quote((dir.path / "nfc.json").string()),
                                      dir.path / "log.txt");
  ASSERT_TRUE(run.empty()) << run;
  const auto stable = read_json(dir.path / "nfc.json").get<std::vector<bool>>();
  size_t changed = 0, cautious = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const bool ours = unicode::find_nfc_unstable(texts[i]) == texts[i].size();
    if (!stable[i]) {
      ++changed;
      EXPECT_FALSE(ours) << "text " << i << " changes under NFC but passed: " << texts[i];
    } else if (!ours) {
      ++cautious;
    }
  }
  std::printf("%zu of %zu texts change under NFC, all refused; %zu stable ones refused too\n", changed,
              texts.size(), cautious);
  EXPECT_GT(changed, 100u);
  EXPECT_LT(cautious, changed);
}

// ---------------------------------------------------------------------------------------
// An mlx-lm directory: its tokenizer.json and chat template reach `onepass generate`

// Writes a random f16 llama model of `vocab` embedding rows (tied output) into `dir`.
void write_mlx_model(const fs::path& dir, int64_t vocab) {
  const int64_t hidden = 64, ffn = 128, layers = 2, heads = 4, kv_heads = 2, head_dim = 16;
  std::ofstream(dir / "config.json")
      << Json{{"model_type", "llama"},         {"hidden_size", hidden},  {"intermediate_size", ffn},
              {"num_hidden_layers", layers},   {"num_attention_heads", heads},
              {"num_key_value_heads", kv_heads}, {"vocab_size", vocab}, {"rms_norm_eps", 1e-5},
              {"tie_word_embeddings", true}}
             .dump();
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors = {
      {"model.embed_tokens.weight", {vocab, hidden}}, {"model.norm.weight", {hidden}}};
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = cat("model.layers.", l, ".");
    tensors.push_back({p + "input_layernorm.weight", {hidden}});
    tensors.push_back({p + "post_attention_layernorm.weight", {hidden}});
    tensors.push_back({p + "self_attn.q_proj.weight", {heads * head_dim, hidden}});
    tensors.push_back({p + "self_attn.k_proj.weight", {kv_heads * head_dim, hidden}});
    tensors.push_back({p + "self_attn.v_proj.weight", {kv_heads * head_dim, hidden}});
    tensors.push_back({p + "self_attn.o_proj.weight", {hidden, heads * head_dim}});
    tensors.push_back({p + "mlp.gate_proj.weight", {ffn, hidden}});
    tensors.push_back({p + "mlp.up_proj.weight", {ffn, hidden}});
    tensors.push_back({p + "mlp.down_proj.weight", {hidden, ffn}});
  }
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-0.2f, 0.2f);
  Json header = Json::object();
  std::string payload;
  for (const auto& [name, shape] : tensors) {
    int64_t count = 1;
    for (const int64_t d : shape) count *= d;
    const size_t begin = payload.size();
    for (int64_t i = 0; i < count; ++i) {
      const float value = shape.size() == 1 ? 1.0f + dist(rng) : dist(rng);
      const uint16_t bits = f32_to_f16(value);
      payload.append(reinterpret_cast<const char*>(&bits), 2);
    }
    header[name] = {{"dtype", "F16"}, {"shape", shape}, {"data_offsets", {begin, payload.size()}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(dir / "model.safetensors", std::ios::binary);
  const uint64_t length = text.size();
  out.write(reinterpret_cast<const char*>(&length), 8);
  out << text << payload;
}

fs::path tool_path() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : self.parent_path() / "onepass";
}

TEST(TokenizerJson, MlxDirectoryGeneratesWithItsTokenizerAndTemplate) {
  const auto [qwen2, problem] = hf_directory("qwen2");
  if (problem.starts_with("skip: ")) GTEST_SKIP() << problem;
  ASSERT_TRUE(problem.empty()) << problem;
  TempDir mlx;
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
    fs::copy_file(qwen2 / file, mlx.path / file);
  }
  // Embedding rows past the vocabulary, as Qwen2's are padded to a round size.
  const int64_t vocab_rows = 49152 + 64;
  write_mlx_model(mlx.path, vocab_rows);

  const std::unique_ptr<ModelSource> source = open_model(mlx.path);
  const std::optional<TokenizerData> data = source->tokenizer_data();
  ASSERT_TRUE(data.has_value());
  EXPECT_EQ(data->source, (mlx.path / "tokenizer.json").string());
  ASSERT_EQ(static_cast<int64_t>(data->tokens.size()), vocab_rows);
  const Tokenizer tokenizer(*data);
  EXPECT_EQ(tokenizer.token_type(static_cast<int32_t>(vocab_rows - 1)), TokenType::kUnused);
  EXPECT_EQ(tokenizer.data().chat_template.find("[SYS]") != std::string::npos, true);

  // The chat prompt as jinja2 renders the template of tokenizer_config.json.
  const std::vector<ChatMessage> messages = {{"system", "  Be brief. "},
                                             {"user", "Name 3 colours, café 你好!"}};
  const std::string ours = render_chat(tokenizer, messages);
  const Json config = read_json(mlx.path / "tokenizer_config.json");
  jinja::Json variables = {{"messages", jinja::Json::array()},
                           {"add_generation_prompt", true},
                           {"bos_token", config["bos_token"].get<std::string>()},
                           {"eos_token", config["eos_token"].get<std::string>()}};
  for (const ChatMessage& m : messages) {
    variables["messages"].push_back({{"role", m.role}, {"content", m.content}});
  }
  std::string skip;
  const auto rendered = onepass::testing::render_with_jinja2(
      {{config["chat_template"].get<std::string>(), variables}}, skip);
  if (!rendered) GTEST_SKIP() << skip;
  ASSERT_EQ(rendered->size(), 1u) << skip;
  ASSERT_TRUE((*rendered)[0].text.has_value()) << (*rendered)[0].error;
  EXPECT_EQ(ours, *(*rendered)[0].text);

  // Its ids as the tokenizers library gives them.
  TempDir work;
  std::ofstream(work.path / "texts.json") << Json(std::vector<std::string>{ours}).dump();
  const std::string run = reference({"encode-hf", mlx.path.string(), (work.path / "texts.json").string(),
                                     (work.path / "ids.json").string()},
                                    work.path / "log.txt");
  ASSERT_TRUE(run.empty()) << run;
  const auto expected = read_json(work.path / "ids.json")["ids_with_specials"][0].get<std::vector<int32_t>>();
  EXPECT_EQ(show(tokenizer.encode(ours)), show(expected));

  // `onepass generate --chat` on the directory: the same prompt, the same token count.
  const fs::path tool = tool_path();
  if (tool.empty() || !fs::exists(tool)) GTEST_SKIP() << "the onepass binary is not built next to this test";
  const std::string command = cat(quote(tool.string()), " generate -m ", quote(mlx.path.string()),
                                  " --chat --system ", quote(messages[0].content), " -p ",
                                  quote(messages[1].content), " -n 3 --echo -v --backend cpu > ",
                                  quote((work.path / "out.txt").string()), " 2> ",
                                  quote((work.path / "err.txt").string()));
  const int status = std::system(command.c_str());
  std::ifstream out_file(work.path / "out.txt"), err_file(work.path / "err.txt");
  const std::string out((std::istreambuf_iterator<char>(out_file)), std::istreambuf_iterator<char>());
  const std::string err((std::istreambuf_iterator<char>(err_file)), std::istreambuf_iterator<char>());
  ASSERT_EQ(status, 0) << err;
  EXPECT_TRUE(out.starts_with(ours)) << out;
  EXPECT_NE(err.find(cat("prompt: ", expected.size(), " tokens")), std::string::npos) << err;
}

}  // namespace
}  // namespace onepass::model
