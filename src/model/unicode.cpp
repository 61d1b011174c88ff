#include "model/unicode.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "onepass/core/error.h"

namespace onepass::model::unicode {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Range the second byte of a sequence must fall in: it is what excludes overlong forms,
// surrogates and code points above U+10FFFF (Unicode 15, table 3-7).
void second_byte_range(uint8_t lead, uint8_t& lo, uint8_t& hi) {
  lo = 0x80;
  hi = 0xBF;
  if (lead == 0xE0) lo = 0xA0;
  if (lead == 0xED) hi = 0x9F;
  if (lead == 0xF0) lo = 0x90;
  if (lead == 0xF4) hi = 0x8F;
}

// Length of the valid sequence at `pos`, 0 if the bytes there are invalid, or -1 if they
// are a valid but incomplete prefix that ends with the text.
int sequence_at(std::string_view text, size_t pos, size_t* valid_prefix) {
  const auto lead = static_cast<uint8_t>(text[pos]);
  const size_t length = utf8_sequence_length(lead);
  *valid_prefix = 1;
  if (length == 0) return 0;
  for (size_t i = 1; i < length; ++i) {
    if (pos + i >= text.size()) return -1;
    const auto byte = static_cast<uint8_t>(text[pos + i]);
    uint8_t lo = 0x80, hi = 0xBF;
    if (i == 1) second_byte_range(lead, lo, hi);
    if (byte < lo || byte > hi) return 0;
    *valid_prefix = i + 1;
  }
  return static_cast<int>(length);
}

}  // namespace

void append_utf8(std::string& out, uint32_t cp) {
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

size_t utf8_sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

size_t find_invalid_utf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<uint8_t>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    size_t prefix = 0;
    const int length = sequence_at(text, pos, &prefix);
    if (length <= 0) return pos;
    pos += static_cast<size_t>(length);
  }
  return text.size();
}

void drain_utf8(std::string& pending, std::string& out, bool final) {
  size_t pos = 0;
  while (pos < pending.size()) {
    size_t prefix = 0;
    const int length = sequence_at(pending, pos, &prefix);
    if (length > 0) {
      out.append(pending, pos, static_cast<size_t>(length));
      pos += static_cast<size_t>(length);
    } else if (length < 0 && !final) {
      break;  // wait for the rest of this character
    } else {
      // One U+FFFD per maximal invalid subpart, the Unicode-recommended practice.
      out += kReplacement;
      pos += prefix;
    }
  }
  pending.erase(0, pos);
}

const std::array<uint8_t, 256>& gpt2_byte_order() {
  static const std::array<uint8_t, 256> order = [] {
    std::array<uint8_t, 256> bytes{};
    size_t n = 0;
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    for (int b = 0; b < 256; ++b) {
      if (printable(b)) bytes[n++] = static_cast<uint8_t>(b);
    }
    for (int b = 0; b < 256; ++b) {
      if (!printable(b)) bytes[n++] = static_cast<uint8_t>(b);
    }
    return bytes;
  }();
  return order;
}

namespace {

struct ByteMaps {
  std::array<std::string, 256> to_unicode;
  std::array<int16_t, 512> from_unicode{};  // every mapped code point is below U+0144
};

const ByteMaps& byte_maps() {
  static const ByteMaps maps = [] {
    ByteMaps m;
    m.from_unicode.fill(-1);
    const auto& order = gpt2_byte_order();
    uint32_t next_extra = 256;
    for (const uint8_t b : order) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const uint32_t cp = printable ? b : next_extra++;
      append_utf8(m.to_unicode[b], cp);
      m.from_unicode[cp] = static_cast<int16_t>(b);
    }
    return m;
  }();
  return maps;
}

}  // namespace

const std::array<std::string, 256>& byte_to_unicode() {
  return byte_maps().to_unicode;
}

int byte_from_unicode(uint32_t cp) {
  return cp < byte_maps().from_unicode.size() ? byte_maps().from_unicode[cp] : -1;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  const auto& map = byte_to_unicode();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out += map[static_cast<uint8_t>(c)];
  return out;
}

std::string byte_level_to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const auto lead = static_cast<uint8_t>(text[pos]);
    size_t length = utf8_sequence_length(lead);
    if (length == 0 || pos + length > text.size()) length = 1;
    uint32_t cp = lead;
    if (length > 1) {
      cp = lead & (0xFFu >> (length + 1));
      for (size_t i = 1; i < length; ++i)
        cp = (cp << 6) | (static_cast<uint8_t>(text[pos + i]) & 0x3Fu);
    }
    const int byte = byte_from_unicode(cp);
    if (byte >= 0) {
      out += static_cast<char>(byte);
    } else {
      out.append(text, pos, length);
    }
    pos += length;
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// NFC quick check

namespace {

struct CodeRange {
  uint32_t first, last;
};
struct CombiningRange {
  uint32_t first, last;
  uint8_t combining_class;
};

#include "model/unicode_nfc_tables.inc"

template <typename Range>
const Range* find_range(const Range* begin, const Range* end, uint32_t cp) {
  const Range* it =
      std::upper_bound(begin, end, cp, [](uint32_t value, const Range& r) { return value < r.first; });
  if (it == begin) return nullptr;
  --it;
  return cp <= it->last ? it : nullptr;
}

uint8_t combining_class(uint32_t cp) {
  const CombiningRange* r =
      find_range(std::begin(kCombiningClasses), std::end(kCombiningClasses), cp);
  return r == nullptr ? 0 : r->combining_class;
}

}  // namespace

size_t find_nfc_unstable(std::string_view text) {
  uint8_t previous_class = 0;
  for (size_t pos = 0; pos < text.size();) {
    const auto lead = static_cast<uint8_t>(text[pos]);
    if (lead < 0x80) {  // ASCII is stable and of class 0
      previous_class = 0;
      ++pos;
      continue;
    }
    size_t length = std::max<size_t>(1, utf8_sequence_length(lead));
    length = std::min(length, text.size() - pos);
    uint32_t cp = lead & (0xFFu >> (length + 1));
    for (size_t i = 1; i < length; ++i) cp = (cp << 6) | (static_cast<uint8_t>(text[pos + i]) & 0x3Fu);
    if (find_range(std::begin(kNfcUnstable), std::end(kNfcUnstable), cp) != nullptr) return pos;
    const uint8_t cls = combining_class(cp);
    if (cls != 0 && previous_class > cls) return pos;  // canonical reordering would move it
    previous_class = cls;
    pos += length;
  }
  return text.size();
}

bool is_word_character(uint32_t cp) {
  if (cp < 0x80) {
    return (cp >= '0' && cp <= '9') || (cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z') ||
           cp == '_';
  }
  // PCRE2's Unicode tables answer the rest; the pattern is compiled once, anchored at the
  // start of the one character it is given.
  static const std::unique_ptr<pcre2_code, decltype(&pcre2_code_free)> word(
      [] {
        constexpr std::string_view pattern = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]";
        int error_code = 0;
        PCRE2_SIZE error_offset = 0;
        pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()),
                                         pattern.size(), PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED,
                                         &error_code, &error_offset, nullptr);
        check(code != nullptr, "tokenizer", "the word-character class does not compile (error ",
              error_code, " at offset ", error_offset, ")");
        return code;
      }(),
      &pcre2_code_free);
  std::string text;
  append_utf8(text, cp);
  const std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(word.get(), nullptr), &pcre2_match_data_free);
  check(match != nullptr, "tokenizer", "out of memory for regex match data");
  return pcre2_match(word.get(), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0,
                     PCRE2_NO_UTF_CHECK, match.get(), nullptr) > 0;
}

// ---------------------------------------------------------------------------------------
// Regex

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

Regex::Regex(std::string_view pattern) : code_(std::make_unique<Code>()) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                              PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    fail("tokenizer", "pre-tokenizer regex does not compile at offset ", error_offset, ": ",
         reinterpret_cast<const char*>(message));
  }
  // JIT is an optimisation only; without it the interpreter gives the same matches.
  (void)pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() = default;

std::vector<std::string_view> Regex::split(const std::vector<std::string_view>& pieces,
                                           SplitBehavior behavior, bool invert) const {
  std::vector<std::string_view> out;
  out.reserve(pieces.size() * 2);
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(code_->code, nullptr), &pcre2_match_data_free);
  check(match != nullptr, "tokenizer", "out of memory for regex match data");
  struct Segment {
    size_t begin, end;
    bool is_match;
  };
  std::vector<Segment> segments;
  for (const std::string_view piece : pieces) {
    segments.clear();
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
    size_t start = 0;  // where the next gap begins
    size_t offset = 0;
    while (offset < piece.size()) {
      // The caller validated the UTF-8 once; re-checking per call would be quadratic.
      const int rc = pcre2_match(code_->code, subject, piece.size(), offset, PCRE2_NO_UTF_CHECK,
                                 match.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(rc, message, sizeof(message));
        fail("tokenizer", "pre-tokenizer regex failed: ", reinterpret_cast<const char*>(message));
      }
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
      const size_t begin = ovector[0], end = ovector[1];
      if (begin > start) segments.push_back({start, begin, invert});
      if (end > begin) {
        segments.push_back({begin, end, !invert});
        start = offset = end;
      } else {
        // An empty match: step over one character so the loop always advances.
        offset =
            begin + std::max<size_t>(1, utf8_sequence_length(static_cast<uint8_t>(piece[begin])));
      }
    }
    if (start < piece.size()) segments.push_back({start, piece.size(), invert});

    // Combine as Hugging Face tokenizers does: a match merges into a neighbouring gap only,
    // never into another match.
    std::vector<Segment> kept;
    switch (behavior) {
      case SplitBehavior::kIsolated:
        kept = segments;
        break;
      case SplitBehavior::kRemoved:
        for (const Segment& s : segments) {
          if (!s.is_match) kept.push_back(s);
        }
        break;
      case SplitBehavior::kMergedWithPrevious: {
        bool previous_match = false;
        for (const Segment& s : segments) {
          if (s.is_match && !previous_match && !kept.empty()) {
            kept.back().end = s.end;
          } else {
            kept.push_back(s);
          }
          previous_match = s.is_match;
        }
        break;
      }
      case SplitBehavior::kMergedWithNext: {
        bool next_match = false;
        for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
          if (it->is_match && !next_match && !kept.empty()) {
            kept.back().begin = it->begin;
          } else {
            kept.push_back(*it);
          }
          next_match = it->is_match;
        }
        std::reverse(kept.begin(), kept.end());
        break;
      }
      case SplitBehavior::kContiguous:
        for (const Segment& s : segments) {
          if (s.is_match && !kept.empty() && kept.back().is_match) {
            kept.back().end = s.end;
          } else {
            kept.push_back(s);
          }
        }
        break;
    }
    for (const Segment& s : kept) out.push_back(piece.substr(s.begin, s.end - s.begin));
  }
  return out;
}

}  // namespace onepass::model::unicode
