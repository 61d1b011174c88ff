// Tokenizer front end: vocabulary validation, special-token matching, BOS/EOS, decoding and
// the streaming detokenizer. The model-specific merging lives in tokenizer_{bpe,spm}.cpp.
#include "onepass/model/tokenizer.h"

#include <algorithm>
#include <array>

#include "model/tokenizer_internal.h"
#include "model/unicode.h"
#include "onepass/core/error.h"

namespace onepass::model {

using tokenizer_detail::TokenMap;

namespace tokenizer_detail {

TokenMap::TokenMap(const std::vector<std::string>& tokens) : tokens_(&tokens) {
  size_t capacity = 16;
  while (capacity / 4 * 3 < tokens.size()) capacity *= 2;
  slots_.assign(capacity, Slot{0, -1});
  const size_t mask = capacity - 1;
  for (size_t id = 0; id < tokens.size(); ++id) {
    const size_t hash = std::hash<std::string_view>{}(tokens[id]);
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
      Slot& slot = slots_[i];
      if (slot.id < 0) {
        slot = {static_cast<uint32_t>(hash), static_cast<int32_t>(id)};
        break;
      }
      if (slot.hash == static_cast<uint32_t>(hash) &&
          tokens[static_cast<size_t>(slot.id)] == tokens[id])
        break;
    }
  }
}

int32_t TokenMap::find(std::string_view text) const {
  if (slots_.empty()) return -1;
  const size_t hash = std::hash<std::string_view>{}(text);
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& slot = slots_[i];
    if (slot.id < 0) return -1;
    if (slot.hash == static_cast<uint32_t>(hash) &&
        (*tokens_)[static_cast<size_t>(slot.id)] == text)
      return slot.id;
  }
}

int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(text[3]), lo = hex(text[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace tokenizer_detail

namespace {

constexpr std::string_view kWhere = "tokenizer";
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Names of end-of-turn tokens in common vocabularies, used when the file names no EOT.
constexpr std::array<std::string_view, 5> kEndOfTurnNames = {"<|eot_id|>", "<|im_end|>", "<|end|>",
                                                             "<end_of_turn>", "<EOT>"};
// Control tokens that end generation besides EOS and the EOT.
constexpr std::array<std::string_view, 7> kEndOfGenerationNames = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<EOT>", "<|eom_id|>", "<|endoftext|>"};

// A special token that encode() recognises in text.
struct SpecialToken {
  std::string_view text;
  int32_t id;
  bool needs_parse_special;  // control/unknown tokens; user-defined ones always match
  bool strip_left = false;   // the match takes in the whitespace before / after it
  bool strip_right = false;
  bool single_word = false;  // no word character may touch the match
  bool normalized = false;   // found in the second pass (AddedTokenRule::normalized)
};

// A stretch of the text being encoded: an added token's match (id >= 0) or a gap that the
// model's encoder tokenizes (id -1).
struct TextPiece {
  size_t begin = 0, end = 0;
  int32_t id = -1;
};

// Unicode White_Space (what `\s` matches in Hugging Face tokenizers' Rust regex).
bool is_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

// The code point of the valid UTF-8 sequence at text[pos] and its length.
std::pair<uint32_t, size_t> decode_at(std::string_view text, size_t pos) {
  const auto lead = static_cast<uint8_t>(text[pos]);
  const size_t length = unicode::utf8_sequence_length(lead);
  uint32_t cp = length == 1 ? lead : lead & (0x7Fu >> length);
  for (size_t i = 1; i < length; ++i)
    cp = (cp << 6) | (static_cast<uint8_t>(text[pos + i]) & 0x3Fu);
  return {cp, length};
}

// Where the run of whitespace that ends at `end` begins (not before `floor`).
size_t white_space_before(std::string_view text, size_t end, size_t floor) {
  while (end > floor) {
    size_t start = end - 1;
    while (start > floor && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
    if (!is_white_space(decode_at(text, start).first)) break;
    end = start;
  }
  return end;
}

// Where the run of whitespace that starts at `begin` ends (not after `limit`).
size_t white_space_after(std::string_view text, size_t begin, size_t limit) {
  while (begin < limit) {
    const auto [cp, length] = decode_at(text, begin);
    if (!is_white_space(cp)) break;
    begin += length;
  }
  return begin;
}

// Whether text[start, end) stands alone as a word within text[lo, hi): no word character
// right before or after it (Hugging Face tokenizers' single_word).
bool stands_alone(std::string_view text, size_t lo, size_t start, size_t end, size_t hi) {
  if (start > lo) {
    size_t previous = start - 1;
    while (previous > lo && (static_cast<uint8_t>(text[previous]) & 0xC0) == 0x80) --previous;
    if (unicode::is_word_character(decode_at(text, previous).first)) return false;
  }
  return end >= hi || !unicode::is_word_character(decode_at(text, end).first);
}

}  // namespace

struct Tokenizer::Impl {
  TokenizerData data;
  bool byte_level = false;  // "gpt2" vs "llama"
  TokenMap ids;
  std::vector<TokenType> types;
  // The bytes each token decodes to (text tokens): token i's are
  // piece_bytes[piece_ends[i - 1], piece_ends[i]), one buffer rather than a string each.
  std::string piece_bytes;
  std::vector<uint32_t> piece_ends;
  // Specials that start with each byte, longest first, for leftmost-longest matching.
  std::array<std::vector<SpecialToken>, 256> specials_by_first_byte;
  std::unique_ptr<tokenizer_detail::TextEncoder> encoder;
  bool two_passes = false;  // some added tokens are found in the normalised text
  std::optional<int32_t> eot;
  std::vector<int32_t> end_of_generation;

  explicit Impl(TokenizerData in) : data(std::move(in)) {
    validate();
    build_tables();
    const tokenizer_detail::VocabView view{data, ids, types};
    encoder = data.model == "llama" ? tokenizer_detail::make_spm_encoder(view)
                                    : tokenizer_detail::make_bpe_encoder(view);
    std::vector<std::string>().swap(data.merges);  // the encoder holds them as id pairs
    std::vector<int32_t>().swap(data.token_types);  // `types` holds them
  }

  int32_t vocab_size() const { return static_cast<int32_t>(data.tokens.size()); }

  void check_id(int32_t id, std::string_view what) const {
    check(id >= -1 && id < vocab_size(), kWhere, what, " ", id, " is outside the vocabulary of ",
          vocab_size(), " tokens");
  }

  void validate() {
    check(data.model == "gpt2" || data.model == "llama" || data.model == "sentencepiece-bpe",
          kWhere, "unknown tokenizer model '", data.model,
          "' (tokenizer.ggml.model); supported: gpt2 (byte-level BPE), llama (SentencePiece), "
          "sentencepiece-bpe (SentencePiece pieces merged by rank)");
    byte_level = data.model == "gpt2";
    check(!data.tokens.empty(), kWhere, "the vocabulary has no tokens");
    check(data.tokens.size() < static_cast<size_t>(INT32_MAX), kWhere, "the vocabulary has ",
          data.tokens.size(), " tokens, more than ids can address");
    const size_t n = data.tokens.size();
    check(data.scores.empty() || data.scores.size() == n, kWhere, "vocabulary has ", n,
          " tokens but ", data.scores.size(), " scores");
    check(data.token_types.empty() || data.token_types.size() == n, kWhere, "vocabulary has ", n,
          " tokens but ", data.token_types.size(), " token types");
    check(data.model != "llama" || !data.scores.empty(), kWhere,
          "a SentencePiece (llama) vocabulary needs scores (tokenizer.ggml.scores)");
    for (size_t i = 0; i < data.token_types.size(); ++i) {
      check(data.token_types[i] >= 0 && data.token_types[i] <= 6, kWhere, "token ", i, " has type ",
            data.token_types[i], ", expected 0..6");
    }
    check_id(data.bos_id, "BOS id");
    check_id(data.eos_id, "EOS id");
    check_id(data.unk_id, "unknown-token id");
    check_id(data.pad_id, "padding id");
    if (data.eot_id) check_id(*data.eot_id, "EOT id");
    check(!data.add_bos || data.bos_id >= 0, kWhere, "add_bos is set but there is no BOS id");
    check(!data.add_eos || data.eos_id >= 0, kWhere, "add_eos is set but there is no EOS id");
    for (const AddedTokenRule& rule : data.added_token_rules) {
      check(rule.id >= 0 && rule.id < vocab_size(), kWhere, "an added token's matching rule names id ",
            rule.id, ", outside the vocabulary of ", vocab_size(), " tokens");
    }
  }

  void build_tables() {
    const size_t n = data.tokens.size();
    // Duplicates: the first id keeps the text, so encoding is stable.
    ids = TokenMap(data.tokens);
    types.resize(n);
    piece_ends.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const std::string& text = data.tokens[i];
      TokenType type = TokenType::kNormal;
      if (!data.token_types.empty()) {
        type = static_cast<TokenType>(data.token_types[i]);
      } else if (!byte_level && tokenizer_detail::parse_byte_token(text) >= 0) {
        type = TokenType::kByte;
      }
      types[i] = type;
      piece_bytes += text_piece(text, type);
      check(piece_bytes.size() <= UINT32_MAX, kWhere,
            "the vocabulary's text passes 4 GiB at token ", i);
      piece_ends[i] = static_cast<uint32_t>(piece_bytes.size());
    }
    piece_bytes.shrink_to_fit();

    for (size_t i = 0; i < n; ++i) {
      const TokenType type = types[i];
      const bool special = type == TokenType::kControl || type == TokenType::kUserDefined ||
                           type == TokenType::kUnknown;
      const std::string_view text = data.tokens[i];
      // A special must be non-empty valid UTF-8 to be found at a character boundary.
      if (!special || text.empty() || unicode::find_invalid_utf8(text) != text.size()) continue;
      if (ids.find(text) != static_cast<int32_t>(i)) continue;
      specials_by_first_byte[static_cast<uint8_t>(text[0])].push_back(
          {text, static_cast<int32_t>(i), type != TokenType::kUserDefined});
    }
    for (const AddedTokenRule& rule : data.added_token_rules) {
      const std::string_view text = data.tokens[static_cast<size_t>(rule.id)];
      if (text.empty()) continue;
      for (SpecialToken& special : specials_by_first_byte[static_cast<uint8_t>(text[0])]) {
        if (special.id != rule.id) continue;
        special.strip_left = rule.left;
        special.strip_right = rule.right;
        special.single_word = rule.single_word;
        special.normalized = rule.normalized;
        two_passes = two_passes || rule.normalized;
      }
    }
    for (auto& list : specials_by_first_byte) {
      std::stable_sort(list.begin(), list.end(), [](const SpecialToken& a, const SpecialToken& b) {
        return a.text.size() > b.text.size();
      });
    }

    eot = data.eot_id;
    for (const std::string_view name : kEndOfTurnNames) {
      if (eot) break;
      const int32_t id = ids.find(name);
      if (id >= 0 && types[static_cast<size_t>(id)] == TokenType::kControl) eot = id;
    }
    auto add_end = [&](int32_t id) {
      if (id >= 0 && std::find(end_of_generation.begin(), end_of_generation.end(), id) ==
                         end_of_generation.end()) {
        end_of_generation.push_back(id);
      }
    };
    add_end(data.eos_id);
    if (eot) add_end(*eot);
    for (const std::string_view name : kEndOfGenerationNames) {
      const int32_t id = ids.find(name);
      if (id >= 0 && types[static_cast<size_t>(id)] == TokenType::kControl) add_end(id);
    }
  }

  // What a text-bearing token stands for; control-like tokens keep their raw text, which
  // decode shows only when asked to.
  std::string text_piece(const std::string& text, TokenType type) const {
    switch (type) {
      case TokenType::kNormal:
      case TokenType::kUndefined:
        if (byte_level) return unicode::byte_level_to_bytes(text);
        {
          std::string out;
          out.reserve(text.size());
          for (size_t pos = 0; pos < text.size();) {
            if (text.compare(pos, 3, "\xE2\x96\x81") == 0) {
              out += ' ';
              pos += 3;
            } else {
              out += text[pos++];
            }
          }
          return out;
        }
      case TokenType::kByte: {
        const int byte = tokenizer_detail::parse_byte_token(text);
        return byte >= 0 ? std::string(1, static_cast<char>(byte)) : text;
      }
      default:
        return text;
    }
  }

  std::string_view stored_piece(size_t index) const {
    const size_t begin = index == 0 ? 0 : piece_ends[index - 1];
    return std::string_view(piece_bytes).substr(begin, piece_ends[index] - begin);
  }

  // The longest added token of this pass that text[pos, hi) starts with.
  const SpecialToken* match_special(std::string_view text, size_t pos, size_t hi,
                                    bool normalized_pass, bool parse_special) const {
    for (const SpecialToken& special : specials_by_first_byte[static_cast<uint8_t>(text[pos])]) {
      if (special.needs_parse_special && !parse_special) continue;
      if (special.normalized != normalized_pass || special.text.size() > hi - pos) continue;
      if (text.compare(pos, special.text.size(), special.text) == 0) return &special;
    }
    return nullptr;
  }

  // One pass of Hugging Face tokenizers' added-token split over text[lo, hi): the
  // leftmost-longest matches, not overlapping; a single_word match touching a word character
  // is skipped (the search resumes after it); each kept match's span grows over the
  // whitespace beside it (lstrip / rstrip; not before the previous span's end). A match
  // inside a grown span is still emitted (a vocabulary whose "\n" is an added token keeps
  // it after an rstrip token), and the text after it resumes where it ends.
  void split_added(std::string_view text, size_t lo, size_t hi, bool normalized_pass,
                   bool parse_special, std::vector<TextPiece>& out) const {
    size_t run_start = lo;
    for (size_t pos = lo; pos < hi;) {
      const SpecialToken* special = match_special(text, pos, hi, normalized_pass, parse_special);
      if (special == nullptr) {
        ++pos;
        continue;
      }
      const size_t end = pos + special->text.size();
      if (special->single_word && !stands_alone(text, lo, pos, end, hi)) {
        pos = end;
        continue;
      }
      const size_t start =
          special->strip_left
              ? std::max(white_space_before(text, pos, std::min(run_start, pos)), run_start)
              : pos;
      if (start > run_start) out.push_back({run_start, start, -1});
      const size_t stop = special->strip_right ? white_space_after(text, end, hi) : end;
      out.push_back({start, stop, special->id});
      run_start = stop;
      pos = end;
    }
    if (run_start < hi) out.push_back({run_start, hi, -1});
  }

  // Bytes `id` contributes to decoded text, and whether it is a special token (after which
  // a SentencePiece encoder adds a space again).
  std::string_view piece(int32_t id, bool render_special, bool* special) const {
    check(id >= 0 && id < vocab_size(), kWhere, "token id ", id, " is outside the vocabulary of ",
          vocab_size(), " tokens");
    const auto index = static_cast<size_t>(id);
    *special = false;
    switch (types[index]) {
      case TokenType::kControl:
      case TokenType::kUnused:
        *special = true;
        return render_special ? stored_piece(index) : std::string_view();
      case TokenType::kUnknown:
        *special = true;
        return render_special ? stored_piece(index) : kReplacement;
      case TokenType::kUserDefined:
        *special = true;
        return stored_piece(index);
      default:
        return stored_piece(index);
    }
  }
};

namespace {

// An error about the vocabulary, naming the file it came from.
[[noreturn]] void rethrow_with_source(const Error& e, const std::string& source) {
  if (source.empty()) throw e;
  fail(e.where(), source, ": ", e.detail());
}

}  // namespace

Tokenizer::Tokenizer(TokenizerData data) {
  const std::string source = data.source;
  try {
    impl_ = std::make_unique<Impl>(std::move(data));
  } catch (const Error& e) {
    rethrow_with_source(e, source);
  }
}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, EncodeOptions options) const {
  const size_t invalid = unicode::find_invalid_utf8(text);
  check(invalid == text.size(), kWhere, "input is not valid UTF-8 (byte ", invalid, " of ",
        text.size(), ")");
  const Impl& impl = *impl_;
  if (impl.data.nfc) {
    const size_t unstable = unicode::find_nfc_unstable(text);
    check(unstable == text.size(), kWhere,
          impl.data.source.empty() ? std::string() : impl.data.source + ": ",
          "the vocabulary asks for NFC normalisation, and the text is not in NFC at byte ", unstable,
          " (decomposed or reorderable characters); onepass does not compose them: give the ",
          "text in NFC");
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (options.add_special && impl.data.add_bos) out.push_back(impl.data.bos_id);

  // A text the vocabulary cannot spell is a fault of the vocabulary: name its file.
  try {
    // As Hugging Face tokenizers splits on added tokens: first the tokens matched in the text
    // as given, then, in the gaps between them, those matched in the normalised text.
    std::vector<TextPiece> pieces;
    impl.split_added(text, 0, text.size(), false, options.parse_special, pieces);
    if (impl.two_passes) {
      std::vector<TextPiece> first;
      first.swap(pieces);
      for (const TextPiece& piece : first) {
        if (piece.id >= 0) {
          pieces.push_back(piece);
        } else {
          impl.split_added(text, piece.begin, piece.end, true, options.parse_special, pieces);
        }
      }
    }
    for (const TextPiece& piece : pieces) {
      if (piece.id >= 0) {
        out.push_back(piece.id);
      } else {
        impl.encoder->encode(text.substr(piece.begin, piece.end - piece.begin), piece.begin == 0,
                             out);
      }
    }
  } catch (const Error& e) {
    rethrow_with_source(e, impl.data.source);
  }

  if (options.add_special && impl.data.add_eos) out.push_back(impl.data.eos_id);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, DecodeOptions options) const {
  Detokenizer detokenizer(*this, options);
  std::string out;
  for (const int32_t id : ids) out += detokenizer.push(id);
  out += detokenizer.flush();
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  bool special = false;
  return std::string(impl_->piece(id, render_special, &special));
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  const int32_t id = impl_->ids.find(text);
  if (id < 0) return std::nullopt;
  return id;
}

int32_t Tokenizer::vocab_size() const {
  return impl_->vocab_size();
}

TokenType Tokenizer::token_type(int32_t id) const {
  check(id >= 0 && id < vocab_size(), kWhere, "token id ", id, " is outside the vocabulary of ",
        vocab_size(), " tokens");
  return impl_->types[static_cast<size_t>(id)];
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  const auto& ends = impl_->end_of_generation;
  return std::find(ends.begin(), ends.end(), id) != ends.end();
}

int32_t Tokenizer::bos_id() const {
  return impl_->data.bos_id;
}
int32_t Tokenizer::eos_id() const {
  return impl_->data.eos_id;
}
std::optional<int32_t> Tokenizer::eot_id() const {
  return impl_->eot;
}
const TokenizerData& Tokenizer::data() const {
  return impl_->data;
}

// ---------------------------------------------------------------------------------------
// Detokenizer

Detokenizer::Detokenizer(const Tokenizer& tokenizer, DecodeOptions options)
    : tokenizer_(&tokenizer), options_(options) {}

std::string Detokenizer::push(int32_t id) {
  const Tokenizer::Impl& impl = *tokenizer_->impl_;
  bool special = false;
  std::string_view piece = impl.piece(id, options_.render_special, &special);
  const bool strips = options_.strip_space_prefix && !impl.byte_level && impl.data.add_space_prefix;
  if (special) {
    // The encoder starts the text after a special token with a space again, unless the
    // vocabulary puts one only at the very start of the input.
    at_start_ = !impl.data.space_prefix_first_only;
  } else if (at_start_) {
    if (strips && !piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
    at_start_ = false;
  }
  pending_.append(piece);
  std::string out;
  unicode::drain_utf8(pending_, out, /*final=*/false);
  return out;
}

std::string Detokenizer::flush() {
  std::string out;
  unicode::drain_utf8(pending_, out, /*final=*/true);
  at_start_ = true;
  return out;
}

void Detokenizer::reset() {
  pending_.clear();
  at_start_ = true;
}

}  // namespace onepass::model
