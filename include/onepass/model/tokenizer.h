// Tokenizers of GGUF vocabularies and Hugging Face tokenizer.json files: byte-level BPE
// ("gpt2"), SentencePiece ("llama") and SentencePiece vocabularies merged by rank
// ("sentencepiece-bpe"); a streaming UTF-8 detokenizer, and a synthesizer of BPE
// vocabularies for random models.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace onepass::model {

/// One regex split of a pre-tokenizer, as a tokenizer.json "Split" step gives it: every
/// piece of the text is cut at the matches of `pattern`.
struct PreTokenizerSplit {
  /// What is kept of matches and gaps (Hugging Face's SplitDelimiterBehavior).
  enum class Behavior : uint8_t {
    kIsolated,            ///< matches and gaps each become pieces
    kRemoved,             ///< only the gaps remain
    kMergedWithPrevious,  ///< a match joins the gap before it
    kMergedWithNext,      ///< a match joins the gap after it
    kContiguous,          ///< adjacent matches become one piece
  };
  std::string pattern;  ///< PCRE2 syntax (UTF, Unicode properties)
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;  ///< the gaps play the part of the matches
};

/// How an added token (tokenizer.json added_tokens) is found in text, where it differs from
/// a plain match, as Hugging Face tokenizers' AddedToken flags say.
struct AddedTokenRule {
  int32_t id = -1;
  bool left = false;   ///< lstrip: the match takes in the whitespace before it (not tokenized)
  bool right = false;  ///< rstrip: the match takes in the whitespace after it
  /// single_word: a match counts only with no word character (\w) right before or after it
  /// in the text searched; a match that fails is skipped, not shortened.
  bool single_word = false;
  /// Matched in the normalised text (a non-special token with normalized: true): found in a
  /// second pass, within the text between the other added tokens' matches.
  bool normalized = false;
};

/// A vocabulary as a GGUF file stores it (keys tokenizer.ggml.*), or as read from a
/// tokenizer.json, so the tokenizer does not depend on the file reader. Empty `scores` /
/// `token_types` mean "all 0" / "all normal".
struct TokenizerData {
  std::string source;  ///< the file it was read from, named in errors (empty: none)
  /// "gpt2" (byte-level BPE), "llama" (SentencePiece, merged by score) or
  /// "sentencepiece-bpe" (characters with U+2581 for spaces, merged by rank of `merges`,
  /// unknown characters as <0xNN> byte tokens: Gemma, Llama 2 and Mistral tokenizer.json).
  std::string model;
  /// tokenizer.ggml.pre: "smollm", "llama-bpe", "qwen2", "tekken", "deepseek-r1-qwen",
  /// "gpt2", "default"; ignored when `pre_splits` is set.
  std::string pre;
  /// The pre-tokenizer as explicit splits (from a tokenizer.json), applied in order, each to
  /// every piece of the one before; when set (even empty) it replaces the splits `pre` names.
  std::optional<std::vector<PreTokenizerSplit>> pre_splits;
  /// A pre-token that is itself a token is taken whole (tokenizer.json model.ignore_merges);
  /// unset: as `pre` says (Llama 3 does).
  std::optional<bool> ignore_merges;
  /// Text is NFC-normalised before tokenizing (tokenizer.json normalizer NFC). The tokenizer
  /// does not compose characters: it refuses text that NFC could change.
  bool nfc = false;
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> token_types;  ///< TokenType values
  std::vector<std::string> merges;   ///< "left right", rank = position
  /// The merges as pairs (a tokenizer.json's, whose tokens may hold spaces); when non-empty
  /// they are used instead of `merges`.
  std::vector<std::pair<std::string, std::string>> merge_pairs;
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
  std::optional<int32_t> eot_id;
  bool add_bos = false, add_eos = false;
  /// tokenizer.ggml.add_space_prefix; SentencePiece only (prepends a space to the text, and
  /// to the text after each special token).
  bool add_space_prefix = true;
  /// With add_space_prefix, as a tokenizer.json Metaspace pre-tokenizer: no space is added
  /// to text that starts with one, and with `space_prefix_first_only` ("prepend_scheme":
  /// "first") none after a special token.
  bool space_prefix_if_missing = false;
  bool space_prefix_first_only = false;
  std::string chat_template;
  /// The special or user-defined tokens whose matching has a rule of its own.
  std::vector<AddedTokenRule> added_token_rules;
};

/// Token kinds of tokenizer.ggml.token_type (llama.cpp's numbering).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      ///< <|im_start|>, <s>: matched in text only when parsing specials
  kUserDefined = 4,  ///< always matched in text as a whole token
  kUnused = 5,
  kByte = 6,  ///< SentencePiece byte fallback <0xNN>
};

struct EncodeOptions {
  /// Add BOS / EOS as the vocabulary asks (TokenizerData::add_bos / add_eos).
  bool add_special = true;
  /// Control tokens written in the text ("<|im_end|>") become those tokens; otherwise they
  /// are tokenized as plain text. User-defined tokens are always matched.
  bool parse_special = true;
};

struct DecodeOptions {
  /// Control, unknown and unused tokens as their text; otherwise control/unused give nothing
  /// and unknown gives U+FFFD.
  bool render_special = false;
  /// SentencePiece with add_space_prefix: drop the space the encoder put before the first
  /// word. Right for decoding a whole encoded text, wrong for continuing a prompt.
  bool strip_space_prefix = false;
};

/// Names accepted as TokenizerData::pre for "gpt2" vocabularies.
std::vector<std::string> supported_pre_tokenizers();

/// Text <-> token ids for one vocabulary. Immutable after construction; encode and decode
/// may be called from several threads at once.
class Tokenizer {
 public:
  /// Validates `data` (model, pre, sizes, ids) and builds the lookup tables; throws
  /// onepass::Error("[tokenizer] ...") on anything inconsistent.
  explicit Tokenizer(TokenizerData data);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  /// Token ids of UTF-8 `text` (invalid UTF-8 throws).
  std::vector<int32_t> encode(std::string_view text, EncodeOptions options = {}) const;
  /// Text of `ids`; the inverse of encode for text without control tokens. Incomplete UTF-8
  /// at the end becomes U+FFFD.
  std::string decode(std::span<const int32_t> ids,
                     DecodeOptions options = {.render_special = false,
                                              .strip_space_prefix = true}) const;
  /// Bytes one token stands for (possibly an incomplete UTF-8 sequence); control tokens give
  /// their text only with `render_special`.
  std::string token_to_piece(int32_t id, bool render_special = false) const;

  /// Id of the token whose vocabulary text is exactly `text` (as stored, e.g. "Ġthe").
  std::optional<int32_t> find_token(std::string_view text) const;
  int32_t vocab_size() const;
  TokenType token_type(int32_t id) const;
  /// EOS, EOT, or a control token that ends a turn (<|eot_id|>, <|im_end|>, <|end|>, ...).
  bool is_end_of_generation(int32_t id) const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  /// The end-of-turn token: TokenizerData::eot_id, else one found by its usual name.
  std::optional<int32_t> eot_id() const;
  /// The vocabulary as given, less its merges and token types: the encoder holds the merges
  /// as id pairs (the strings, 280k for Llama 3, would only take memory), and token_type()
  /// answers for the types.
  const TokenizerData& data() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  friend class Detokenizer;
};

/// Turns a stream of token ids into text, returning only complete UTF-8: a multi-byte
/// character split over tokens (byte-level BPE pieces, SentencePiece <0xNN> tokens) is held
/// back until its last byte arrives; invalid bytes become U+FFFD. The tokenizer must
/// outlive it.
class Detokenizer {
 public:
  explicit Detokenizer(const Tokenizer& tokenizer, DecodeOptions options = {});
  /// Text completed by token `id` (often empty while a character is incomplete).
  std::string push(int32_t id);
  /// Whatever is held back, an incomplete character as U+FFFD; then starts afresh.
  std::string flush();
  /// Forgets held-back bytes and starts afresh.
  void reset();

 private:
  const Tokenizer* tokenizer_;
  DecodeOptions options_;
  std::string pending_;
  bool at_start_ = true;
};

/// A valid byte-level BPE vocabulary of exactly `vocab_size` tokens, for random-weight
/// models: 256 byte tokens (GPT-2 order), merge results, then special tokens at the end
/// (Llama-3 layout for pre "llama-bpe"/"llama3", ChatML tokens otherwise) and a matching
/// chat template. Deterministic in (vocab_size, pre, seed).
TokenizerData synthesize_bpe_vocab(int32_t vocab_size, std::string pre, uint64_t seed);

}  // namespace onepass::model
