#include "onepass/model/chat.h"

#include "model/jinja/jinja.h"
#include "onepass/core/error.h"

namespace onepass::model {
namespace {

std::string token_text(const Tokenizer& tokenizer, int32_t id) {
  if (id < 0 || id >= tokenizer.vocab_size()) return {};
  return tokenizer.data().tokens[static_cast<size_t>(id)];
}

}  // namespace

std::string render_chat_template(std::string_view chat_template,
                                 std::span<const ChatMessage> messages,
                                 const ChatTemplateOptions& options) {
  jinja::Json variables = jinja::Json::object();
  if (!options.extra_variables_json.empty()) {
    try {
      variables = jinja::Json::parse(options.extra_variables_json);
    } catch (const jinja::Json::exception& e) {
      fail("chat", "extra_variables_json is not valid JSON: ", e.what());
    }
    check(variables.is_object(), "chat", "extra_variables_json must be a JSON object, got ",
          variables.type_name());
  }
  jinja::Json list = jinja::Json::array();
  for (const ChatMessage& message : messages) {
    list.push_back({{"role", message.role}, {"content", message.content}});
  }
  variables["messages"] = std::move(list);
  variables["add_generation_prompt"] = options.add_generation_prompt;
  variables["bos_token"] = options.bos_token;
  variables["eos_token"] = options.eos_token;
  return jinja::Template(chat_template).render(variables);
}

std::string chat_template_of(const Tokenizer& tokenizer) {
  const std::string& own = tokenizer.data().chat_template;
  if (!own.empty()) return own;
  // No template: ChatML is the one format whose marker proves itself, the vocabulary has
  // its token. Any other guess would be silent and likely wrong.
  check(tokenizer.find_token("<|im_start|>").has_value(), "chat",
        "the model has no chat template (tokenizer.chat_template) and its vocabulary has no "
        "<|im_start|> to use ChatML with");
  return std::string(kChatMlTemplate);
}

std::string render_chat(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                        bool add_generation_prompt) {
  const std::string chat_template = chat_template_of(tokenizer);
  ChatTemplateOptions options;
  options.add_generation_prompt = add_generation_prompt;
  options.bos_token = token_text(tokenizer, tokenizer.bos_id());
  options.eos_token = token_text(tokenizer, tokenizer.eos_id());
  std::string prompt = render_chat_template(chat_template, messages, options);
  // Only a BOS written through `bos_token` is dropped: SmolLM2's BOS is <|im_start|>, which
  // its template writes as the opening of every turn.
  const std::string& bos = options.bos_token;
  if (tokenizer.data().add_bos && !bos.empty() &&
      chat_template.find("bos_token") != std::string::npos && prompt.starts_with(bos)) {
    prompt.erase(0, bos.size());
  }
  return prompt;
}

}  // namespace onepass::model
