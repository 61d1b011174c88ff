// UTF-8 helpers, the GPT-2 byte <-> unicode mapping and a PCRE2 regex splitter, shared by
// the tokenizer sources (internal header).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace onepass::model::unicode {

/// Appends the UTF-8 encoding of code point `cp` (must be a scalar value).
void append_utf8(std::string& out, uint32_t cp);

/// Length of the UTF-8 sequence that starts with `lead` (1..4), or 0 for a byte that cannot
/// start one.
size_t utf8_sequence_length(uint8_t lead);

/// Offset of the first byte that is not part of valid UTF-8, or text.size() when all is.
size_t find_invalid_utf8(std::string_view text);

/// Offset of the first character of valid UTF-8 `text` that NFC normalisation may change (a
/// decomposed or excluded character, one that may compose with what precedes it, or a
/// combining mark out of canonical order), or text.size() when the text is surely in NFC.
size_t find_nfc_unstable(std::string_view text);

/// Moves the valid UTF-8 prefix of `pending` into `out`, each invalid subsequence replaced
/// by U+FFFD. An incomplete but so-far valid sequence at the end stays in `pending`, unless
/// `final`, when it becomes U+FFFD too.
void drain_utf8(std::string& pending, std::string& out, bool final);

/// GPT-2's reversible byte -> printable character map: printable Latin-1 bytes map to
/// themselves, the other 68 bytes to U+0100.. in byte order.
const std::array<std::string, 256>& byte_to_unicode();
/// The inverse: code point -> byte, or -1.
int byte_from_unicode(uint32_t cp);
/// The 256 bytes in GPT-2 vocabulary order (printable ones first).
const std::array<uint8_t, 256>& gpt2_byte_order();

/// Byte-level text of raw bytes (each byte as its mapped character).
std::string bytes_to_byte_level(std::string_view bytes);
/// Raw bytes of byte-level text; characters outside the map are kept as UTF-8.
std::string byte_level_to_bytes(std::string_view text);

/// Whether `cp` is a word character as the regex `\w` of Hugging Face tokenizers (Rust's regex
/// crate) has it: Alphabetic, a mark, a decimal digit, connector punctuation or a joiner.
bool is_word_character(uint32_t cp);

/// What a split keeps of the matches and the gaps between them (Hugging Face tokenizers'
/// SplitDelimiterBehavior).
enum class SplitBehavior : uint8_t {
  kIsolated,            ///< matches and gaps each become pieces
  kRemoved,             ///< only the gaps become pieces
  kMergedWithPrevious,  ///< a match joins the gap before it
  kMergedWithNext,      ///< a match joins the gap after it
  kContiguous,          ///< adjacent matches form one piece
};

/// One compiled PCRE2 pattern (UTF + Unicode properties, JIT when available).
class Regex {
 public:
  explicit Regex(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  /// Splits every piece of `pieces` at the matches of this pattern, keeping matches and
  /// gaps as `behavior` says; `invert` swaps the roles of matches and gaps. The text must
  /// be valid UTF-8 (not re-checked).
  std::vector<std::string_view> split(const std::vector<std::string_view>& pieces,
                                      SplitBehavior behavior = SplitBehavior::kIsolated,
                                      bool invert = false) const;

 private:
  struct Code;
  std::unique_ptr<Code> code_;
};

}  // namespace onepass::model::unicode
