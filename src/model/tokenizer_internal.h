// The parts of the tokenizer shared between tokenizer.cpp and the two model sources
// (internal header).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "onepass/model/tokenizer.h"

namespace onepass::model::tokenizer_detail {

/// Token text -> id: an open-addressing table of ids keyed by the vocabulary's own strings,
/// so the text is not held twice (a node-based map of 128k tokens costs ~8 MB), looked up
/// with string_views.
class TokenMap {
 public:
  TokenMap() = default;
  /// Indexes `tokens`, which must outlive the map unchanged; a repeated text keeps its
  /// first id.
  explicit TokenMap(const std::vector<std::string>& tokens);
  /// The id of `text`, or -1 when no token has it.
  int32_t find(std::string_view text) const;

 private:
  struct Slot {
    uint32_t hash;  // low bits of the text's hash: most mismatches end here
    int32_t id;     // -1: empty
  };
  const std::vector<std::string>* tokens_ = nullptr;
  std::vector<Slot> slots_;  // a power of two, at most 3/4 full
};

/// What both models see of the vocabulary.
struct VocabView {
  const TokenizerData& data;
  const TokenMap& ids;
  const std::vector<TokenType>& types;
};

/// The model half of encoding: turns one run of plain text (the text between special
/// tokens) into ids.
class TextEncoder {
 public:
  virtual ~TextEncoder() = default;
  /// Appends the ids of `text` to `out`. `at_start` is true for the run that begins the
  /// input, false for one that follows a special token (where a SentencePiece space prefix
  /// may or may not go, as the vocabulary says).
  virtual void encode(std::string_view text, bool at_start, std::vector<int32_t>& out) const = 0;
};

/// Merge-ranked BPE: byte-level ("gpt2") with the pre-tokenizer data.pre_splits or data.pre
/// names (throws for an unknown one), or over characters with byte fallback
/// ("sentencepiece-bpe").
std::unique_ptr<TextEncoder> make_bpe_encoder(const VocabView& vocab);
/// The GPT-2 split (Hugging Face's ByteLevel pre-tokenizer with use_regex).
std::string_view gpt2_split_pattern();
/// SentencePiece score-driven merging with byte fallback.
std::unique_ptr<TextEncoder> make_spm_encoder(const VocabView& vocab);

/// "<0xNN>" -> NN, or -1 when `text` is not a byte token's text.
int parse_byte_token(std::string_view text);

}  // namespace onepass::model::tokenizer_detail
