// Splits a template into text and tag tokens, applying Jinja's whitespace control: "-" on a
// tag side strips all whitespace there, trim_blocks drops the newline after a block tag or
// comment, lstrip_blocks drops the indentation before one ("+" turns either off).
#include <cctype>

#include "model/jinja/jinja_internal.h"
#include "onepass/core/error.h"

namespace onepass::model::jinja {

std::string position(std::string_view source, size_t offset) {
  size_t line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset && i < source.size(); ++i) {
    if (source[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return cat("line ", line, ", column ", offset - line_start + 1);
}

namespace {

constexpr std::string_view kSpace = " \t\n\r\f\v";

class Lexer {
 public:
  Lexer(std::string_view source, const TemplateOptions& options)
      : source_(source), options_(options) {}

  std::vector<Token> run() {
    bool line_starting = true;  // the text so far ends at the start of a line
    size_t pos = 0;
    while (pos < source_.size()) {
      const size_t open = find_tag(pos);
      std::string text(source_.substr(pos, open - pos));
      if (open == source_.size()) {
        emit_text(std::move(text), pos);
        break;
      }
      const char kind = source_[open + 1];  // '{', '%' or '#'
      const char control = open + 2 < source_.size() ? source_[open + 2] : '\0';
      if (control == '-') {
        text.erase(text.find_last_not_of(kSpace) + 1);
      } else if (options_.lstrip_blocks && kind != '{' && control != '+') {
        const size_t line_begin = text.rfind('\n');
        const size_t from = line_begin == std::string::npos ? 0 : line_begin + 1;
        if ((line_begin != std::string::npos || line_starting) &&
            text.find_first_not_of(" \t", from) == std::string::npos) {
          text.erase(from);
        }
      }
      emit_text(std::move(text), pos);
      size_t inner = open + 2 + ((control == '-' || control == '+') ? 1 : 0);
      size_t end = 0;
      bool strip_after = false;
      bool keep_newline = false;
      if (kind == '#') {
        end = source_.find("#}", inner);
        if (end == std::string_view::npos) fail_at(open, "the comment is not closed with '#}'");
        strip_after = end > inner && source_[end - 1] == '-';
        keep_newline = end > inner && source_[end - 1] == '+';
        end += 2;
      } else {
        end = lex_tag(kind, inner, open, strip_after, keep_newline);
        if (kind == '%' && is_raw_open()) {
          // {% raw %}text{% endraw %}: the text is output as written (as in jinja2,
          // trim_blocks does not drop a newline right after {% raw %}; "-" strips).
          tokens_.resize(tokens_.size() - 3);
          end = lex_raw(after_tag(end, strip_after, /*keep_newline=*/true), open);
          line_starting = end > 0 && source_[end - 1] == '\n';
          pos = end;
          continue;
        }
      }
      pos = end;
      if (strip_after) {
        while (pos < source_.size() && kSpace.find(source_[pos]) != std::string_view::npos) ++pos;
      } else if (kind != '{' && options_.trim_blocks && !keep_newline && pos < source_.size() &&
                 source_[pos] == '\n') {
        ++pos;
      }
      line_starting = pos > 0 && source_[pos - 1] == '\n';
    }
    tokens_.push_back(Token{Token::Kind::kEnd, "", 0, 0.0, source_.size()});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail_at(size_t offset, std::string_view what) {
    fail(options_.name, position(source_, offset), ": ", what);
  }

  bool is_raw_open() const {
    const size_t n = tokens_.size();
    return n >= 3 && tokens_[n - 3].kind == Token::Kind::kStmtBegin && tokens_[n - 2].kind == Token::Kind::kName &&
           tokens_[n - 2].text == "raw" && tokens_[n - 1].kind == Token::Kind::kStmtEnd;
  }

  // Where text resumes after a block tag ending at `pos`: "-" strips the whitespace that
  // follows, trim_blocks the one newline.
  size_t after_tag(size_t pos, bool strip_after, bool keep_newline) const {
    if (strip_after) {
      while (pos < source_.size() && kSpace.find(source_[pos]) != std::string_view::npos) ++pos;
    } else if (options_.trim_blocks && !keep_newline && pos < source_.size() && source_[pos] == '\n') {
      ++pos;
    }
    return pos;
  }

  // The text of a raw block from `pos` up to its {% endraw %} (with the same whitespace
  // control as any block tag); returns the offset where the template resumes.
  size_t lex_raw(size_t pos, size_t open) {
    for (size_t tag = source_.find("{%", pos); tag != std::string_view::npos; tag = source_.find("{%", tag + 2)) {
      size_t i = tag + 2;
      const char control = i < source_.size() ? source_[i] : '\0';
      if (control == '-' || control == '+') ++i;
      while (i < source_.size() && kSpace.find(source_[i]) != std::string_view::npos) ++i;
      if (source_.substr(i, 6) != "endraw") continue;
      i += 6;
      while (i < source_.size() && kSpace.find(source_[i]) != std::string_view::npos) ++i;
      bool strip_after = false;
      bool keep_newline = false;
      if (i < source_.size() && (source_[i] == '-' || source_[i] == '+')) {
        (source_[i] == '-' ? strip_after : keep_newline) = true;
        ++i;
      }
      if (source_.substr(i, 2) != "%}") continue;
      std::string text(source_.substr(pos, tag - pos));
      if (control == '-') {
        text.erase(text.find_last_not_of(kSpace) + 1);
      } else if (options_.lstrip_blocks && control != '+') {
        const size_t line_begin = text.rfind('\n');
        const size_t from = line_begin == std::string::npos ? 0 : line_begin + 1;
        const bool at_line_start = line_begin != std::string::npos || pos == 0 || source_[pos - 1] == '\n';
        if (at_line_start && text.find_first_not_of(" \t", from) == std::string::npos) {
          text.erase(from);
        }
      }
      emit_text(std::move(text), pos);
      return after_tag(i + 2, strip_after, keep_newline);
    }
    fail_at(open, "the raw block is not closed with '{% endraw %}'");
  }

  size_t find_tag(size_t from) const {
    for (size_t i = source_.find('{', from); i != std::string_view::npos;
         i = source_.find('{', i + 1)) {
      if (i + 1 < source_.size()) {
        const char next = source_[i + 1];
        if (next == '{' || next == '%' || next == '#') return i;
      }
    }
    return source_.size();
  }

  void emit_text(std::string text, size_t offset) {
    if (!text.empty()) tokens_.push_back(Token{Token::Kind::kText, std::move(text), 0, 0.0, offset});
  }

  // Tokens of one {{ }} or {% %} tag from `pos`; returns the offset after its end.
  size_t lex_tag(char kind, size_t pos, size_t open, bool& strip_after, bool& keep_newline) {
    const bool output = kind == '{';
    tokens_.push_back(Token{output ? Token::Kind::kOutputBegin : Token::Kind::kStmtBegin, "", 0,
                            0.0, open});
    const std::string_view close = output ? "}}" : "%}";
    int depth = 0;  // open brackets: "}}" inside a dict literal does not end the tag
    while (true) {
      while (pos < source_.size() && kSpace.find(source_[pos]) != std::string_view::npos) ++pos;
      if (pos >= source_.size()) {
        fail_at(open, cat("the tag is not closed with '", close, "'"));
      }
      if (depth == 0) {
        for (const char mark : {'-', '+'}) {
          if (source_[pos] == mark && source_.substr(pos + 1, 2) == close) {
            (mark == '-' ? strip_after : keep_newline) = true;
            ++pos;
          }
        }
        if (source_.substr(pos, 2) == close) {
          tokens_.push_back(Token{output ? Token::Kind::kOutputEnd : Token::Kind::kStmtEnd, "",
                                  0, 0.0, pos});
          return pos + 2;
        }
      }
      const char c = source_[pos];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t end = pos;
        while (end < source_.size() &&
               (std::isalnum(static_cast<unsigned char>(source_[end])) || source_[end] == '_')) {
          ++end;
        }
        tokens_.push_back(Token{Token::Kind::kName, std::string(source_.substr(pos, end - pos)),
                                0, 0.0, pos});
        pos = end;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        pos = lex_number(pos);
      } else if (c == '\'' || c == '"') {
        pos = lex_string(pos);
      } else {
        static constexpr std::string_view kTwo[] = {"==", "!=", "<=", ">=", "//", "**"};
        std::string op(1, c);
        for (const std::string_view two : kTwo) {
          if (source_.substr(pos, 2) == two) op = two;
        }
        if (op.size() == 1 && std::string_view("+-*/%~|.,:()[]{}<>=").find(c) ==
                                  std::string_view::npos) {
          fail_at(pos, cat("unexpected character '", c, "'"));
        }
        if (c == '(' || c == '[' || c == '{') ++depth;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        tokens_.push_back(Token{Token::Kind::kOperator, op, 0, 0.0, pos});
        pos += op.size();
      }
    }
  }

  size_t lex_number(size_t pos) {
    size_t end = pos;
    bool is_float = false;
    const auto digit = [&](size_t i) {
      return i < source_.size() && (std::isdigit(static_cast<unsigned char>(source_[i])) ||
                                    source_[i] == '_');
    };
    while (digit(end)) ++end;
    if (end + 1 < source_.size() && source_[end] == '.' &&
        std::isdigit(static_cast<unsigned char>(source_[end + 1]))) {
      is_float = true;
      ++end;
      while (digit(end)) ++end;
    }
    if (end < source_.size() && (source_[end] == 'e' || source_[end] == 'E')) {
      size_t exp = end + 1;
      if (exp < source_.size() && (source_[exp] == '+' || source_[exp] == '-')) ++exp;
      if (digit(exp)) {
        is_float = true;
        end = exp;
        while (digit(end)) ++end;
      }
    }
    std::string text;
    for (size_t i = pos; i < end; ++i) {
      if (source_[i] != '_') text += source_[i];
    }
    Token token{is_float ? Token::Kind::kFloat : Token::Kind::kInt, text, 0, 0.0, pos};
    if (is_float) {
      token.number = std::stod(text);
    } else {
      token.integer = std::stoll(text);
    }
    tokens_.push_back(std::move(token));
    return end;
  }

  size_t lex_string(size_t pos) {
    const char quote = source_[pos];
    std::string text;
    size_t i = pos + 1;
    for (; i < source_.size() && source_[i] != quote; ++i) {
      if (source_[i] != '\\' || i + 1 >= source_.size()) {
        text += source_[i];
        continue;
      }
      const char escaped = source_[++i];
      switch (escaped) {
        case 'n':
          text += '\n';
          break;
        case 't':
          text += '\t';
          break;
        case 'r':
          text += '\r';
          break;
        case '\\':
        case '\'':
        case '"':
          text += escaped;
          break;
        case '\n':
          break;  // a line continuation
        default:
          fail_at(i - 1, cat("the string escape '\\", escaped, "' is not supported"));
      }
    }
    if (i >= source_.size()) fail_at(pos, "the string is not closed");
    tokens_.push_back(Token{Token::Kind::kString, std::move(text), 0, 0.0, pos});
    return i + 1;
  }

  std::string_view source_;
  const TemplateOptions& options_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(std::string_view source, const TemplateOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace onepass::model::jinja
