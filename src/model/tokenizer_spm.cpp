// SentencePiece-style BPE ("llama" vocabularies): spaces become U+2581, characters merge
// pairwise by the score of the token they form, unknown characters fall back to <0xNN>.
#include <algorithm>
#include <array>
#include <cstdio>

#include "model/tokenizer_internal.h"
#include "model/unicode.h"
#include "onepass/core/error.h"

namespace onepass::model::tokenizer_detail {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

class SpmEncoder final : public TextEncoder {
 public:
  explicit SpmEncoder(const VocabView& vocab)
      : ids_(vocab.ids),
        types_(vocab.types),
        scores_(vocab.data.scores),
        add_space_prefix_(vocab.data.add_space_prefix),
        unk_id_(vocab.data.unk_id) {
    for (size_t b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", static_cast<unsigned>(b));
      byte_ids_[b] = ids_.find(std::string_view(name));
    }
  }

  // llama.cpp's rule: the space prefix goes before every run, at the start and after each
  // special token alike.
  void encode(std::string_view text, bool /*at_start*/, std::vector<int32_t>& out) const override {
    if (text.empty()) return;
    std::string escaped;
    escaped.reserve(text.size() + 3);
    if (add_space_prefix_) escaped += kSpace;
    for (const char c : text) {
      if (c == ' ') {
        escaped += kSpace;
      } else {
        escaped += c;
      }
    }

    std::vector<Symbol> symbols;
    for (size_t pos = 0; pos < escaped.size();) {
      const size_t length = std::min(
          escaped.size() - pos,
          std::max<size_t>(1, unicode::utf8_sequence_length(static_cast<uint8_t>(escaped[pos]))));
      const auto index = static_cast<int32_t>(symbols.size());
      symbols.push_back({pos, length, index - 1, -1});
      if (index > 0) symbols[static_cast<size_t>(index - 1)].next = index;
      pos += length;
    }

    std::vector<Bigram> heap;
    auto try_add = [&](int32_t left, int32_t right) {
      if (left < 0 || right < 0) return;
      const Symbol& a = symbols[static_cast<size_t>(left)];
      const Symbol& b = symbols[static_cast<size_t>(right)];
      const std::string_view joined =
          std::string_view(escaped).substr(a.start, a.length + b.length);
      const int32_t id = mergeable_token(joined);
      if (id < 0) return;
      heap.push_back({score(id), left, right, joined.size()});
      std::push_heap(heap.begin(), heap.end());
    };
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) try_add(i, i + 1);

    // Highest score first, leftmost among equals; a popped pair whose symbols have changed
    // since it was pushed is stale and skipped.
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end());
      const Bigram top = heap.back();
      heap.pop_back();
      Symbol& left = symbols[static_cast<size_t>(top.left)];
      Symbol& right = symbols[static_cast<size_t>(top.right)];
      if (left.length == 0 || right.length == 0 || left.next != top.right ||
          left.length + right.length != top.size) {
        continue;
      }
      left.length += right.length;
      right.length = 0;
      left.next = right.next;
      if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.left;
      try_add(left.prev, top.left);
      try_add(top.left, left.next);
    }

    for (int32_t i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
      const Symbol& symbol = symbols[static_cast<size_t>(i)];
      const std::string_view piece = std::string_view(escaped).substr(symbol.start, symbol.length);
      const int32_t id = mergeable_token(piece);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      // Only single characters can be missing (merges always form tokens): spell the
      // character's bytes, or <unk> when the vocabulary has no byte tokens.
      const bool all_bytes = std::all_of(piece.begin(), piece.end(), [&](char c) {
        return byte_ids_[static_cast<uint8_t>(c)] >= 0;
      });
      if (all_bytes) {
        for (const char c : piece) out.push_back(byte_ids_[static_cast<uint8_t>(c)]);
      } else if (unk_id_ >= 0) {
        out.push_back(unk_id_);
      } else {
        fail("tokenizer", "character '", piece,
             "' is not in the vocabulary, which has neither byte tokens nor <unk>");
      }
    }
  }

 private:
  struct Symbol {
    size_t start;
    size_t length;  // 0 once merged into its left neighbour
    int32_t prev;
    int32_t next;
  };
  struct Bigram {
    float score;
    int32_t left;
    int32_t right;
    size_t size;
    bool operator<(const Bigram& other) const {
      return score != other.score ? score < other.score : left > other.left;
    }
  };

  // Plain text may only become normal (or user-defined) tokens: a control token such as
  // "<s>" must never come out of merging the characters "<", "s", ">".
  int32_t mergeable_token(std::string_view text) const {
    const int32_t id = ids_.find(text);
    if (id < 0) return -1;
    const TokenType type = types_[static_cast<size_t>(id)];
    const bool ok = type == TokenType::kNormal || type == TokenType::kUndefined ||
                    type == TokenType::kUserDefined;
    return ok ? id : -1;
  }

  float score(int32_t id) const {
    return scores_.empty() ? 0.0f : scores_[static_cast<size_t>(id)];
  }

  const TokenMap& ids_;
  const std::vector<TokenType>& types_;
  const std::vector<float>& scores_;
  bool add_space_prefix_;
  int32_t unk_id_;
  std::array<int32_t, 256> byte_ids_{};
};

}  // namespace

std::unique_ptr<TextEncoder> make_spm_encoder(const VocabView& vocab) {
  return std::make_unique<SpmEncoder>(vocab);
}

}  // namespace onepass::model::tokenizer_detail
