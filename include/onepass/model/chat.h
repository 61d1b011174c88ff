// Chat prompts: the template family of a model, read from its chat_template string, and the
// rendering of a conversation in that family's format (no Jinja engine: the families are few
// and fixed).
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "onepass/model/tokenizer.h"

namespace onepass {

struct ChatMessage {
  std::string role;  ///< "system", "user", "assistant" (ChatML and Llama-3 accept any role)
  std::string content;
};

enum class ChatFamily {
  kChatMl,  ///< <|im_start|>role\n...<|im_end|>: SmolLM2, Qwen2
  kLlama3,  ///< <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  kLlama2,  ///< [INST] ... [/INST]: Llama-2 chat, Mistral instruct
};

std::string_view chat_family_name(ChatFamily family);

/// A template family plus the details of the template that change the text.
struct ChatFormat {
  ChatFamily family = ChatFamily::kChatMl;
  /// ChatML: system prompt the template inserts when the first message is not a system one.
  std::string default_system;
  /// Llama-3.1+: a system header always comes first, opening with "Cutting Knowledge Date:
  /// December 2023\nToday Date: <date>\n\n".
  bool knowledge_date_preamble = false;
  std::string date = "26 Jul 2024";
  /// [INST] variants: a <<SYS>> block in the first user turn (Llama-2; otherwise the system
  /// text is put before the first user message), BOS before every later [INST], spaces
  /// around an answer (" answer </s>"), contents stripped of surrounding whitespace.
  bool system_block = false;
  bool bos_each_turn = false;
  bool space_around_response = false;
  bool strip_content = false;
  std::string bos_text = "<s>";
  std::string eos_text = "</s>";
};

/// Recognises the family of `chat_template`. An empty or unrecognised template falls back
/// to ChatML when the vocabulary has <|im_start|>; otherwise throws onepass::Error.
ChatFormat detect_chat_format(std::string_view chat_template, const Tokenizer& tokenizer);
/// The same for the tokenizer's own template (TokenizerData::chat_template).
ChatFormat detect_chat_format(const Tokenizer& tokenizer);

/// The prompt text of `messages`, ending with the assistant's header when
/// `add_generation_prompt`. The text never starts with BOS: encode it with
/// EncodeOptions::add_special so the tokenizer adds BOS where the model wants one, and with
/// parse_special so the markers become their control tokens.
std::string render_chat(const ChatFormat& format, std::span<const ChatMessage> messages,
                        bool add_generation_prompt = true);

}  // namespace onepass
