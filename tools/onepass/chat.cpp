// onepass chat: a conversation with the model through its chat template, one user message
// per line of standard input (a terminal or a pipe), the history kept between turns.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
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

struct ChatArgs {
  std::string model;
  std::string system;
  int64_t tokens = 512;
  std::string backend = "auto";
  SamplingArgs sampling;
  std::vector<std::string> stops;
  int64_t context = 0;
  int64_t threads = 0;
  int64_t batch = model::LoadOptions{}.max_batch;
  bool verbose = false;
};

// Whether `prefix` begins `tokens`.
bool starts_with(const std::vector<int32_t>& tokens, const std::vector<int32_t>& prefix) {
  return prefix.size() <= tokens.size() && std::equal(prefix.begin(), prefix.end(), tokens.begin());
}

int run_chat(const ChatArgs& args) {
  const char* where = "chat";
  constexpr int64_t kMaxTokens = INT32_MAX / 2;
  check(args.tokens >= 1 && args.tokens <= kMaxTokens, where, "-n/--tokens: value out of range (",
        args.tokens, "; expected 1..", kMaxTokens, ")");
  check(args.context >= 0 && args.context <= kMaxTokens, where, "-c/--ctx: value out of range (",
        args.context, "; expected 1..", kMaxTokens, ", or 0 for the model's training context)");
  check(args.batch >= 1, where, "--batch must be at least 1, got ", args.batch);
  for (const std::string& stop : args.stops)
    check(!stop.empty(), where, "--stop: the stop string is empty");
  const model::SamplerOptions sampling = sampler_options(args.sampling, where);
  const Options backend_opts = backend_options(args.threads, where);
  const BackendChoice choice = parse_backend_choice(args.backend);
  const std::filesystem::path path = resolve_model(args.model, where);

  const std::unique_ptr<model::ModelSource> source = model::open_model(path);
  std::optional<model::TokenizerData> vocab = source->tokenizer_data();
  check(vocab.has_value(), where, source->describe(),
        " has no vocabulary (tokenizer.ggml.*); chat needs one");
  const model::Tokenizer tokenizer(std::move(*vocab));  // one copy of the vocabulary, not two
  model::chat_template_of(tokenizer);  // no template: fail before loading the weights
  // The training context, at most 4096 tokens unless -c says otherwise.
  const int64_t context =
      args.context > 0 ? args.context : std::min<int64_t>(source->config().train_context, 4096);
  if (context > source->config().train_context) {
    std::fprintf(stderr,
                 "[chat] warning: the context of %lld tokens (-c) is past the model's training "
                 "context of %lld; answers past it may degrade\n",
                 static_cast<long long>(context),
                 static_cast<long long>(source->config().train_context));
  }
  check(args.tokens < context, where, "-n/--tokens ", args.tokens,
        " leaves no room for a message in the context of ", context, " tokens (-c/--ctx)");

  const std::shared_ptr<Backend> backend = make_backend(choice, backend_opts);
  ProgressLine progress;
  model::LoadOptions load;
  load.context = context;
  load.max_batch = args.batch;
  load.progress = [&](double fraction, const std::string& name) {
    progress.show(format("loading %3d%% %s", static_cast<int>(fraction * 100.0), name.c_str()));
  };
  model::LlamaModel llama(backend, *source, load);
  progress.clear();
  if (args.verbose) {
    std::fprintf(stderr, "model: %s (%s)\ndevice: %s\ncontext %lld tokens; %s\n",
                 source->describe().c_str(), source->config().describe().c_str(),
                 describe_device(*backend).c_str(), static_cast<long long>(context),
                 describe_sampling(sampling).c_str());
  }

  const bool interactive = isatty(STDIN_FILENO) != 0;
  if (interactive) {
    std::fprintf(stderr,
                 "Type a message and press Enter; /reset clears the history, Ctrl-D quits.\n");
  }
  std::vector<model::ChatMessage> messages;
  if (!args.system.empty()) messages.push_back({"system", args.system});
  const size_t first_turn = messages.size();
  model::Sampler sampler(sampling);
  std::vector<int32_t> cached;  // the tokens in the model's cache, in order
  int status = 0;
  std::string line;
  while (true) {
    if (interactive) {
      std::fputs("> ", stderr);
      std::fflush(stderr);
    }
    if (!std::getline(std::cin, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (line == "/reset") {
      messages.resize(first_turn);
      cached.clear();
      llama.reset();
      sampler.forget();
      std::fprintf(stderr, "[chat] history cleared\n");
      continue;
    }
    messages.push_back({"user", line});
    std::vector<int32_t> prompt = tokenizer.encode(model::render_chat(tokenizer, messages));
    // The oldest turns leave when the conversation outgrows the context.
    bool trimmed = false;
    while (static_cast<int64_t>(prompt.size()) + args.tokens > context &&
           messages.size() > first_turn + 1) {
      const size_t drop = messages.size() - first_turn >= 3 ? 2 : 1;  // a user + assistant pair
      messages.erase(messages.begin() + static_cast<long>(first_turn),
                     messages.begin() + static_cast<long>(first_turn + drop));
      prompt = tokenizer.encode(render_chat(tokenizer, messages));
      trimmed = true;
    }
    if (static_cast<int64_t>(prompt.size()) + args.tokens > context) {
      std::fprintf(stderr,
                   "[chat] the message needs %zu tokens and -n %lld more, past the context of "
                   "%lld tokens (-c/--ctx); it was not sent\n",
                   prompt.size(), static_cast<long long>(args.tokens),
                   static_cast<long long>(context));
      messages.pop_back();
      status = 1;
      continue;
    }
    if (trimmed) std::fprintf(stderr, "[chat] the oldest turns were dropped to fit the context\n");
    // The cache holds the conversation so far when the new prompt extends it: only the new
    // tokens are prefilled. Otherwise (trimmed history, or an answer that re-encodes
    // differently) the whole prompt is.
    std::span<const int32_t> fresh = prompt;
    if (starts_with(prompt, cached) && llama.position() == static_cast<int64_t>(cached.size()) &&
        cached.size() < prompt.size()) {
      fresh = std::span<const int32_t>(prompt).subspan(cached.size());
    } else {
      llama.reset();
      cached.clear();
    }
    sampler.remember(fresh);
    const std::span<const float> logits = llama.prefill(fresh);
    cached = prompt;
    const StreamResult result = stream_completion(
        llama, sampler, tokenizer, logits,
        {.max_tokens = args.tokens, .stops = args.stops, .strip_space_prefix = true},
        [](std::string_view piece) {
          std::fwrite(piece.data(), 1, piece.size(), stdout);
          std::fflush(stdout);
        },
        &cached);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (result.context_full) {
      std::fprintf(stderr,
                   "[chat] the answer was cut: the context of %lld tokens is full (-c/--ctx)\n",
                   static_cast<long long>(context));
    }
    messages.push_back({"assistant", result.text});
  }
  if (interactive) std::fputc('\n', stderr);  // end the "> " line Ctrl-D left
  return status;
}

}  // namespace

Command add_chat_command(CLI::App& parent) {
  auto args = std::make_shared<ChatArgs>();
  CLI::App* app = parent.add_subcommand(
      "chat", "Multi-turn chat through the model's chat template, one message per input line");
  app->footer(
      "Reads one user message per line of standard input (a terminal or a pipe) and streams each\n"
      "answer to stdout, followed by a newline. The history is kept: each turn sees the earlier\n"
      "ones, and only the new tokens are prefilled. /reset clears the history; Ctrl-D (end of\n"
      "input) quits. When the conversation outgrows the context, the oldest turns are dropped.");
  app->add_option("-m,--model", args->model,
                  "GGUF file or MLX directory (default: the SmolLM2-135M-Instruct Q4_1 model)");
  app->add_option("--system", args->system, "System message");
  app->add_option("-n,--tokens,--n-predict", args->tokens, "Tokens per answer at most")
      ->capture_default_str();
  app->add_option("--backend", args->backend, "auto, cpu or cuda")->capture_default_str();
  add_sampling_options(*app, args->sampling);
  app->add_option("--stop", args->stops, "End an answer before this text (repeat for several)")
      ->allow_extra_args(false);
  app->add_option("-c,--ctx,--ctx-size", args->context,
                  "KV-cache capacity in tokens (default 0: the training context, at most 4096)")
      ->capture_default_str();
  add_threads_option(*app, args->threads);
  app->add_option("--batch", args->batch, "Prompt tokens per prefill chunk")->capture_default_str();
  app->add_flag("-v,--verbose", args->verbose, "Describe the model, device and sampling on stderr");
  return {app, [args] { return run_chat(*args); }};
}

}  // namespace onepass::cli
