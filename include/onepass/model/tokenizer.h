// Tokenizers of GGUF vocabularies: byte-level BPE ("gpt2") and SentencePiece ("llama"),
// a streaming UTF-8 detokenizer, and a synthesizer of BPE vocabularies for random models.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace onepass {

/// A vocabulary as a GGUF file stores it (keys tokenizer.ggml.*), so the tokenizer does not
/// depend on the file reader. Empty `scores` / `token_types` mean "all 0" / "all normal".
struct TokenizerData {
  std::string source;  ///< the file it was read from, named in errors (empty: none)
  std::string model;  ///< "gpt2" (byte-level BPE) or "llama" (SentencePiece)
  std::string pre;    ///< tokenizer.ggml.pre: "smollm", "llama-bpe", "qwen2", "gpt2", "default"
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> token_types;  ///< TokenType values
  std::vector<std::string> merges;   ///< "left right", rank = position
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
  std::optional<int32_t> eot_id;
  bool add_bos = false, add_eos = false;
  /// tokenizer.ggml.add_space_prefix; SentencePiece only (prepends a space to the text).
  bool add_space_prefix = true;
  std::string chat_template;
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
  /// The vocabulary as given, less its merges: the encoder holds them as id pairs, and the
  /// strings (280k for Llama 3) would only take memory.
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

}  // namespace onepass
