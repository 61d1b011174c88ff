// A chat answer streamed to stdout, using onepass as an installed library:
//   generate [-m MODEL.gguf] [-p PROMPT] [-n TOKENS] [--temp T] [--backend auto|cpu|cuda]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "onepass/backends/factory.h"
#include "onepass/model/chat.h"
#include "onepass/model/llama.h"
#include "onepass/model/loader.h"
#include "onepass/model/sampler.h"
#include "onepass/model/tokenizer.h"
#include "onepass/version.h"

namespace {

constexpr const char* kUsage =
    "usage: generate [-m MODEL.gguf] [-p PROMPT] [-n TOKENS] [--temp T] [--backend auto|cpu|cuda]\n"
    "Answers PROMPT as the model's chat template asks, streaming the tokens to stdout.\n"
    "Defaults: models/SmolLM2-135M-Instruct.Q4_1.gguf, 64 tokens, greedy (--temp 0).\n";

struct Args {
  std::string model = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  std::string prompt = "What is the capital of France?";
  int tokens = 64;
  float temperature = 0.0f;
  std::string backend = "auto";
};

int run(const Args& args) {
  const auto source = onepass::model::open_model(args.model);
  const auto vocabulary = source->tokenizer_data();
  if (!vocabulary) {
    std::fprintf(stderr, "generate: %s has no vocabulary\n", args.model.c_str());
    return 1;
  }
  const onepass::model::Tokenizer tokenizer(*vocabulary);

  // The model's own chat template (tokenizer.chat_template) around one user message.
  const std::vector<onepass::model::ChatMessage> messages = {{"user", args.prompt}};
  const std::string text = onepass::model::render_chat(tokenizer, messages);
  const std::vector<int32_t> prompt = tokenizer.encode(text);

  onepass::model::LoadOptions load;
  load.context = static_cast<int64_t>(prompt.size()) + args.tokens;
  onepass::model::LlamaModel llama(
      onepass::make_backend(onepass::parse_backend_choice(args.backend)), *source, load);
  onepass::model::Sampler sampler({.temperature = args.temperature, .top_k = 40, .top_p = 0.95f});
  onepass::model::Detokenizer detokenizer(tokenizer);

  // Prefill the prompt, then decode one token at a time, printing each piece as it comes.
  int32_t next = sampler.sample(llama.prefill(prompt));
  for (int i = 0; i < args.tokens && !tokenizer.is_end_of_generation(next); ++i) {
    const std::string piece = detokenizer.push(next);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    if (i + 1 < args.tokens) next = sampler.sample(llama.decode(next));
  }
  std::printf("%s\n", detokenizer.flush().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      std::printf("%sonepass %.*s (backends: %.*s)\n", kUsage,
                  static_cast<int>(onepass::kVersion.size()), onepass::kVersion.data(),
                  static_cast<int>(onepass::kBackends.size()), onepass::kBackends.data());
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "generate: %s needs a value\n%s", argv[i], kUsage);
      return 1;
    }
    const char* value = argv[++i];
    if (flag == "-m")
      args.model = value;
    else if (flag == "-p")
      args.prompt = value;
    else if (flag == "-n")
      args.tokens = std::max(std::atoi(value), 1);
    else if (flag == "--temp")
      args.temperature = std::strtof(value, nullptr);
    else if (flag == "--backend")
      args.backend = value;
    else {
      std::fprintf(stderr, "generate: unknown option %s\n%s", argv[i - 1], kUsage);
      return 1;
    }
  }
  try {
    return run(args);
  } catch (const std::exception& e) {  // onepass::Error: "[where] what"
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
