// onepass generate: stream a completion (or a chat answer) of a prompt.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "onepass/backends/factory.h"
#include "onepass/core/error.h"
#include "onepass/model/chat.h"
#include "onepass/model/llama.h"
#include "onepass/model/loader.h"
#include "onepass/model/sampler.h"
#include "onepass/model/tokenizer.h"
#include "stream.h"

namespace onepass::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::string prompt = "Once upon a time";
  std::string file;
  std::string system;
  int64_t tokens = 128;
  bool chat = false;
  bool echo = false;
  bool verbose = false;
  std::string backend = "auto";
  SamplingArgs sampling;
  std::vector<std::string> stops;
  int64_t context = 0;
  int64_t threads = 0;
  int64_t batch = model::LoadOptions{}.max_batch;
  CLI::Option* prompt_option = nullptr;
};

// Standard input ("-") or a file, whole; one trailing newline is dropped (a file or `echo`
// ends its last line with one, which is no part of the prompt).
std::string read_prompt(const std::string& file, std::string_view where, std::string_view option) {
  std::string text;
  if (file == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    std::error_code ec;
    check(!std::filesystem::is_directory(file, ec), where, option, ": '", file,
          "' is a directory, expected a text file");
    std::ifstream in(file, std::ios::binary);
    check(static_cast<bool>(in), where, option, ": cannot read '", file, "': ", std::strerror(errno));
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (!text.empty() && text.back() == '\r') text.pop_back();
  return text;
}

int run_generate(const GenerateArgs& args) {
  const char* where = "generate";
  // Positions are 32-bit on the device; the bounds also keep prompt + tokens from overflowing.
  constexpr int64_t kMaxTokens = INT32_MAX / 2;
  check(args.tokens >= 0 && args.tokens <= kMaxTokens, where, "-n/--tokens: value out of range (",
        args.tokens, "; expected 0..", kMaxTokens, ")");
  check(args.context >= 0 && args.context <= kMaxTokens, where,
        "-c/--ctx: value out of range (", args.context, "; expected 1..", kMaxTokens,
        ", or 0 for prompt + tokens)");
  check(args.batch >= 1, where, "--batch must be at least 1, got ", args.batch);
  for (const std::string& stop : args.stops) check(!stop.empty(), where, "--stop: the stop string is empty");
  const model::SamplerOptions sampling = sampler_options(args.sampling, where);
  const Options backend_opts = backend_options(args.threads, where);
  // Parse the backend name before the (slow) model load, so a typo fails at once.
  const BackendChoice choice = parse_backend_choice(args.backend);
  const std::filesystem::path path = resolve_model(args.model, where);

  std::string user_text = args.prompt;
  if (!args.file.empty()) {
    user_text = read_prompt(args.file, where, "-f/--file");
  } else if (args.prompt == "-" && args.prompt_option->count() > 0) {
    user_text = read_prompt("-", where, "-p");
  }

  const std::unique_ptr<model::ModelSource> source = model::open_model(path);
  std::optional<model::TokenizerData> vocab = source->tokenizer_data();
  check(vocab.has_value(), where, source->describe(),
        " has no vocabulary (tokenizer.ggml.*); generate needs one");
  const model::Tokenizer tokenizer(std::move(*vocab));  // one copy of the vocabulary, not two

  std::string text = user_text;
  if (args.chat) {
    std::vector<model::ChatMessage> messages;
    if (!args.system.empty()) messages.push_back({"system", args.system});
    messages.push_back({"user", user_text});
    text = model::render_chat(tokenizer, messages);
  }
  const std::vector<int32_t> prompt = tokenizer.encode(text);
  check(!prompt.empty(), where,
        "the prompt is empty and the vocabulary adds no BOS token; pass -p TEXT");
  const auto prompt_tokens = static_cast<int64_t>(prompt.size());
  // Enough for the prompt and every requested token unless --ctx says otherwise.
  const int64_t context =
      args.context > 0 ? args.context : prompt_tokens + std::max<int64_t>(args.tokens, 1);
  check(prompt_tokens <= context, where, "the prompt has ", prompt_tokens,
        " tokens, more than the context of ", context, " (-c/--ctx)");
  const int64_t train_context = source->config().train_context;
  if (prompt_tokens + args.tokens > train_context) {
    std::fprintf(stderr,
                 "[generate] warning: the prompt (%lld tokens) and -n %lld reach %lld tokens, past "
                 "the model's training context of %lld; text past it may degrade\n",
                 static_cast<long long>(prompt_tokens), static_cast<long long>(args.tokens),
                 static_cast<long long>(prompt_tokens + args.tokens),
                 static_cast<long long>(train_context));
  }

  const std::shared_ptr<Backend> backend = make_backend(choice, backend_opts);
  ProgressLine progress;
  const double load_start = now_seconds();
  model::LoadOptions load;
  load.context = context;
  // The prompt is the only prefill: activations for more rows would never be used.
  load.max_batch = std::min<int64_t>(args.batch, prompt_tokens);
  load.progress = [&](double fraction, const std::string& name) {
    progress.show(format("loading %3d%% %s", static_cast<int>(fraction * 100.0), name.c_str()));
  };
  model::LlamaModel llama(backend, *source, load);
  progress.clear();
  if (args.verbose) {
    std::fprintf(stderr, "model: %s (%s)\ndevice: %s\nloaded in %.2f s; context %lld tokens; %s\n",
                 source->describe().c_str(), source->config().describe().c_str(),
                 describe_device(*backend).c_str(), now_seconds() - load_start,
                 static_cast<long long>(context), describe_sampling(sampling).c_str());
  }
  if (args.echo) {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  }

  model::Sampler sampler(sampling);
  sampler.remember(prompt);
  const double prefill_start = now_seconds();
  const std::span<const float> logits = llama.prefill(prompt);
  llama.release_prefill_graphs();  // the prompt was the only one
  const double prefill_seconds = now_seconds() - prefill_start;

  // Continuing the prompt: keep the space before the first generated word.
  const StreamResult result = stream_completion(
      llama, sampler, tokenizer, logits,
      {.max_tokens = args.tokens, .stops = args.stops, .strip_space_prefix = false},
      [](std::string_view piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      });
  std::fputc('\n', stdout);
  std::fflush(stdout);

  if (result.context_full) {
    std::fprintf(
        stderr,
        "[generate] stopped after %lld tokens: the context of %lld tokens is full (-c/--ctx)\n",
        static_cast<long long>(result.generated), static_cast<long long>(context));
  }
  const std::string generation_rate =
      result.decode_steps > 0
          ? format("%.1f tok/s", static_cast<double>(result.decode_steps) / result.decode_seconds)
          : "- tok/s";
  std::fprintf(stderr, "prompt: %lld tokens, %.0f tok/s; generation: %lld tokens, %s\n",
               static_cast<long long>(prompt_tokens),
               static_cast<double>(prompt_tokens) / prefill_seconds,
               static_cast<long long>(result.generated), generation_rate.c_str());
  return 0;
}

}  // namespace

Command add_generate_command(CLI::App& parent) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* app =
      parent.add_subcommand("generate", "Generate text from a prompt, streamed to stdout");
  app->footer(
      cat("Sampling: the default temperature 0 (or --top-k 1) is greedy and takes the argmax on "
          "the device\n"
          "(on the host with --repeat-penalty); a temperature above 0 samples with top-k 40 and "
          "top-p 0.95\n"
          "unless given, from a random seed unless -s/--seed is given. Generation ends before a "
          "--stop string\n"
          "is printed. Without -m the default model ",
          kDefaultModel,
          " is used (installed by scripts/setup).\nThe generation speed counts decode steps "
          "(the first token comes from the prompt pass)."));
  app->add_option("-m,--model", args->model,
                  "GGUF file or MLX directory (default: the SmolLM2-135M-Instruct Q4_1 model)");
  args->prompt_option =
      app->add_option("-p,--prompt", args->prompt, "Prompt text; - reads standard input")
          ->capture_default_str();
  app->add_option("-f,--file", args->file, "Read the prompt from a file; - reads standard input")
      ->excludes(args->prompt_option);
  app->add_option("-n,--tokens,--n-predict", args->tokens, "Tokens to generate at most")
      ->capture_default_str();
  app->add_flag("--chat", args->chat,
                "Wrap the prompt in the model's chat template as a user message");
  app->add_option("--system", args->system, "System message for --chat");
  app->add_option("--backend", args->backend, "auto, cpu or cuda")->capture_default_str();
  add_sampling_options(*app, args->sampling);
  app->add_option("--stop", args->stops,
                  "Stop before this text is printed (repeat for several)")
      ->allow_extra_args(false);
  app->add_option("-c,--ctx,--ctx-size", args->context,
                  "KV-cache capacity in tokens (default 0: prompt + tokens)")
      ->capture_default_str();
  add_threads_option(*app, args->threads);
  app->add_option("--batch", args->batch, "Prompt tokens per prefill chunk (one recorded graph each)")
      ->capture_default_str();
  app->add_flag("--echo", args->echo, "Print the prompt (as given to the model) before the answer");
  app->add_flag("-v,--verbose", args->verbose, "Describe the model, device and sampling on stderr");
  return {app, [args] { return run_generate(*args); }};
}

}  // namespace onepass::cli
