// A Jinja2 subset interpreter, enough for the chat templates that models ship in
// tokenizer.chat_template: text, {{ }}, {% %}, {# #}, whitespace control, if/for/set/macro,
// namespaces, the common filters, tests and string/dict methods. Anything else is rejected
// with an onepass::Error naming the construct and its line and column.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace onepass::model::jinja {

/// Template variables: JSON objects keep their insertion order, as Python dicts do.
using Json = nlohmann::ordered_json;

/// How the template text is read. The defaults are Hugging Face's chat-template settings.
struct TemplateOptions {
  bool trim_blocks = true;    ///< drop the first newline after a block tag or comment
  bool lstrip_blocks = true;  ///< drop spaces and tabs before a block tag at a line start
  std::string name = "chat_template";  ///< the `where` of every error
};

/// A parsed template. Parsing checks every statement, filter and test name, so an
/// unsupported construct fails here, before any rendering.
class Template {
 public:
  explicit Template(std::string_view source, TemplateOptions options = {});
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  /// Renders with `variables` (a JSON object) as the template's context. Besides them the
  /// template sees range, namespace, dict, raise_exception(message) (throws onepass::Error
  /// with the message) and strftime_now(format) (local time, as transformers defines it).
  std::string render(const Json& variables) const;

  struct Program;

 private:
  std::unique_ptr<Program> program_;
};

}  // namespace onepass::model::jinja
