// Hugging Face tokenizer files (tokenizer.json, tokenizer_config.json, chat_template.jinja)
// as TokenizerData: the BPE model, the normalizer and pre-tokenizer steps the supported
// families use, BOS/EOS and the chat template. A step or field outside that set is an error
// naming it, so an unsupported file never tokenizes into wrong ids.
#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/tokenizer_internal.h"
#include "model/unicode.h"
#include "onepass/core/error.h"
#include "onepass/model/loader.h"
#include "onepass/model/mapped_file.h"

namespace onepass::model {
namespace {

using nlohmann::json;

constexpr std::string_view kWhere = "tokenizer";
constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's space
// Ids beyond this are taken for a corrupt file rather than a vocabulary.
constexpr int64_t kMaxTokens = int64_t{1} << 24;

std::string read_text(const std::filesystem::path& path) {
  require_regular_file(path, kWhere);
  std::ifstream in(path, std::ios::binary);
  check(in.good(), kWhere, "cannot read '", path.string(), "'");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

json read_json(const std::filesystem::path& path) {
  const std::string text = read_text(path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail(kWhere, path.string(), " is not valid JSON: ", e.what());
  }
}

std::string shown(const json& value) {
  std::string text = value.dump();
  return text.size() > 60 ? text.substr(0, 60) + "..." : text;
}

// Reads one tokenizer.json into TokenizerData, naming the file and the field in errors.
class TokenizerJsonReader {
 public:
  TokenizerJsonReader(const std::filesystem::path& path, TokenizerData& data)
      : file_(path.string()), data_(data) {}

  void read(const json& root) {
    check(root.is_object(), kWhere, file_, " is a ", root.type_name(), ", expected an object");
    read_model(member(root, "model", "model"));
    read_added_tokens(root);
    if (const json* n = optional(root, "normalizer")) read_normalizer(*n, "normalizer");
    if (const json* p = optional(root, "pre_tokenizer")) read_pre_tokenizer(*p, "pre_tokenizer");
    if (const json* p = optional(root, "post_processor")) {
      read_post_processor(*p, "post_processor");
    }
    finish();
  }

 private:
  [[noreturn]] void unsupported(const std::string& field, const json& value,
                                std::string_view expected) const {
    fail(kWhere, file_, ": ", field, " ", shown(value), " is not supported (", expected, ")");
  }

  const json& member(const json& object, const char* key, const std::string& field) const {
    const auto it = object.find(key);
    check(it != object.end(), kWhere, file_, ": ", field, " is missing");
    return *it;
  }
  // The member, or nullptr when absent or null.
  static const json* optional(const json& object, const char* key) {
    const auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }
  std::string string_of(const json& object, const char* key, const std::string& field) const {
    const json& value = member(object, key, field);
    check(value.is_string(), kWhere, file_, ": ", field, " is ", shown(value),
          ", expected a string");
    return value.get<std::string>();
  }
  bool bool_of(const json& object, const char* key, bool fallback,
               const std::string& field) const {
    const json* value = optional(object, key);
    if (value == nullptr) return fallback;
    check(value->is_boolean(), kWhere, file_, ": ", field, " is ", shown(*value),
          ", expected true or false");
    return value->get<bool>();
  }
  // A field that must keep the value in which it changes nothing.
  void require_default(const json& object, const char* key, const json& neutral,
                       const std::string& field) const {
    const json* value = optional(object, key);
    if (value == nullptr || *value == neutral) return;
    if (neutral.is_string() && value->is_string() && value->get<std::string>().empty()) return;
    fail(kWhere, file_, ": ", field, " is ", shown(*value), "; only ", neutral.dump(),
         " is supported");
  }

  void set_token(int64_t id, const std::string& text, TokenType type, const std::string& field) {
    check(id >= 0 && id < kMaxTokens, kWhere, file_, ": ", field, " has id ", id,
          ", expected 0..", kMaxTokens - 1);
    const auto index = static_cast<size_t>(id);
    if (index >= data_.tokens.size()) {
      data_.tokens.resize(index + 1);
      types_.resize(index + 1, kMissing);
    }
    if (types_[index] != kMissing) {
      // An added token that repeats its vocabulary entry only changes the type.
      check(data_.tokens[index] == text, kWhere, file_, ": ", field, " gives id ", id, " to '",
            text, "', but id ", id, " is already '", data_.tokens[index], "'");
    }
    data_.tokens[index] = text;
    types_[index] = static_cast<int32_t>(type);
  }

  void read_model(const json& model) {
    check(model.is_object(), kWhere, file_, ": model is ", shown(model), ", expected an object");
    const std::string type = optional(model, "type") ? string_of(model, "type", "model.type")
                                                     : std::string("BPE");
    if (type != "BPE") unsupported("model.type", model["type"], "BPE");
    require_default(model, "dropout", 0.0, "model.dropout");
    require_default(model, "continuing_subword_prefix", "", "model.continuing_subword_prefix");
    require_default(model, "end_of_word_suffix", "", "model.end_of_word_suffix");
    byte_fallback_ = bool_of(model, "byte_fallback", false, "model.byte_fallback");
    if (optional(model, "ignore_merges")) {
      data_.ignore_merges = bool_of(model, "ignore_merges", false, "model.ignore_merges");
    }

    const json& vocab = member(model, "vocab", "model.vocab");
    check(vocab.is_object(), kWhere, file_, ": model.vocab is ", shown(vocab),
          ", expected an object of token: id");
    for (const auto& [text, id] : vocab.items()) {
      check(id.is_number_integer(), kWhere, file_, ": model.vocab['", text, "'] is ", shown(id),
            ", expected an integer id");
      set_token(id.get<int64_t>(), text, TokenType::kNormal, cat("model.vocab['", text, "']"));
    }

    const json& merges = member(model, "merges", "model.merges");
    check(merges.is_array(), kWhere, file_, ": model.merges is ", shown(merges),
          ", expected an array");
    data_.merge_pairs.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const json& merge = merges[i];
      if (merge.is_string()) {
        // The older form "left right": the tokens themselves hold no space.
        const std::string text = merge.get<std::string>();
        const size_t space = text.find(' ');
        check(space != std::string::npos && space > 0 && space + 1 < text.size() &&
                  text.find(' ', space + 1) == std::string::npos,
              kWhere, file_, ": model.merges[", i, "] is ", shown(merge),
              ", expected two tokens separated by one space");
        data_.merge_pairs.emplace_back(text.substr(0, space), text.substr(space + 1));
        continue;
      }
      const bool pair = merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
                        merge[1].is_string();
      check(pair, kWhere, file_, ": model.merges[", i, "] is ", shown(merge),
            ", expected \"left right\" or [left, right]");
      data_.merge_pairs.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    }
    if (const json* unk = optional(model, "unk_token")) {
      check(unk->is_string(), kWhere, file_, ": model.unk_token is ", shown(*unk),
            ", expected a string");
      unk_token_ = unk->get<std::string>();
    }
  }

  void read_added_tokens(const json& root) {
    const json* added = optional(root, "added_tokens");
    if (added == nullptr) return;
    check(added->is_array(), kWhere, file_, ": added_tokens is ", shown(*added),
          ", expected an array");
    for (size_t i = 0; i < added->size(); ++i) {
      const json& token = (*added)[i];
      const std::string field = cat("added_tokens[", i, "]");
      check(token.is_object(), kWhere, file_, ": ", field, " is ", shown(token),
            ", expected an object");
      const json& id = member(token, "id", field + ".id");
      check(id.is_number_integer(), kWhere, file_, ": ", field, ".id is ", shown(id),
            ", expected an integer");
      const std::string content = string_of(token, "content", field + ".content");
      const bool single_word = bool_of(token, "single_word", false, field + ".single_word");
      const bool lstrip = bool_of(token, "lstrip", false, field + ".lstrip");
      const bool rstrip = bool_of(token, "rstrip", false, field + ".rstrip");
      const bool special = bool_of(token, "special", false, field + ".special");
      // Matched in the normalised text (tokenizers' default for non-special tokens); checked
      // in finish(), once the normaliser is known.
      const bool normalized =
          !special && bool_of(token, "normalized", true, field + ".normalized");
      if (normalized) {
        normalized_added_.push_back({field, content});
        if (lstrip || rstrip) normalized_stripping_.push_back({field, content});
      }
      set_token(id.get<int64_t>(), content, special ? TokenType::kControl : TokenType::kUserDefined,
                field);
      if (lstrip || rstrip || single_word || normalized) {
        data_.added_token_rules.push_back(
            {static_cast<int32_t>(id.get<int64_t>()), lstrip, rstrip, single_word, normalized});
      }
    }
  }

  void read_normalizer(const json& normalizer, const std::string& field) {
    const std::string type = string_of(normalizer, "type", field + ".type");
    if (type == "Sequence") {
      const json& steps = member(normalizer, "normalizers", field + ".normalizers");
      check(steps.is_array(), kWhere, file_, ": ", field, ".normalizers is not an array");
      for (size_t i = 0; i < steps.size(); ++i) {
        read_normalizer(steps[i], cat(field, ".normalizers[", i, "]"));
      }
    } else if (type == "Prepend") {
      const std::string prepend = string_of(normalizer, "prepend", field + ".prepend");
      if (prepend != kSpaceMark) unsupported(field + ".prepend", normalizer["prepend"], "\"\u2581\"");
      prepend_ = true;
    } else if (type == "Replace") {
      const json& pattern = member(normalizer, "pattern", field + ".pattern");
      const std::string content = string_of(normalizer, "content", field + ".content");
      const bool space_to_mark = pattern.is_object() && pattern.contains("String") &&
                                 pattern["String"] == " " && content == kSpaceMark;
      if (!space_to_mark) unsupported(field, normalizer, "only Replace \" \" with \"\u2581\"");
      space_mark_ = true;
    } else if (type == "NFC") {
      // NFC leaves text that is already composed unchanged, which is what the encoder
      // assumes; see TokenizerData::nfc.
      data_.nfc = true;
    } else {
      unsupported(field + ".type", normalizer["type"], "Sequence, Prepend, Replace, NFC");
    }
  }

  void read_pre_tokenizer(const json& pre, const std::string& field) {
    const std::string type = string_of(pre, "type", field + ".type");
    if (type == "Sequence") {
      const json& steps = member(pre, "pretokenizers", field + ".pretokenizers");
      check(steps.is_array(), kWhere, file_, ": ", field, ".pretokenizers is not an array");
      for (size_t i = 0; i < steps.size(); ++i) {
        read_pre_tokenizer(steps[i], cat(field, ".pretokenizers[", i, "]"));
      }
      return;
    }
    // ByteLevel maps bytes to characters: a regex after it would see the mapped text.
    check(!byte_level_, kWhere, file_, ": ", field, " (", type,
          ") comes after the ByteLevel step, which is not supported");
    if (type == "ByteLevel") {
      check(!bool_of(pre, "add_prefix_space", false, field + ".add_prefix_space"), kWhere, file_,
            ": ", field, ".add_prefix_space: true is not supported");
      if (bool_of(pre, "use_regex", true, field + ".use_regex")) {
        add_split(std::string(tokenizer_detail::gpt2_split_pattern()),
                  PreTokenizerSplit::Behavior::kIsolated, false);
      }
      byte_level_ = true;
    } else if (type == "Split") {
      const json& pattern = member(pre, "pattern", field + ".pattern");
      std::string regex;
      if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
        regex = pattern["Regex"].get<std::string>();
      } else if (pattern.is_object() && pattern.contains("String") &&
                 pattern["String"].is_string()) {
        regex = literal_pattern(pattern["String"].get<std::string>());
      } else {
        unsupported(field + ".pattern", pattern, "{\"Regex\": ...} or {\"String\": ...}");
      }
      add_split(std::move(regex), behavior(pre, field),
                bool_of(pre, "invert", false, field + ".invert"));
    } else if (type == "Digits") {
      const bool each = bool_of(pre, "individual_digits", false, field + ".individual_digits");
      add_split(each ? R"(\p{N})" : R"(\p{N}+)", PreTokenizerSplit::Behavior::kIsolated, false);
    } else if (type == "Metaspace") {
      check(!data_.pre_splits && !metaspace_, kWhere, file_, ": ", field,
            " (Metaspace) after another pre-tokenizer step is not supported");
      const std::string replacement = string_of(pre, "replacement", field + ".replacement");
      if (replacement != kSpaceMark) {
        unsupported(field + ".replacement", pre["replacement"], "\"\u2581\"");
      }
      std::string scheme = "always";
      if (optional(pre, "prepend_scheme")) {
        scheme = string_of(pre, "prepend_scheme", field + ".prepend_scheme");
      } else if (!bool_of(pre, "add_prefix_space", true, field + ".add_prefix_space")) {
        scheme = "never";
      }
      if (scheme != "always" && scheme != "first" && scheme != "never") {
        unsupported(field + ".prepend_scheme", pre["prepend_scheme"], "always, first, never");
      }
      metaspace_ = true;
      space_mark_ = true;
      metaspace_scheme_ = scheme;
      // Each U+2581 starts a new piece.
      if (bool_of(pre, "split", true, field + ".split")) {
        add_split(std::string(kSpaceMark), PreTokenizerSplit::Behavior::kMergedWithNext, false);
      }
    } else {
      unsupported(field + ".type", pre["type"], "Sequence, ByteLevel, Split, Digits, Metaspace");
    }
  }

  PreTokenizerSplit::Behavior behavior(const json& pre, const std::string& field) const {
    using Behavior = PreTokenizerSplit::Behavior;
    const std::string name = string_of(pre, "behavior", field + ".behavior");
    if (name == "Isolated") return Behavior::kIsolated;
    if (name == "Removed") return Behavior::kRemoved;
    if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
    if (name == "MergedWithNext") return Behavior::kMergedWithNext;
    if (name == "Contiguous") return Behavior::kContiguous;
    unsupported(field + ".behavior", pre["behavior"],
                "Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous");
  }

  // A PCRE2 pattern matching `text` literally: ASCII punctuation escaped, the rest as is.
  static std::string literal_pattern(const std::string& text) {
    std::string out;
    for (const char c : text) {
      const auto byte = static_cast<unsigned char>(c);
      if (byte < 0x80 && !std::isalnum(byte)) out += '\\';
      out += c;
    }
    return out;
  }

  void add_split(std::string pattern, PreTokenizerSplit::Behavior behavior, bool invert) {
    if (!data_.pre_splits) data_.pre_splits.emplace();
    data_.pre_splits->push_back({std::move(pattern), behavior, invert});
  }

  void read_post_processor(const json& post, const std::string& field) {
    const std::string type = string_of(post, "type", field + ".type");
    if (type == "Sequence") {
      const json& steps = member(post, "processors", field + ".processors");
      check(steps.is_array(), kWhere, file_, ": ", field, ".processors is not an array");
      for (size_t i = 0; i < steps.size(); ++i) {
        read_post_processor(steps[i], cat(field, ".processors[", i, "]"));
      }
    } else if (type == "ByteLevel") {
      // Offsets only.
    } else if (type == "TemplateProcessing") {
      // BOS / EOS are the special tokens before / after the text in the single template.
      const json& single = member(post, "single", field + ".single");
      check(single.is_array(), kWhere, file_, ": ", field, ".single is not an array");
      bool after_text = false;
      for (const json& piece : single) {
        if (piece.contains("Sequence")) {
          after_text = true;
          continue;
        }
        const json* special = piece.is_object() && piece.contains("SpecialToken")
                                  ? &piece["SpecialToken"]
                                  : nullptr;
        check(special != nullptr && special->contains("id") && (*special)["id"].is_string(),
              kWhere, file_, ": ", field, ".single holds ", shown(piece),
              ", expected {\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": ...}");
        (after_text ? template_eos_ : template_bos_) = (*special)["id"].get<std::string>();
      }
    } else {
      unsupported(field + ".type", post["type"], "Sequence, ByteLevel, TemplateProcessing");
    }
  }

  void finish() {
    for (size_t i = 0; i < types_.size(); ++i) {
      if (types_[i] != kMissing) continue;
      // Ids no token names: placeholders that never match text.
      data_.tokens[i] = cat("[onepass:unused ", i, "]");
      types_[i] = static_cast<int32_t>(TokenType::kUnused);
    }
    check(!data_.tokens.empty(), kWhere, file_, ": model.vocab is empty");
    if (byte_level_) {
      check(!byte_fallback_ && !space_mark_ && !prepend_, kWhere, file_,
            ": a ByteLevel pre-tokenizer together with byte_fallback or a U+2581 space "
            "replacement is not supported");
      data_.model = "gpt2";
    } else {
      check(space_mark_, kWhere, file_,
            ": a BPE model with neither a ByteLevel pre-tokenizer nor spaces replaced by "
            "U+2581 (Replace normalizer or Metaspace) is not supported");
      data_.model = "sentencepiece-bpe";
      if (metaspace_) {
        data_.add_space_prefix = metaspace_scheme_ != "never";
        data_.space_prefix_if_missing = true;
        data_.space_prefix_first_only = metaspace_scheme_ == "first";
      } else {
        data_.add_space_prefix = prepend_;
      }
      for (size_t i = 0; i < data_.tokens.size(); ++i) {
        if (types_[i] == static_cast<int32_t>(TokenType::kNormal) &&
            tokenizer_detail::parse_byte_token(data_.tokens[i]) >= 0) {
          types_[i] = static_cast<int32_t>(byte_fallback_ ? TokenType::kByte : TokenType::kNormal);
        }
      }
    }
    // onepass matches added tokens in the text as given: right for a normalised one only
    // where normalising leaves its text alone (a Prepend normaliser puts U+2581 before it).
    for (const auto& [field, content] : normalized_added_) {
      const bool changes = prepend_ || (space_mark_ && content.find(' ') != std::string::npos) ||
                           (data_.nfc && unicode::find_nfc_unstable(content) != content.size());
      check(!changes, kWhere, file_, ": ", field, " ('", content,
            "') is matched after normalisation (normalized: true), which changes its text; "
            "this is not supported");
    }
    // tokenizers matches a normalised token after the normaliser has turned spaces into
    // U+2581, which lstrip / rstrip then no longer see as whitespace.
    for (const auto& [field, content] : normalized_stripping_) {
      check(!space_mark_, kWhere, file_, ": ", field, " ('", content,
            "') strips whitespace and is matched after spaces become U+2581 (normalized: true); "
            "this is not supported");
    }
    if (!data_.pre_splits) data_.pre_splits.emplace();  // no split at all
    data_.token_types = types_;
  }

 public:
  std::string unk_token_, template_bos_, template_eos_;

 private:
  static constexpr int32_t kMissing = -1;
  std::string file_;
  TokenizerData& data_;
  std::vector<int32_t> types_;
  std::vector<std::pair<std::string, std::string>> normalized_added_;  // field, content
  std::vector<std::pair<std::string, std::string>> normalized_stripping_;
  bool byte_fallback_ = false;
  bool byte_level_ = false;
  bool space_mark_ = false;
  bool prepend_ = false;
  bool metaspace_ = false;
  std::string metaspace_scheme_;
};

// A token named in tokenizer_config.json: a string or {"content": ...}.
std::optional<std::string> config_token(const json& config, const char* key,
                                        const std::string& file) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  check(it->is_object() && it->contains("content") && (*it)["content"].is_string(), kWhere, file,
        ": ", key, " is ", shown(*it), ", expected a string or {\"content\": ...}");
  return (*it)["content"].get<std::string>();
}

int32_t id_of(const TokenizerData& data, const std::string& text, const std::string& file,
              std::string_view key) {
  const auto it = std::find(data.tokens.begin(), data.tokens.end(), text);
  check(it != data.tokens.end(), kWhere, file, ": ", key, " '", text,
        "' is not a token of the vocabulary");
  return static_cast<int32_t>(it - data.tokens.begin());
}

}  // namespace

std::optional<TokenizerData> tokenizer_data_from_hf(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "tokenizer.json";
  if (!std::filesystem::exists(path)) return std::nullopt;
  TokenizerData data;
  data.source = path.string();
  data.add_space_prefix = false;
  TokenizerJsonReader reader(path, data);
  reader.read(read_json(path));

  const std::string file = path.string();
  if (!reader.unk_token_.empty()) data.unk_id = id_of(data, reader.unk_token_, file, "model.unk_token");
  if (!reader.template_bos_.empty()) {
    data.bos_id = id_of(data, reader.template_bos_, file, "post_processor BOS");
    data.add_bos = true;
  }
  if (!reader.template_eos_.empty()) {
    data.eos_id = id_of(data, reader.template_eos_, file, "post_processor EOS");
    data.add_eos = true;
  }

  // tokenizer_config.json: the BOS/EOS tokens, whether they are added, the chat template.
  const std::filesystem::path config_path = dir / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    const json config = read_json(config_path);
    const std::string cfile = config_path.string();
    check(config.is_object(), kWhere, cfile, " is a ", config.type_name(), ", expected an object");
    if (auto bos = config_token(config, "bos_token", cfile)) {
      data.bos_id = id_of(data, *bos, cfile, "bos_token");
    }
    if (auto eos = config_token(config, "eos_token", cfile)) {
      data.eos_id = id_of(data, *eos, cfile, "eos_token");
    }
    if (auto pad = config_token(config, "pad_token", cfile)) {
      data.pad_id = id_of(data, *pad, cfile, "pad_token");
    }
    for (const auto& [key, target] : {std::pair{"add_bos_token", &data.add_bos},
                                      std::pair{"add_eos_token", &data.add_eos}}) {
      const auto it = config.find(key);
      if (it == config.end() || it->is_null()) continue;
      check(it->is_boolean(), kWhere, cfile, ": ", key, " is ", shown(*it),
            ", expected true or false");
      *target = it->get<bool>();
    }
    if (const auto it = config.find("chat_template"); it != config.end() && !it->is_null()) {
      if (it->is_string()) {
        data.chat_template = it->get<std::string>();
      } else {
        // Several named templates: the one called "default".
        check(it->is_array(), kWhere, cfile, ": chat_template is ", shown(*it),
              ", expected a string or a list of {name, template}");
        for (const json& entry : *it) {
          check(entry.is_object() && entry.value("name", json()).is_string() &&
                    entry.value("template", json()).is_string(),
                kWhere, cfile, ": chat_template holds ", shown(entry),
                ", expected {\"name\": ..., \"template\": ...}");
          if (entry["name"] == "default") data.chat_template = entry["template"].get<std::string>();
        }
        check(!data.chat_template.empty(), kWhere, cfile,
              ": chat_template lists no template named 'default'");
      }
    }
  }
  // Newer checkpoints keep the template in a file of its own.
  if (const auto jinja = dir / "chat_template.jinja";
      data.chat_template.empty() && std::filesystem::exists(jinja)) {
    data.chat_template = read_text(jinja);
  }
  check(!data.add_bos || data.bos_id >= 0, kWhere, file,
        ": BOS is to be added but no bos_token is named");
  check(!data.add_eos || data.eos_id >= 0, kWhere, file,
        ": EOS is to be added but no eos_token is named");
  return data;
}

}  // namespace onepass::model
