#include "onepass/model/chat.h"

#include "onepass/core/error.h"

namespace onepass {
namespace {

constexpr std::string_view kWhere = "chat";

bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

std::string_view trim(std::string_view text) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t begin = text.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  return text.substr(begin, text.find_last_not_of(kSpace) - begin + 1);
}

// Templates write newlines either literally or as the escape "\n" inside a Jinja string.
std::string unescape_newlines(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size() && text[i + 1] == 'n') {
      out += '\n';
      ++i;
    } else {
      out += text[i];
    }
  }
  return out;
}

// The constant system prompt of a ChatML template ("<|im_start|>system\nYou are ...
// <|im_end|>"): the first system block written as one literal, without expressions.
std::string default_system_prompt(std::string_view tpl) {
  constexpr std::string_view kOpen = "<|im_start|>system";
  for (size_t pos = tpl.find(kOpen); pos != std::string_view::npos;
       pos = tpl.find(kOpen, pos + 1)) {
    size_t start = pos + kOpen.size();
    if (tpl.substr(start, 1) == "\n") {
      start += 1;
    } else if (tpl.substr(start, 2) == "\\n") {
      start += 2;
    } else {
      continue;
    }
    const size_t end = tpl.find("<|im_end|>", start);
    if (end == std::string_view::npos) break;
    const std::string_view text = tpl.substr(start, end - start);
    if (text.find_first_of("'\"{}") != std::string_view::npos) continue;  // an expression
    return unescape_newlines(text);
  }
  return {};
}

// The fixed date a Llama-3.1 template uses when none is passed in.
std::string template_date(std::string_view tpl) {
  for (const std::string_view key : {"date_string = \"", "date_string = '"}) {
    const size_t pos = tpl.find(key);
    if (pos == std::string_view::npos) continue;
    const size_t start = pos + key.size();
    const size_t end = tpl.find(key.back(), start);
    if (end != std::string_view::npos) return std::string(tpl.substr(start, end - start));
  }
  return "26 Jul 2024";
}

std::string token_text(const Tokenizer& tokenizer, int32_t id, std::string_view fallback) {
  if (id < 0 || id >= tokenizer.vocab_size()) return std::string(fallback);
  return tokenizer.data().tokens[static_cast<size_t>(id)];
}

void render_chatml(const ChatFormat& format, std::span<const ChatMessage> messages,
                   std::string& out) {
  auto turn = [&](std::string_view role, std::string_view content) {
    out.append("<|im_start|>").append(role).append("\n").append(content).append("<|im_end|>\n");
  };
  if (!format.default_system.empty() && !messages.empty() && messages[0].role != "system") {
    turn("system", format.default_system);
  }
  for (const ChatMessage& message : messages) turn(message.role, message.content);
}

void render_llama3(const ChatFormat& format, std::span<const ChatMessage> messages,
                   std::string& out) {
  auto turn = [&](std::string_view role, std::string_view content) {
    out.append("<|start_header_id|>").append(role).append("<|end_header_id|>\n\n");
    out.append(trim(content)).append("<|eot_id|>");
  };
  if (format.knowledge_date_preamble) {
    std::string system =
        "Cutting Knowledge Date: December 2023\nToday Date: " + format.date + "\n\n";
    if (!messages.empty() && messages[0].role == "system") {
      system += trim(messages[0].content);
      messages = messages.subspan(1);
    }
    // Not trimmed as a whole: the preamble's blank line stays even without a system text.
    out.append("<|start_header_id|>system<|end_header_id|>\n\n")
        .append(system)
        .append("<|eot_id|>");
  }
  for (const ChatMessage& message : messages) turn(message.role, message.content);
}

void render_llama2(const ChatFormat& format, std::span<const ChatMessage> messages,
                   std::string& out) {
  std::string system;
  bool has_system = false;
  if (!messages.empty() && messages[0].role == "system") {
    system = messages[0].content;
    has_system = true;
    messages = messages.subspan(1);
  }
  auto clean = [&](std::string_view text) {
    return std::string(format.strip_content ? trim(text) : text);
  };
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    if (message.role == "user") {
      std::string content = message.content;
      if (i == 0 && has_system) {
        content = format.system_block ? "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content
                                      : system + "\n\n" + content;
      }
      if (i > 0 && format.bos_each_turn) out += format.bos_text;
      out.append("[INST] ").append(clean(content)).append(" [/INST]");
    } else if (message.role == "assistant") {
      const std::string_view space = format.space_around_response ? " " : "";
      out.append(space).append(clean(message.content)).append(space).append(format.eos_text);
    } else {
      fail(kWhere, "message ", i, " has role '", message.role,
           "'; the [INST] format takes user and assistant turns after an optional first "
           "system message");
    }
  }
}

}  // namespace

std::string_view chat_family_name(ChatFamily family) {
  switch (family) {
    case ChatFamily::kChatMl:
      return "chatml";
    case ChatFamily::kLlama3:
      return "llama3";
    case ChatFamily::kLlama2:
      return "llama2";
  }
  return "unknown";
}

ChatFormat detect_chat_format(std::string_view tpl, const Tokenizer& tokenizer) {
  ChatFormat format;
  if (contains(tpl, "<|im_start|>")) {
    format.family = ChatFamily::kChatMl;
    format.default_system = default_system_prompt(tpl);
  } else if (contains(tpl, "<|start_header_id|>")) {
    format.family = ChatFamily::kLlama3;
    format.knowledge_date_preamble = contains(tpl, "Cutting Knowledge Date");
    format.date = template_date(tpl);
  } else if (contains(tpl, "[INST]")) {
    format.family = ChatFamily::kLlama2;
    format.system_block = contains(tpl, "<<SYS>>");
    format.bos_each_turn =
        contains(tpl, "bos_token + '[INST]") || contains(tpl, "bos_token + \"[INST]");
    format.space_around_response =
        contains(tpl, "' ' + eos_token") || contains(tpl, "\" \" + eos_token");
    format.strip_content =
        contains(tpl, ".strip()") || contains(tpl, "|trim") || contains(tpl, "| trim");
    format.bos_text = token_text(tokenizer, tokenizer.bos_id(), "<s>");
    format.eos_text = token_text(tokenizer, tokenizer.eos_id(), "</s>");
  } else if (tokenizer.find_token("<|im_start|>")) {
    // Without a template we can read, ChatML is the one format whose marker proves itself:
    // the vocabulary has its token.
    format.family = ChatFamily::kChatMl;
  } else {
    fail(kWhere, tpl.empty() ? "the model has no chat template" : "unrecognised chat template",
         "; supported families: ChatML (<|im_start|>), Llama-3 (<|start_header_id|>), "
         "Llama-2/Mistral ([INST]), and the vocabulary has no <|im_start|> to fall back on");
  }
  return format;
}

ChatFormat detect_chat_format(const Tokenizer& tokenizer) {
  return detect_chat_format(tokenizer.data().chat_template, tokenizer);
}

std::string render_chat(const ChatFormat& format, std::span<const ChatMessage> messages,
                        bool add_generation_prompt) {
  std::string out;
  switch (format.family) {
    case ChatFamily::kChatMl:
      render_chatml(format, messages, out);
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    case ChatFamily::kLlama3:
      render_llama3(format, messages, out);
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case ChatFamily::kLlama2:
      // The prompt already ends with " [/INST]", where the answer begins.
      render_llama2(format, messages, out);
      break;
  }
  return out;
}

}  // namespace onepass
