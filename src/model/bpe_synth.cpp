// Synthesized byte-level BPE vocabularies for random-weight models (`onepass make-model`).
//
// Tokens grow best-first through a tree of "units" (whole UTF-8 characters): a space-led
// word, a lower-case continuation, a digit group, a whitespace run, CJK or Cyrillic text...
// each candidate scored by a seeded letter-bigram model. A candidate becomes a token only if
// BPE with the merges made so far reduces its text to exactly two tokens; those two form its
// merge. So every merge joins two existing tokens, and every token's own text encodes to that
// token alone (later merges rank higher, so they never disturb an earlier token's merges).
#include <algorithm>
#include <array>
#include <queue>
#include <unordered_map>

#include "model/tokenizer_internal.h"
#include "model/unicode.h"
#include "onepass/core/error.h"
#include "onepass/model/tokenizer.h"

namespace onepass::model {
namespace {

constexpr std::string_view kWhere = "bpe_synth";

uint64_t mix(uint64_t x) {  // splitmix64 finaliser: portable, unlike std:: distributions
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) from (seed, a, b).
double uniform(uint64_t seed, uint64_t a, uint64_t b) {
  return static_cast<double>(mix(seed ^ mix(a * 0x100000001B3ull + b)) >> 11) * 0x1.0p-53;
}

enum class Context : uint8_t {
  kRoot,      // the empty string: children are all single characters
  kSpace,     // "Ġ": the space before a word
  kSpaceRun,  // two or more spaces
  kNewlineRun,
  kTabRun,
  kLower,       // a word ending in a lower-case letter
  kUpperFirst,  // a word of one capital so far
  kUpperRun,    // a word of capitals
  kDigits,
  kPunct,
  kScript,  // a word in a non-Latin script (the unit's script decides the children)
  kCount,
};

enum class Script : uint8_t { kNone, kLatinExt, kGreek, kCyrillic, kCjk, kKana, kHangul, kCount };

struct Unit {
  std::string bytes;  // one UTF-8 character
  Context next;       // context of a token that ends in this unit
  Script script = Script::kNone;
};

struct Child {
  int32_t unit;
  double probability;
};

struct Node {
  std::string bytes;
  int32_t token;
  Context context;
  Script script;
  int32_t units;  // length in characters
  double score;
};

struct Entry {
  double score;
  int32_t node;
  int32_t child;  // index into the node's child list
  bool operator<(const Entry& other) const {
    // Highest score first; among equals the older node and lower child, for determinism.
    if (score != other.score) return score < other.score;
    if (node != other.node) return node > other.node;
    return child > other.child;
  }
};

// English letter frequencies (per cent), the base of the bigram model.
constexpr std::array<double, 26> kLetterFrequency = {
    8.2, 1.5, 2.8, 4.3,   12.7, 2.2, 2.0, 6.1, 7.0,  0.15, 0.77, 4.0, 2.4,
    6.7, 7.5, 1.9, 0.095, 6.0,  6.3, 9.1, 2.8, 0.98, 2.4,  0.15, 2.0, 0.074};

bool is_vowel(char c) {
  return c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u';
}

class Synthesizer {
 public:
  Synthesizer(int32_t merge_count, bool llama_digits, bool digit_runs, uint64_t seed)
      : merge_count_(merge_count),
        llama_digits_(llama_digits),
        digit_runs_(digit_runs),
        seed_(seed) {
    const auto& order = unicode::gpt2_byte_order();
    known_.reserve(static_cast<size_t>(merge_count) + 256);
    pair_merge_.reserve(static_cast<size_t>(merge_count));
    tokens_.reserve(static_cast<size_t>(merge_count) + 512);
    merges_.reserve(static_cast<size_t>(merge_count));
    for (size_t i = 0; i < 256; ++i) {
      byte_token_[order[i]] = static_cast<int32_t>(i);
      tokens_.push_back(unicode::byte_to_unicode()[order[i]]);
      known_.emplace(std::string(1, static_cast<char>(order[i])), static_cast<int32_t>(i));
    }
    make_units();
    make_children();
  }

  void run() {
    nodes_.push_back({"", -1, Context::kRoot, Script::kNone, 0, 1.0});
    push_child(0, 0);
    while (static_cast<int32_t>(merges_.size()) < merge_count_ && !heap_.empty()) {
      const Entry top = heap_.top();
      heap_.pop();
      push_child(top.node, top.child + 1);
      const Node parent = nodes_[static_cast<size_t>(top.node)];  // copy: nodes_ grows below
      const Unit& unit =
          units_[static_cast<size_t>(children_of(parent)[static_cast<size_t>(top.child)].unit)];
      std::string bytes = parent.bytes + unit.bytes;
      int32_t token = find(bytes);
      if (token < 0) {
        token = parent.context == Context::kRoot ? make_character(bytes) : make_token(bytes);
      }
      if (token < 0) continue;  // not two tokens away: unreachable, leave it out
      const Context context = next_context(parent, unit);
      const auto index = static_cast<int32_t>(nodes_.size());
      nodes_.push_back({std::move(bytes), token, context,
                        unit.script != Script::kNone ? unit.script : parent.script,
                        parent.units + 1, top.score});
      push_child(index, 0);
    }
    check(static_cast<int32_t>(merges_.size()) == merge_count_, kWhere,
          "ran out of candidates after ", merges_.size(), " of ", merge_count_, " merges");
  }

  std::vector<std::string>& tokens() { return tokens_; }
  std::vector<std::string>& merges() { return merges_; }

 private:
  // The context of parent + unit: mostly the unit's own, but repeated spaces make a run
  // and a capital after capitals continues an upper-case word.
  static Context next_context(const Node& parent, const Unit& unit) {
    if (unit.next == Context::kSpace && parent.context != Context::kRoot) return Context::kSpaceRun;
    if (unit.next == Context::kUpperFirst &&
        (parent.context == Context::kUpperFirst || parent.context == Context::kUpperRun)) {
      return Context::kUpperRun;
    }
    return unit.next;
  }

  // Which child list a node uses: lower-case words by their last letter (the bigram model),
  // script words by script, everything else one list per context.
  static size_t child_key(Context context, const Node& node) {
    if (context == Context::kLower) return static_cast<uint8_t>(node.bytes.back());
    if (context == Context::kScript) return 128 + static_cast<size_t>(node.script);
    return 0;
  }

  void add_unit(std::string bytes, Context next, Script script = Script::kNone) {
    units_.push_back({std::move(bytes), next, script});
  }

  void add_range(uint32_t first, uint32_t last, Script script, uint32_t step = 1) {
    for (uint32_t cp = first; cp <= last; cp += step) {
      // × and ÷ sit among the Latin-1 letters but are symbols: a word would end before them.
      if (cp == 0xD7 || cp == 0xF7) continue;
      std::string bytes;
      unicode::append_utf8(bytes, cp);
      add_unit(std::move(bytes), Context::kScript, script);
    }
  }

  void make_units() {
    add_unit(" ", Context::kSpace);
    add_unit("\n", Context::kNewlineRun);
    add_unit("\t", Context::kTabRun);
    for (char c = 'a'; c <= 'z'; ++c) add_unit(std::string(1, c), Context::kLower);
    for (char c = 'A'; c <= 'Z'; ++c) add_unit(std::string(1, c), Context::kUpperFirst);
    for (char c = '0'; c <= '9'; ++c) add_unit(std::string(1, c), Context::kDigits);
    for (const char c : std::string_view(".,:;!?()[]{}<>\"'-_=+*/\\#@&%$|~`^")) {
      add_unit(std::string(1, c), Context::kPunct);
    }
    // Letters of a few scripts, so multi-byte text gets multi-byte tokens.
    add_range(0xC0, 0xFF, Script::kLatinExt);
    add_range(0x100, 0x17F, Script::kLatinExt);
    add_range(0x3B1, 0x3C9, Script::kGreek);
    add_range(0x410, 0x44F, Script::kCyrillic);
    add_range(0x4E00, 0x4E00 + 1500, Script::kCjk);
    add_range(0x3041, 0x3093, Script::kKana);
    add_range(0x30A1, 0x30F3, Script::kKana);
    add_range(0xAC00, 0xAC00 + 11000, Script::kHangul, 37);
    for (const uint32_t cp : {0x2014u, 0x2019u, 0x201Cu, 0x201Du, 0x2026u, 0x20ACu, 0x1F600u,
                              0x1F602u, 0x1F44Du, 0x2764u}) {
      std::string bytes;
      unicode::append_utf8(bytes, cp);
      add_unit(std::move(bytes), Context::kPunct);
    }
  }

  double letter_weight(char prev, char c) const {
    double w = kLetterFrequency[static_cast<size_t>(c - 'a')] / 100.0;
    const bool v1 = is_vowel(prev), v2 = is_vowel(c);
    if (v1 != v2) w *= 1.6;
    if (v1 && v2) w *= 0.5;
    // The seed makes each vocabulary its own: jitter every bigram by a factor 0.3..1.7.
    return w * (0.3 + 1.4 * uniform(seed_, static_cast<uint64_t>(prev), static_cast<uint64_t>(c)));
  }

  // Child lists: per context, groups of units, each group given a total probability that
  // is spread over its units by weight. What is left of 1 is the chance a word ends there,
  // so scores fall with length and the best-first walk favours short, common strings.
  void make_children() {
    const auto n_units = static_cast<int32_t>(units_.size());
    auto add_group = [&](std::vector<Child>& list, double mass, auto&& weight) {
      std::vector<Child> group;
      double total = 0;
      for (int32_t u = 0; u < n_units; ++u) {
        const double w = weight(units_[static_cast<size_t>(u)], u);
        if (w <= 0) continue;
        group.push_back({u, w});
        total += w;
      }
      for (Child& child : group) {
        child.probability *= mass / total;
        list.push_back(child);
      }
    };
    auto letter = [](const Unit& unit) { return static_cast<size_t>(unit.bytes[0] | 0x20) - 'a'; };
    auto is = [](Context context) {
      return [context](const Unit& unit, int32_t) { return unit.next == context ? 1.0 : 0.0; };
    };
    auto by_frequency = [&](Context context) {
      return [context, &letter](const Unit& unit, int32_t) {
        return unit.next == context ? kLetterFrequency[letter(unit)] : 0.0;
      };
    };
    auto ascii_punct = [](const Unit& unit, int32_t) {
      return unit.next == Context::kPunct && unit.bytes.size() == 1 ? 1.0 : 0.0;
    };
    auto script_group = [&](Script script, uint64_t salt) {
      return [this, script, salt](const Unit& unit, int32_t u) {
        return unit.script == script ? 0.2 + uniform(seed_, salt, static_cast<uint64_t>(u)) : 0.0;
      };
    };
    constexpr std::array<std::pair<Script, double>, 6> kScriptMass = {{{Script::kLatinExt, 0.02},
                                                                       {Script::kGreek, 0.005},
                                                                       {Script::kCyrillic, 0.02},
                                                                       {Script::kCjk, 0.03},
                                                                       {Script::kKana, 0.01},
                                                                       {Script::kHangul, 0.01}}};
    auto& root = root_children_;
    root.clear();
    add_group(root, 0.25, is(Context::kSpace));
    add_group(root, 0.05, is(Context::kNewlineRun));
    add_group(root, 0.01, is(Context::kTabRun));
    add_group(root, 0.25, by_frequency(Context::kLower));
    add_group(root, 0.08, by_frequency(Context::kUpperFirst));
    if (digit_runs_) add_group(root, 0.05, is(Context::kDigits));
    add_group(root, 0.08, ascii_punct);
    add_group(root, 0.005, [](const Unit& unit, int32_t) {
      return unit.next == Context::kPunct && unit.bytes.size() > 1 ? 1.0 : 0.0;
    });
    for (const auto& [script, mass] : kScriptMass) add_group(root, mass, script_group(script, 1));

    for (auto& lists : children_) {
      for (auto& list : lists) list.clear();
    }
    auto list_of = [&](Context context, size_t key = 0) -> std::vector<Child>& {
      return children_[static_cast<size_t>(context)][key];
    };
    {
      auto& space = list_of(Context::kSpace);
      add_group(space, 0.65, by_frequency(Context::kLower));
      add_group(space, 0.15, by_frequency(Context::kUpperFirst));
      add_group(space, 0.05, is(Context::kSpace));
      add_group(space, 0.02, ascii_punct);
      // GPT-2 keeps a space before a number; the other splits do not.
      if (digit_runs_ && !llama_digits_) add_group(space, 0.02, is(Context::kDigits));
      for (const auto& [script, mass] : kScriptMass)
        add_group(space, mass, script_group(script, 2));
    }
    add_group(list_of(Context::kSpaceRun), 0.6, is(Context::kSpace));
    add_group(list_of(Context::kNewlineRun), 0.4, is(Context::kNewlineRun));
    add_group(list_of(Context::kTabRun), 0.4, is(Context::kTabRun));
    for (char last = 'a'; last <= 'z'; ++last) {
      auto& list = list_of(Context::kLower, static_cast<size_t>(last));
      add_group(list, 0.8, [&](const Unit& unit, int32_t) {
        return unit.next == Context::kLower ? letter_weight(last, unit.bytes[0]) : 0.0;
      });
      add_group(list, 0.01, script_group(Script::kLatinExt, 3));
    }
    add_group(list_of(Context::kUpperFirst), 0.7, [&](const Unit& unit, int32_t) {
      return unit.next == Context::kLower ? letter_weight('e', unit.bytes[0]) : 0.0;
    });
    add_group(list_of(Context::kUpperFirst), 0.1, by_frequency(Context::kUpperFirst));
    add_group(list_of(Context::kUpperRun), 0.4, by_frequency(Context::kUpperFirst));
    if (digit_runs_) add_group(list_of(Context::kDigits), 0.6, is(Context::kDigits));
    add_group(list_of(Context::kPunct), 0.15, ascii_punct);
    for (const auto& [script, mass] : kScriptMass) {
      auto& list = list_of(Context::kScript, 128 + static_cast<size_t>(script));
      add_group(list, 0.6, script_group(script, 4 + static_cast<uint64_t>(script)));
      if (script == Script::kLatinExt) add_group(list, 0.3, by_frequency(Context::kLower));
    }

    auto by_probability = [](const Child& a, const Child& b) {
      return a.probability != b.probability ? a.probability > b.probability : a.unit < b.unit;
    };
    std::sort(root_children_.begin(), root_children_.end(), by_probability);
    for (auto& per_context : children_) {
      for (auto& list : per_context) std::sort(list.begin(), list.end(), by_probability);
    }
  }

  const std::vector<Child>& children_of(const Node& node) const {
    if (node.context == Context::kRoot) return root_children_;
    // Digit groups stop where the pre-tokenizer would split them.
    if (node.context == Context::kDigits && node.units >= (llama_digits_ ? 3 : 4)) return empty_;
    if ((node.context == Context::kPunct && node.units >= 3) || node.bytes.size() >= 24)
      return empty_;
    return children_[static_cast<size_t>(node.context)][child_key(node.context, node)];
  }

  void push_child(int32_t node, int32_t child) {
    const Node& n = nodes_[static_cast<size_t>(node)];
    const auto& list = children_of(n);
    if (child >= static_cast<int32_t>(list.size())) return;
    heap_.push({n.score * list[static_cast<size_t>(child)].probability, node, child});
  }

  int32_t find(const std::string& bytes) const {
    const auto it = known_.find(bytes);
    return it == known_.end() ? -1 : it->second;
  }

  int32_t add_token(const std::string& bytes, int32_t left, int32_t right) {
    const auto id = static_cast<int32_t>(tokens_.size());
    tokens_.push_back(unicode::bytes_to_byte_level(bytes));
    merges_.push_back(tokens_[static_cast<size_t>(left)] + " " +
                      tokens_[static_cast<size_t>(right)]);
    pair_merge_.emplace(pair(left, right),
                        std::pair<int32_t, int32_t>{static_cast<int32_t>(merges_.size() - 1), id});
    known_.emplace(bytes, id);
    return id;
  }

  // A multi-byte character as a token: its byte prefixes first, each one merge.
  int32_t make_character(const std::string& bytes) {
    int32_t token = -1;
    for (size_t length = 2; length <= bytes.size(); ++length) {
      const std::string prefix = bytes.substr(0, length);
      token = find(prefix);
      if (token < 0) token = make_token(prefix);
      if (token < 0) return -1;
    }
    return token;
  }

  // Runs BPE on `bytes` with the merges so far; a result of two tokens becomes a merge.
  int32_t make_token(const std::string& bytes) {
    if (static_cast<int32_t>(merges_.size()) >= merge_count_) return -1;
    symbols_.clear();
    for (const char c : bytes) symbols_.push_back(byte_token_[static_cast<uint8_t>(c)]);
    while (symbols_.size() > 2) {
      int32_t best_rank = INT32_MAX, best_result = -1;
      size_t best = 0;
      for (size_t i = 0; i + 1 < symbols_.size(); ++i) {
        const auto it = pair_merge_.find(pair(symbols_[i], symbols_[i + 1]));
        if (it != pair_merge_.end() && it->second.first < best_rank) {
          best_rank = it->second.first;
          best_result = it->second.second;
          best = i;
        }
      }
      if (best_result < 0) return -1;
      symbols_[best] = best_result;
      symbols_.erase(symbols_.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
    if (symbols_.size() != 2 || pair_merge_.count(pair(symbols_[0], symbols_[1])) != 0) return -1;
    return add_token(bytes, symbols_[0], symbols_[1]);
  }

  static uint64_t pair(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  int32_t merge_count_;
  bool llama_digits_;
  bool digit_runs_;
  uint64_t seed_;
  std::array<int32_t, 256> byte_token_{};
  std::vector<std::string> tokens_;
  std::vector<std::string> merges_;
  std::unordered_map<std::string, int32_t> known_;                        // raw bytes -> token
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> pair_merge_;  // -> (rank, token)
  std::vector<Unit> units_;
  std::vector<Child> root_children_;
  std::array<std::array<std::vector<Child>, 128 + static_cast<size_t>(Script::kCount)>,
             static_cast<size_t>(Context::kCount)>
      children_;
  const std::vector<Child> empty_;
  std::vector<Node> nodes_;
  std::priority_queue<Entry> heap_;
  std::vector<int32_t> symbols_;
};

// Llama-3.1's 256 special tokens, in order (ids 128000.. in the real vocabulary).
std::vector<std::string> llama3_specials(bool full) {
  if (!full) {
    return {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
            "<|eot_id|>"};
  }
  std::vector<std::string> specials = {"<|begin_of_text|>",
                                       "<|end_of_text|>",
                                       "<|reserved_special_token_0|>",
                                       "<|reserved_special_token_1|>",
                                       "<|finetune_right_pad_id|>",
                                       "<|reserved_special_token_2|>",
                                       "<|start_header_id|>",
                                       "<|end_header_id|>",
                                       "<|eom_id|>",
                                       "<|eot_id|>",
                                       "<|python_tag|>"};
  for (int i = 3; specials.size() < 256; ++i) {
    specials.push_back("<|reserved_special_token_" + std::to_string(i) + "|>");
  }
  return specials;
}

constexpr std::string_view kLlama3Template =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% "
    "endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

constexpr std::string_view kChatMlTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\\n' }}{% endif %}";

}  // namespace

TokenizerData synthesize_bpe_vocab(int32_t vocab_size, std::string pre, uint64_t seed) {
  const auto supported = supported_pre_tokenizers();
  if (std::find(supported.begin(), supported.end(), pre) == supported.end()) {
    std::string names;
    for (const std::string& name : supported) names += names.empty() ? name : ", " + name;
    fail(kWhere, "unknown pre-tokenizer '", pre, "'; supported: ", names);
  }
  const bool llama = pre == "llama-bpe" || pre == "llama3";
  // Digits: Llama-3 groups up to three, GPT-2 runs any length, SmolLM2 and Qwen2 split each.
  const bool digit_runs = llama || pre == "gpt2" || pre == "default";

  TokenizerData data;
  data.model = "gpt2";
  data.pre = pre;
  const std::vector<std::string> specials =
      llama ? llama3_specials(vocab_size >= 4096)
            : std::vector<std::string>{"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  const int64_t merge_count = int64_t{vocab_size} - 256 - static_cast<int64_t>(specials.size());
  check(merge_count >= 0, kWhere, "vocab_size ", vocab_size,
        " is too small: need 256 byte tokens + ", specials.size(), " special tokens");

  Synthesizer synthesizer(static_cast<int32_t>(merge_count), llama, digit_runs, seed);
  synthesizer.run();
  data.tokens = std::move(synthesizer.tokens());
  data.merges = std::move(synthesizer.merges());
  data.token_types.assign(data.tokens.size(), static_cast<int32_t>(TokenType::kNormal));
  auto special_id = [&](std::string_view name) {
    const auto it = std::find(specials.begin(), specials.end(), name);
    return static_cast<int32_t>(data.tokens.size() + static_cast<size_t>(it - specials.begin()));
  };
  if (llama) {
    data.bos_id = special_id("<|begin_of_text|>");
    data.eos_id = special_id("<|end_of_text|>");
    data.eot_id = special_id("<|eot_id|>");
    data.add_bos = true;
    data.chat_template = kLlama3Template;
  } else {
    // SmolLM2's choices: BOS <|im_start|>, EOS and padding <|im_end|>.
    data.bos_id = special_id("<|im_start|>");
    data.eos_id = special_id("<|im_end|>");
    data.pad_id = data.eos_id;
    data.chat_template = kChatMlTemplate;
  }
  for (const std::string& special : specials) {
    data.tokens.push_back(special);
    data.token_types.push_back(static_cast<int32_t>(TokenType::kControl));
  }
  check(static_cast<int64_t>(data.tokens.size()) == vocab_size, kWhere, "made ", data.tokens.size(),
        " tokens, expected ", vocab_size);
  return data;
}

}  // namespace onepass::model
