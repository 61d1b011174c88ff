// Chat prompts: a conversation rendered with the model's own chat template
// (tokenizer.chat_template, a Jinja template) as transformers' apply_chat_template renders it.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "onepass/model/tokenizer.h"

namespace onepass::model {

struct ChatMessage {
  std::string role;  ///< "system", "user", "assistant", ... as the template accepts them
  std::string content;
};

/// The variables a chat template sees besides `messages`.
struct ChatTemplateOptions {
  bool add_generation_prompt = true;  ///< end with the header of the assistant's turn
  std::string bos_token;              ///< the text of the vocabulary's BOS and EOS tokens
  std::string eos_token;
  /// More variables, as the text of a JSON object: tools, date_string, enable_thinking, ...
  /// (text, so that no JSON library reaches the public headers; empty: none).
  std::string extra_variables_json;
};

/// ChatML without a default system prompt: the format of models that have no chat template
/// but whose vocabulary has <|im_start|>.
inline constexpr std::string_view kChatMlTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\\n' }}{% endif %}";

/// `chat_template` rendered with `messages` (a list of {role, content} dicts) and `options`,
/// byte for byte as jinja2 renders it with trim_blocks and lstrip_blocks. A template using
/// something the interpreter lacks, or one that calls raise_exception, throws onepass::Error
/// ("[chat_template] line L, column C: ...").
std::string render_chat_template(std::string_view chat_template,
                                 std::span<const ChatMessage> messages,
                                 const ChatTemplateOptions& options);

/// The template the model's prompts are rendered with: the tokenizer's own, or ChatML when
/// it has none and its vocabulary has <|im_start|>; otherwise throws onepass::Error.
std::string chat_template_of(const Tokenizer& tokenizer);

/// The prompt text of `messages` in the model's own format, with its BOS and EOS texts. When
/// the tokenizer adds BOS itself (TokenizerData::add_bos), a BOS the template writes first is
/// left out, so that encoding with EncodeOptions::add_special gives one BOS; encode with
/// parse_special so the markers become their control tokens.
std::string render_chat(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                        bool add_generation_prompt = true);

}  // namespace onepass::model
