// Chat prompts: templates in the structure of each family's real one (ChatML, Qwen3,
// Llama-3/3.1, Llama-2/Mistral, Gemma, Phi-3) rendered by the Jinja interpreter, compared
// byte for byte with Python's jinja2, plus hand-written expectations and the real template of
// the default model.
#include <algorithm>
#include <filesystem>

#include <gtest/gtest.h>

#include "jinja_reference.h"
#include "onepass/core/error.h"
#include "onepass/model/architecture.h"
#include "onepass/model/chat.h"
#include "onepass/model/loader.h"
#include "onepass/model/tokenizer.h"

namespace onepass {
namespace {

namespace fs = std::filesystem;
using model::jinja::Json;

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

// The shape of Llama-3.1's template: the date from strftime_now, tools in the system turn,
// tool calls and ipython results.
constexpr std::string_view kLlama31Template = R"({{- bos_token }}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is defined and tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is defined and tools is not none %}
    {{- "You may call these functions:\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", "parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}<|eot_id|>" }}
    {%- else %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)";

constexpr std::string_view kLlama2Template =
    R"({% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %})";

constexpr std::string_view kMistralTemplate =
    R"({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %})";

// Qwen3's structure: tools in the system turn, a namespace found by a reverse loop (the last
// real user query), <think> blocks for the answers after it, tool calls and tool results.
constexpr std::string_view kQwen3Template = R"({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nFunctions you may call:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nAnswer a call as JSON inside <tool_call></tool_call>.<|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %})";

// Gemma's structure: the system text folded into the first user turn, "model" for the
// assistant, raise_exception when roles do not alternate, "-" trimming on every tag.
constexpr std::string_view kGemmaTemplate = R"({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
)";

// Phi-3's structure: one tag per role, EOS after the conversation without a generation prompt.
constexpr std::string_view kPhi3Template =
    R"({% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>
' + message['content'] + '<|end|>
'}}{% elif message['role'] == 'user' %}{{'<|user|>
' + message['content'] + '<|end|>
'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>
' + message['content'] + '<|end|>
'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>
' }}{% else %}{{ eos_token }}{% endif %})";

// A vocabulary with the ChatML tokens (the synthesizer's default specials).
const model::Tokenizer& chatml_vocab() {
  static const model::Tokenizer tokenizer(model::synthesize_bpe_vocab(300, "gpt2", 1));
  return tokenizer;
}

// Llama-3's specials, no <|im_start|>.
const model::Tokenizer& llama3_vocab() {
  static const model::Tokenizer tokenizer(model::synthesize_bpe_vocab(300, "llama-bpe", 1));
  return tokenizer;
}

const std::vector<model::ChatMessage> kOneTurn = {{"user", "Hello!"}};
const std::vector<model::ChatMessage> kWithSystem = {{"system", "You are terse."},
                                                     {"user", "Hi"},
                                                     {"assistant", "Hello."},
                                                     {"user", "  How are you?  "}};
const std::vector<model::ChatMessage> kAlternating = {
    {"user", "a"}, {"assistant", "b"}, {"user", "c"}};

model::ChatTemplateOptions options(bool add_generation_prompt = true) {
  model::ChatTemplateOptions o;
  o.add_generation_prompt = add_generation_prompt;
  o.bos_token = "<s>";
  o.eos_token = "</s>";
  return o;
}

TEST(Chat, RendersHandWrittenExpectations) {
  EXPECT_EQ(model::render_chat_template(kSmolLm2Template, kOneTurn, options()),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n");
  // A system message replaces the default one.
  EXPECT_EQ(model::render_chat_template(
                kSmolLm2Template, std::vector<model::ChatMessage>{{"system", "S"}, {"user", "U"}},
                options(false)),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n");
  EXPECT_EQ(model::render_chat_template(kLlama3Template, kOneTurn, options()),
            "<s><|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  model::ChatTemplateOptions dated = options();
  dated.extra_variables_json = R"({"date_string": "26 Jul 2024"})";
  EXPECT_EQ(model::render_chat_template(kLlama31Template, kOneTurn, dated),
            "<s><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December "
            "2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>"
            "\n\nHello!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(model::render_chat_template(kLlama2Template, kWithSystem, options()),
            "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] How "
            "are you? [/INST]");
  EXPECT_EQ(model::render_chat_template(kMistralTemplate, kAlternating, options()),
            "<s>[INST] a [/INST]b</s>[INST] c [/INST]");
  EXPECT_EQ(model::render_chat_template(kGemmaTemplate, kWithSystem, options()),
            "<s><start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
            "Hello.<end_of_turn>\n<start_of_turn>user\nHow are you?<end_of_turn>\n"
            "<start_of_turn>model\n");
  EXPECT_EQ(model::render_chat_template(kPhi3Template, kOneTurn, options(false)),
            "<|user|>\nHello!<|end|>\n</s>");
}

TEST(Chat, TemplatesRaiseOnRolesTheyReject) {
  const std::vector<model::ChatMessage> bad = {{"user", "a"}, {"user", "b"}};
  for (const std::string_view tpl : {kGemmaTemplate, kLlama2Template, kMistralTemplate}) {
    try {
      model::render_chat_template(tpl, bad, options());
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.where(), "chat_template");
      EXPECT_NE(std::string(e.what()).find("raise_exception: Conversation roles must alternate"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(Chat, ModelPromptsUseTheTokenizersTemplate) {
  // The synthesizer writes a template of each vocabulary's family.
  EXPECT_EQ(model::render_chat(chatml_vocab(), kOneTurn),
            "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n");
  // Llama-3 adds BOS itself: the template's leading bos_token is left to the tokenizer.
  const model::Tokenizer& tokenizer = llama3_vocab();
  const std::string prompt = model::render_chat(tokenizer, kOneTurn);
  EXPECT_EQ(prompt, "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n");
  const auto ids = tokenizer.encode(prompt);
  EXPECT_EQ(ids.front(), tokenizer.bos_id());
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tokenizer.bos_id()), 1);
  const int32_t header = *tokenizer.find_token("<|start_header_id|>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), header), 2);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *tokenizer.eot_id()), 1);
}

TEST(Chat, FallsBackToChatMlOnlyWithoutATemplate) {
  model::TokenizerData chatml = model::synthesize_bpe_vocab(300, "gpt2", 1);
  chatml.chat_template.clear();
  EXPECT_EQ(model::render_chat(model::Tokenizer(chatml), kOneTurn),
            "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n");
  model::TokenizerData llama = model::synthesize_bpe_vocab(300, "llama-bpe", 1);
  llama.chat_template.clear();
  try {
    model::render_chat(model::Tokenizer(llama), kOneTurn);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "chat");
    EXPECT_NE(std::string(e.what()).find("<|im_start|>"), std::string::npos) << e.what();
  }
  // A template the interpreter cannot read is an error, never a silent ChatML.
  chatml.chat_template = "{% for m in messages %}{{ m.content | wordwrap }}{% endfor %}";
  EXPECT_THROW(model::render_chat(model::Tokenizer(chatml), kOneTurn), Error);
}

// ---------------------------------------------------------------------------------------
// Against jinja2

Json messages_json(const std::vector<model::ChatMessage>& messages) {
  Json list = Json::array();
  for (const model::ChatMessage& m : messages)
    list.push_back({{"role", m.role}, {"content", m.content}});
  return list;
}

Json chat_variables(Json messages, bool add_generation_prompt, Json extra = Json::object()) {
  extra["messages"] = std::move(messages);
  extra["add_generation_prompt"] = add_generation_prompt;
  extra["bos_token"] = "<s>";
  extra["eos_token"] = "</s>";
  return extra;
}

// A tool-calling conversation with reasoning, for the templates that handle tools.
Json tool_conversation() {
  return Json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "<think>\nNeed the tool.\n</think>\n\nLet me check.",
     "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                     "arguments": {"city": "Paris", "unit": "C"}}}]},
    {"role": "tool", "content": "{\"temp\": 21}"},
    {"role": "tool", "content": "sunny"},
    {"role": "assistant", "content": "21 C and sunny.", "reasoning_content": "Read the tool."}
  ])");
}

Json tools() {
  return Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Current weather \u00e0 la carte", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
}

TEST(Chat, FamiliesAgreeWithJinja2) {
  struct Family {
    const char* name;
    std::string_view tpl;
  };
  const Family families[] = {
      {"smollm2", kSmolLm2Template}, {"qwen2", kQwen2Template},   {"qwen3", kQwen3Template},
      {"llama3", kLlama3Template},   {"llama3.1", kLlama31Template}, {"llama2", kLlama2Template},
      {"mistral", kMistralTemplate}, {"gemma", kGemmaTemplate},   {"phi3", kPhi3Template},
      {"gemma3 default", model::find_architecture("gemma3")->default_chat_template}};
  std::vector<testing::JinjaCase> cases;
  std::vector<std::string> names;
  for (const Family& family : families) {
    for (const auto* conversation : {&kOneTurn, &kWithSystem, &kAlternating}) {
      for (const bool generation : {true, false}) {
        cases.push_back({std::string(family.tpl), chat_variables(messages_json(*conversation), generation)});
        names.push_back(family.name);
      }
    }
  }
  // Tools, tool calls, reasoning, enable_thinking, a raised error.
  cases.push_back({std::string(kQwen3Template), chat_variables(tool_conversation(), true, {{"tools", tools()}})});
  cases.push_back({std::string(kQwen3Template), chat_variables(tool_conversation(), false)});
  cases.push_back({std::string(kQwen3Template), chat_variables(messages_json(kAlternating), true, {{"enable_thinking", false}})});
  Json llama_tools = tool_conversation();
  llama_tools.erase(4);
  cases.push_back({std::string(kLlama31Template), chat_variables(llama_tools, true, {{"tools", tools()}})});
  cases.push_back({std::string(kLlama31Template), chat_variables(messages_json(kWithSystem), true, {{"date_string", "01 Jan 2025"}})});
  cases.push_back({std::string(kGemmaTemplate), chat_variables(messages_json({{"user", "a"}, {"user", "b"}}), true)});
  names.insert(names.end(), {"qwen3 tools", "qwen3 tool calls", "qwen3 no thinking", "llama3.1 tools",
                             "llama3.1 date", "gemma bad roles"});

  std::string reason;
  const auto reference = testing::render_with_jinja2(cases, reason);
  if (!reference) GTEST_SKIP() << reason;
  ASSERT_EQ(reference->size(), cases.size()) << reason;
  size_t rendered = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const testing::JinjaReference& expected = (*reference)[i];
    std::string ours;
    std::string error;
    try {
      ours = model::jinja::Template(cases[i].source).render(cases[i].variables);
    } catch (const Error& e) {
      error = e.what();
    }
    if (expected.text) {
      EXPECT_EQ(error, "") << names[i] << " case " << i;
      EXPECT_EQ(ours, *expected.text) << names[i] << " case " << i;
      ++rendered;
    } else {
      // jinja2 raised (the templates' raise_exception): so must we, with the same message.
      const std::string message = expected.error.substr(expected.error.find(": ") + 2);
      EXPECT_NE(error.find(message), std::string::npos) << names[i] << ": " << error << " vs " << expected.error;
    }
  }
  EXPECT_GT(rendered, cases.size() / 2);
  std::printf("[ chat     ] %zu renderings compared with jinja2 (%zu rendered, %zu raised)\n",
              cases.size(), rendered, cases.size() - rendered);
}

// The template a Gemma file without one gets renders Gemma's turn format as Gemma's own
// template does.
TEST(Chat, GemmaDefaultTemplateRendersAsGemmasOwn) {
  const std::string_view ours = model::find_architecture("gemma3")->default_chat_template;
  ASSERT_FALSE(ours.empty());
  for (const auto* conversation : {&kOneTurn, &kWithSystem, &kAlternating}) {
    for (const bool generation : {true, false}) {
      model::ChatTemplateOptions o = options();
      o.add_generation_prompt = generation;
      EXPECT_EQ(model::render_chat_template(ours, *conversation, o),
                render_chat_template(kGemmaTemplate, *conversation, o));
    }
  }
}

TEST(Chat, DefaultModelTemplateAgreesWithJinja2) {
  const char* kDefaultModel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(kDefaultModel)) GTEST_SKIP() << kDefaultModel << " not installed (scripts/setup)";
  const auto source = model::open_model(kDefaultModel);
  const std::optional<model::TokenizerData> data = source->tokenizer_data();
  ASSERT_TRUE(data.has_value());
  ASSERT_FALSE(data->chat_template.empty());
  const model::Tokenizer tokenizer(*data);
  std::vector<testing::JinjaCase> cases;
  for (const auto* conversation : {&kOneTurn, &kWithSystem, &kAlternating}) {
    Json variables = chat_variables(messages_json(*conversation), true);
    variables["bos_token"] = tokenizer.data().tokens[static_cast<size_t>(tokenizer.bos_id())];
    variables["eos_token"] = tokenizer.data().tokens[static_cast<size_t>(tokenizer.eos_id())];
    cases.push_back({data->chat_template, variables});
  }
  std::string reason;
  const auto reference = testing::render_with_jinja2(cases, reason);
  if (!reference) GTEST_SKIP() << reason;
  ASSERT_EQ(reference->size(), cases.size()) << reason;
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE((*reference)[i].text.has_value()) << (*reference)[i].error;
    EXPECT_EQ(model::jinja::Template(cases[i].source).render(cases[i].variables),
              *(*reference)[i].text);
  }
  // The CLI's prompt for the default model is the template's own rendering.
  EXPECT_EQ(model::render_chat(tokenizer, kOneTurn), *(*reference)[0].text);
}

}  // namespace
}  // namespace onepass
