// Chat formatting: family detection from real-world template texts, hand-written expected
// prompts, and (when python3 + jinja2 are installed) agreement with the templates rendered
// by jinja2 as transformers' apply_chat_template does.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "onepass/core/error.h"
#include "onepass/model/chat.h"
#include "onepass/model/tokenizer.h"

namespace onepass {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// SmolLM2-135M-Instruct's template, as stored in its GGUF file (literal newlines).
constexpr std::string_view kSmolLm2Template =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\n' }}{% endif %}";

// Qwen2-style ChatML with a default system prompt (escaped newlines).
constexpr std::string_view kQwen2Template =
    R"({% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})";

constexpr std::string_view kLlama3Template =
    R"({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %})";

// The shape of Llama-3.1's template without its tool-calling branches.
constexpr std::string_view kLlama31Template = R"({{- bos_token }}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)";

constexpr std::string_view kLlama2Template =
    R"({% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %})";

constexpr std::string_view kMistralTemplate =
    R"({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %})";

// A vocabulary with the ChatML tokens (the synthesizer's default specials).
const Tokenizer& chatml_vocab() {
  static const Tokenizer tokenizer(synthesize_bpe_vocab(300, "gpt2", 1));
  return tokenizer;
}

// Llama-3's specials, no <|im_start|>.
const Tokenizer& llama3_vocab() {
  static const Tokenizer tokenizer(synthesize_bpe_vocab(300, "llama-bpe", 1));
  return tokenizer;
}

// A minimal SentencePiece vocabulary with <s> and </s>.
const Tokenizer& llama2_vocab() {
  static const Tokenizer tokenizer = [] {
    TokenizerData data;
    data.model = "llama";
    data.tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81"};
    data.scores = {0, 0, 0, -1};
    data.token_types = {2, 3, 3, 1};
    data.unk_id = 0;
    data.bos_id = 1;
    data.eos_id = 2;
    data.add_bos = true;
    return Tokenizer(data);
  }();
  return tokenizer;
}

const std::vector<ChatMessage> kOneTurn = {{"user", "Hello!"}};
const std::vector<ChatMessage> kWithSystem = {{"system", "You are terse."},
                                              {"user", "Hi"},
                                              {"assistant", "Hello."},
                                              {"user", "  How are you?  "}};
const std::vector<ChatMessage> kAlternating = {{"user", "a"}, {"assistant", "b"}, {"user", "c"}};

TEST(Chat, DetectsFamiliesAndTheirDetails) {
  const ChatFormat smollm = detect_chat_format(kSmolLm2Template, chatml_vocab());
  EXPECT_EQ(smollm.family, ChatFamily::kChatMl);
  EXPECT_EQ(smollm.default_system,
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  const ChatFormat qwen = detect_chat_format(kQwen2Template, chatml_vocab());
  EXPECT_EQ(qwen.default_system, "You are a helpful assistant.");

  const ChatFormat llama3 = detect_chat_format(kLlama3Template, llama3_vocab());
  EXPECT_EQ(llama3.family, ChatFamily::kLlama3);
  EXPECT_FALSE(llama3.knowledge_date_preamble);
  const ChatFormat llama31 = detect_chat_format(kLlama31Template, llama3_vocab());
  EXPECT_TRUE(llama31.knowledge_date_preamble);
  EXPECT_EQ(llama31.date, "26 Jul 2024");

  const ChatFormat llama2 = detect_chat_format(kLlama2Template, llama2_vocab());
  EXPECT_EQ(llama2.family, ChatFamily::kLlama2);
  EXPECT_TRUE(llama2.system_block);
  EXPECT_TRUE(llama2.bos_each_turn);
  EXPECT_TRUE(llama2.space_around_response);
  EXPECT_TRUE(llama2.strip_content);
  EXPECT_EQ(llama2.bos_text, "<s>");
  EXPECT_EQ(llama2.eos_text, "</s>");
  const ChatFormat mistral = detect_chat_format(kMistralTemplate, llama2_vocab());
  EXPECT_EQ(mistral.family, ChatFamily::kLlama2);
  EXPECT_FALSE(mistral.system_block);
  EXPECT_FALSE(mistral.bos_each_turn);
  EXPECT_FALSE(mistral.space_around_response);
  EXPECT_EQ(chat_family_name(mistral.family), "llama2");
}

TEST(Chat, RendersHandWrittenExpectations) {
  EXPECT_EQ(render_chat(detect_chat_format(kSmolLm2Template, chatml_vocab()), kOneTurn),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n");
  // A system message replaces the default one.
  EXPECT_EQ(render_chat(detect_chat_format(kSmolLm2Template, chatml_vocab()),
                        std::vector<ChatMessage>{{"system", "S"}, {"user", "U"}}, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n");
  EXPECT_EQ(render_chat(detect_chat_format(kLlama3Template, llama3_vocab()), kOneTurn),
            "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render_chat(detect_chat_format(kLlama31Template, llama3_vocab()), kOneTurn),
            "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December "
            "2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>"
            "\n\nHello!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render_chat(detect_chat_format(kLlama2Template, llama2_vocab()), kWithSystem),
            "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] How are "
            "you? [/INST]");
  EXPECT_EQ(render_chat(detect_chat_format(kMistralTemplate, llama2_vocab()), kAlternating),
            "[INST] a [/INST]b</s>[INST] c [/INST]");
}

TEST(Chat, FallsBackToChatMlOnlyWhenTheVocabularyHasIt) {
  for (const std::string_view tpl : {std::string_view(), std::string_view("{{ messages }}")}) {
    const ChatFormat format = detect_chat_format(tpl, chatml_vocab());
    EXPECT_EQ(format.family, ChatFamily::kChatMl);
    EXPECT_TRUE(format.default_system.empty());
    EXPECT_EQ(render_chat(format, kOneTurn),
              "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n");
    try {
      detect_chat_format(tpl, llama3_vocab());
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.where(), "chat");
      EXPECT_NE(std::string(e.what()).find("ChatML"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("<|im_start|>"), std::string::npos) << e.what();
    }
  }
  // The tokenizer's own template: the synthesizer writes one of its family.
  EXPECT_EQ(detect_chat_format(llama3_vocab()).family, ChatFamily::kLlama3);
  EXPECT_EQ(detect_chat_format(chatml_vocab()).family, ChatFamily::kChatMl);
}

TEST(Chat, InstFormatRejectsOtherRoles) {
  const ChatFormat format = detect_chat_format(kLlama2Template, llama2_vocab());
  EXPECT_THROW(render_chat(format, std::vector<ChatMessage>{{"user", "a"}, {"tool", "b"}}), Error);
}

TEST(Chat, PromptsEncodeToControlTokens) {
  const Tokenizer& tokenizer = llama3_vocab();
  const std::string prompt = render_chat(detect_chat_format(tokenizer), kOneTurn);
  const auto ids = tokenizer.encode(prompt);
  EXPECT_EQ(ids.front(), tokenizer.bos_id());  // added by the tokenizer, not the text
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tokenizer.bos_id()), 1);
  const int32_t header = *tokenizer.find_token("<|start_header_id|>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), header), 2);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *tokenizer.eot_id()), 1);
}

// ---------------------------------------------------------------------------------------
// Against jinja2

fs::path reference_script() {
  const fs::path root = fs::path(__FILE__).parent_path().parent_path().parent_path();
  const fs::path script = root / "tests/tools/tokenizer_reference.py";
  return fs::exists(script) ? script : fs::current_path() / "tests/tools/tokenizer_reference.py";
}

TEST(Chat, MatchesJinjaRendering) {
  if (!fs::exists(reference_script())) GTEST_SKIP() << "reference script not found";
  if (std::system("python3 -c 'import jinja2' > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 with jinja2 is not available";
  }
  struct Case {
    std::string_view tpl;
    const Tokenizer* vocab;
    const std::vector<ChatMessage>* messages;
    bool add_generation_prompt;
  };
  const std::vector<Case> cases = {
      {kSmolLm2Template, &chatml_vocab(), &kOneTurn, true},
      {kSmolLm2Template, &chatml_vocab(), &kWithSystem, true},
      {kSmolLm2Template, &chatml_vocab(), &kAlternating, false},
      {kQwen2Template, &chatml_vocab(), &kAlternating, true},
      {kLlama3Template, &llama3_vocab(), &kOneTurn, true},
      {kLlama3Template, &llama3_vocab(), &kWithSystem, true},
      {kLlama3Template, &llama3_vocab(), &kAlternating, false},
      {kLlama31Template, &llama3_vocab(), &kOneTurn, true},
      {kLlama31Template, &llama3_vocab(), &kWithSystem, true},
      {kLlama31Template, &llama3_vocab(), &kAlternating, false},
      {kLlama2Template, &llama2_vocab(), &kOneTurn, true},
      {kLlama2Template, &llama2_vocab(), &kWithSystem, true},
      {kLlama2Template, &llama2_vocab(), &kAlternating, true},
      {kMistralTemplate, &llama2_vocab(), &kOneTurn, true},
      {kMistralTemplate, &llama2_vocab(), &kAlternating, true},
  };
  Json input = Json::array();
  for (const Case& c : cases) {
    Json messages = Json::array();
    for (const ChatMessage& m : *c.messages)
      messages.push_back({{"role", m.role}, {"content", m.content}});
    const TokenizerData& data = c.vocab->data();
    input.push_back({{"template", std::string(c.tpl)},
                     {"messages", messages},
                     {"add_generation_prompt", c.add_generation_prompt},
                     {"bos_token", data.tokens[static_cast<size_t>(data.bos_id)]},
                     {"eos_token", data.tokens[static_cast<size_t>(data.eos_id)]}});
  }
  std::string dir_pattern = (fs::temp_directory_path() / "onepass_chat_XXXXXX").string();
  ASSERT_NE(mkdtemp(dir_pattern.data()), nullptr);
  const fs::path dir = dir_pattern;
  std::ofstream(dir / "cases.json") << input.dump();
  const std::string command = "python3 '" + reference_script().string() + "' chat '" +
                              (dir / "cases.json").string() + "' '" + (dir / "out.json").string() +
                              "' > '" + (dir / "log.txt").string() + "' 2>&1";
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << std::ifstream(dir / "log.txt").rdbuf();
  const Json rendered = Json::parse(std::ifstream(dir / "out.json"));
  fs::remove_all(dir);

  ASSERT_EQ(rendered.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    std::string expected = rendered[i].get<std::string>();
    // Our prompts leave the leading BOS to the tokenizer.
    const std::string& bos = c.vocab->data().tokens[static_cast<size_t>(c.vocab->bos_id())];
    if (c.tpl.find("bos_token") != std::string_view::npos && expected.rfind(bos, 0) == 0) {
      expected.erase(0, bos.size());
    }
    const ChatFormat format = detect_chat_format(c.tpl, *c.vocab);
    EXPECT_EQ(render_chat(format, *c.messages, c.add_generation_prompt), expected)
        << "case " << i << " (" << chat_family_name(format.family) << ")";
  }
  std::printf("[ chat     ] %zu prompts compared with jinja2\n", cases.size());
}

}  // namespace
}  // namespace onepass
