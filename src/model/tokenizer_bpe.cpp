// Merge-ranked BPE: byte-level ("gpt2" vocabularies: regex pre-tokenizer, GPT-2 byte
// mapping) or over characters ("sentencepiece-bpe": U+2581 for spaces, <0xNN> byte
// fallback), merges by rank.
#include <algorithm>
#include <array>
#include <cstdio>

#include "model/tokenizer_internal.h"
#include "model/unicode.h"
#include "onepass/core/error.h"

namespace onepass::model {
namespace tokenizer_detail {
namespace {

// The GPT-2 split, also used by SmolLM2 after its digit split (HF ByteLevel's regex).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2: as Llama-3 but every digit on its own.
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kDigitPattern = R"(\p{N})";
// Mistral's Tekken: words split at lower-to-upper case changes, every digit on its own.
constexpr const char* kTekkenPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreTokenizerSpec {
  std::vector<std::string_view> names;
  std::vector<const char*> patterns;  // applied one after the other, each splitting further
  // Llama-3's HF config sets ignore_merges: a pre-token that is itself a token is taken
  // whole, even where the merges would split it differently.
  bool ignore_merges;
};

const std::vector<PreTokenizerSpec>& pre_tokenizer_specs() {
  static const std::vector<PreTokenizerSpec> specs = {
      {{"gpt2", "default"}, {kGpt2Pattern}, false},
      {{"llama-bpe", "llama3"}, {kLlama3Pattern}, true},
      {{"smollm"}, {kDigitPattern, kGpt2Pattern}, false},
      // DeepSeek-R1's Qwen distillations keep Qwen2's vocabulary and split.
      {{"qwen2", "deepseek-r1-qwen"}, {kQwen2Pattern}, false},
      {{"tekken"}, {kTekkenPattern}, true},
  };
  return specs;
}

struct MergeInfo {
  int32_t rank;
  int32_t result;
};

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Merges by pair_key: open addressing over 16-byte slots, at most 3/4 full (a node-based
// map costs ~32 bytes a merge plus its buckets; Llama 3 has 280k merges).
class MergeTable {
 public:
  /// Room for `count` pairs.
  void reserve(size_t count) {
    shift_ = 60;  // 16 slots
    while ((size_t{1} << (64 - shift_)) / 4 * 3 < count) --shift_;
    slots_.assign(size_t{1} << (64 - shift_), Slot{kEmpty, {}});
  }
  /// Adds the pair unless it is there already (the first, lowest-rank occurrence wins).
  void insert(uint64_t key, MergeInfo info) {
    for (size_t i = home(key);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].key == key) return;
      if (slots_[i].key == kEmpty) {
        slots_[i] = {key, info};
        return;
      }
    }
  }
  const MergeInfo* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = home(key);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].key == key) return &slots_[i].info;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are >= 0: no pair has this key
  struct Slot {
    uint64_t key;
    MergeInfo info;
  };
  // Fibonacci hashing: the top bits of key * 2^64 / phi.
  size_t home(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  int shift_ = 60;
  std::vector<Slot> slots_;
};

class BpeEncoder final : public TextEncoder {
 public:
  explicit BpeEncoder(const VocabView& vocab)
      : ids_(vocab.ids), char_level_(vocab.data.model == "sentencepiece-bpe") {
    const TokenizerData& data = vocab.data;
    if (data.pre_splits) {
      for (const PreTokenizerSplit& split : *data.pre_splits) {
        splits_.push_back({std::make_unique<unicode::Regex>(split.pattern),
                           static_cast<unicode::SplitBehavior>(split.behavior), split.invert});
      }
    } else if (!char_level_) {
      add_named_splits(data.pre);
    }
    ignore_merges_ = data.ignore_merges.value_or(ignore_merges_);
    add_space_prefix_ = char_level_ && data.add_space_prefix;
    space_prefix_if_missing_ = data.space_prefix_if_missing;
    space_prefix_first_only_ = data.space_prefix_first_only;

    if (char_level_) {
      for (size_t b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", static_cast<unsigned>(b));
        byte_ids_[b] = ids_.find(std::string_view(name));
      }
    } else {
      const auto& byte_text = unicode::byte_to_unicode();
      for (size_t b = 0; b < 256; ++b) {
        byte_ids_[b] = ids_.find(byte_text[b]);
      }
    }
    unk_id_ = vocab.data.unk_id;

    const std::vector<std::string>& merges = vocab.data.merges;
    const auto& pairs = vocab.data.merge_pairs;
    const size_t count = pairs.empty() ? merges.size() : pairs.size();
    merges_.reserve(count);
    std::string joined;
    for (size_t rank = 0; rank < count; ++rank) {
      std::string_view left, right;
      if (!pairs.empty()) {
        left = pairs[rank].first;
        right = pairs[rank].second;
      } else {
        const std::string& merge = merges[rank];
        // Split at the first space after the first character: byte-level tokens never hold
        // a space, but a token of one space is possible in odd vocabularies.
        const size_t space = merge.find(' ', 1);
        check(space != std::string::npos, "tokenizer", "merge ", rank, " '", merge,
              "' is not two tokens separated by a space");
        left = std::string_view(merge.data(), space);
        right = std::string_view(merge).substr(space + 1);
      }
      joined.assign(left).append(right);
      const int32_t left_id = ids_.find(left), right_id = ids_.find(right);
      const int32_t result_id = ids_.find(joined);
      // A merge whose parts or result are not tokens can never produce a token; skipping it
      // keeps files with such leftovers loadable.
      if (left_id < 0 || right_id < 0 || result_id < 0) continue;
      // The first (lowest-rank) occurrence of a pair wins.
      merges_.insert(pair_key(left_id, right_id), MergeInfo{static_cast<int32_t>(rank), result_id});
    }
  }

  void encode(std::string_view text, bool at_start, std::vector<int32_t>& out) const override {
    std::string escaped;
    if (char_level_) {
      escaped = escape_spaces(text, at_start);
      text = escaped;
    }
    std::vector<std::string_view> pieces = {text};
    for (const Split& split : splits_)
      pieces = split.regex->split(pieces, split.behavior, split.invert);
    Scratch scratch;
    for (const std::string_view piece : pieces) {
      if (ignore_merges_) {
        const int32_t id =
            char_level_ ? ids_.find(piece) : ids_.find(unicode::bytes_to_byte_level(piece));
        if (id >= 0) {
          out.push_back(id);
          continue;
        }
      }
      encode_piece(piece, scratch, out);
    }
  }

 private:
  struct Split {
    std::unique_ptr<unicode::Regex> regex;
    unicode::SplitBehavior behavior;
    bool invert;
  };

  void add_named_splits(const std::string& name) {
    const std::string pre = name.empty() ? "default" : name;
    const PreTokenizerSpec* spec = nullptr;
    for (const PreTokenizerSpec& candidate : pre_tokenizer_specs()) {
      for (const std::string_view alias : candidate.names) {
        if (alias == pre) spec = &candidate;
      }
    }
    if (spec == nullptr) {
      std::string names;
      for (const std::string& known : supported_pre_tokenizers()) {
        names += names.empty() ? known : ", " + known;
      }
      fail("tokenizer", "unknown pre-tokenizer '", pre, "' (tokenizer.ggml.pre); supported: ",
           names);
    }
    for (const char* pattern : spec->patterns) {
      splits_.push_back(
          {std::make_unique<unicode::Regex>(pattern), unicode::SplitBehavior::kIsolated, false});
    }
    ignore_merges_ = spec->ignore_merges;
  }

  // SentencePiece's view of the text: spaces as U+2581, with the prefix space the
  // vocabulary asks for.
  std::string escape_spaces(std::string_view text, bool at_start) const {
    std::string escaped;
    escaped.reserve(text.size() + 3);
    const bool prefix = add_space_prefix_ && !text.empty() &&
                        (at_start || !space_prefix_first_only_) &&
                        !(space_prefix_if_missing_ && text.front() == ' ');
    if (prefix) escaped += kSpaceMark;
    for (const char c : text) {
      if (c == ' ') {
        escaped += kSpaceMark;
      } else {
        escaped += c;
      }
    }
    return escaped;
  }

  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  struct Candidate {
    int32_t rank;
    int32_t left;  // symbol index; merged symbols keep the left index, so it orders by position
    int32_t left_id;
    int32_t right_id;
    int32_t result;
    // priority_queue pops the largest: make that the lowest rank, then the leftmost.
    bool operator<(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : left > other.left;
    }
  };
  struct Scratch {
    std::vector<Symbol> symbols;
    std::vector<Candidate> heap;
  };

  void push_candidate(Scratch& scratch, int32_t left) const {
    const Symbol& a = scratch.symbols[static_cast<size_t>(left)];
    if (a.next < 0) return;
    const Symbol& b = scratch.symbols[static_cast<size_t>(a.next)];
    const MergeInfo* merge = merges_.find(pair_key(a.id, b.id));
    if (merge == nullptr) return;
    scratch.heap.push_back({merge->rank, left, a.id, b.id, merge->result});
    std::push_heap(scratch.heap.begin(), scratch.heap.end());
  }

  // Repeatedly merges the adjacent pair of lowest rank (leftmost first), as the reference
  // BPE does; the heap holds stale candidates that are dropped when popped.
  void encode_piece(std::string_view piece, Scratch& scratch, std::vector<int32_t>& out) const {
    auto& symbols = scratch.symbols;
    auto& heap = scratch.heap;
    symbols.clear();
    heap.clear();
    auto add_symbol = [&](int32_t id) {
      const auto index = static_cast<int32_t>(symbols.size());
      if (!symbols.empty()) symbols.back().next = index;
      symbols.push_back({id, index - 1, -1});
    };
    if (char_level_) {
      add_characters(piece, add_symbol);
    } else {
      for (const char c : piece) {
        int32_t id = byte_ids_[static_cast<uint8_t>(c)];
        if (id < 0) id = unk_id_;
        // Dropping the byte would encode another text (all of it, for a vocabulary of no
        // byte symbols, leaving an empty prompt).
        check(id >= 0, "tokenizer", "byte 0x", "0123456789abcdef"[static_cast<uint8_t>(c) >> 4],
              "0123456789abcdef"[static_cast<uint8_t>(c) & 15],
              " of the text has no token in the vocabulary and there is no <unk>; a byte-level ",
              "BPE vocabulary needs a token for each of the 256 byte symbols");
        add_symbol(id);
      }
    }
    if (symbols.empty()) return;
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i)
      push_candidate(scratch, i);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end());
      const Candidate top = heap.back();
      heap.pop_back();
      Symbol& left = symbols[static_cast<size_t>(top.left)];
      if (left.id != top.left_id || left.next < 0) continue;
      Symbol& right = symbols[static_cast<size_t>(left.next)];
      if (right.id != top.right_id) continue;
      left.id = top.result;
      right.id = -1;
      left.next = right.next;
      if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.left;
      if (left.prev >= 0) push_candidate(scratch, left.prev);
      push_candidate(scratch, top.left);
    }
    for (int32_t i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
      out.push_back(symbols[static_cast<size_t>(i)].id);
    }
  }

  // One symbol per character; a character that is no token becomes its <0xNN> byte tokens,
  // or <unk> (one for a run of them) when the vocabulary lacks some of those.
  template <typename AddSymbol>
  void add_characters(std::string_view piece, AddSymbol& add_symbol) const {
    bool previous_unknown = false;
    for (size_t pos = 0; pos < piece.size();) {
      const size_t length = std::min(
          piece.size() - pos,
          std::max<size_t>(1, unicode::utf8_sequence_length(static_cast<uint8_t>(piece[pos]))));
      const std::string_view character = piece.substr(pos, length);
      pos += length;
      if (const int32_t id = ids_.find(character); id >= 0) {
        add_symbol(id);
        previous_unknown = false;
        continue;
      }
      const bool all_bytes = std::all_of(character.begin(), character.end(), [&](char c) {
        return byte_ids_[static_cast<uint8_t>(c)] >= 0;
      });
      if (all_bytes) {
        for (const char c : character) add_symbol(byte_ids_[static_cast<uint8_t>(c)]);
        previous_unknown = false;
        continue;
      }
      check(unk_id_ >= 0, "tokenizer", "character '", character,
            "' is not in the vocabulary, which has neither its <0xNN> byte tokens nor <unk>");
      if (!previous_unknown) add_symbol(unk_id_);
      previous_unknown = true;
    }
  }

  static constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581

  const TokenMap& ids_;
  bool char_level_;
  std::vector<Split> splits_;
  bool ignore_merges_ = false;
  bool add_space_prefix_ = false;
  bool space_prefix_if_missing_ = false;
  bool space_prefix_first_only_ = false;
  std::array<int32_t, 256> byte_ids_{};
  int32_t unk_id_ = -1;
  MergeTable merges_;
};

}  // namespace

static_assert(static_cast<int>(PreTokenizerSplit::Behavior::kContiguous) ==
              static_cast<int>(unicode::SplitBehavior::kContiguous));

std::string_view gpt2_split_pattern() {
  return kGpt2Pattern;
}

std::unique_ptr<TextEncoder> make_bpe_encoder(const VocabView& vocab) {
  return std::make_unique<BpeEncoder>(vocab);
}

}  // namespace tokenizer_detail

std::vector<std::string> supported_pre_tokenizers() {
  std::vector<std::string> names;
  for (const auto& spec : tokenizer_detail::pre_tokenizer_specs()) {
    for (const std::string_view name : spec.names) names.emplace_back(name);
  }
  return names;
}

}  // namespace onepass::model
