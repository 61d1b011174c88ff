// onepass generate: stream a completion (or a chat answer) of a prompt.
#include <algorithm>
#include <cstdio>
#include <deque>
#include <memory>
#include <random>
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

namespace onepass::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::string prompt = "Once upon a time";
  std::string system;
  int64_t tokens = 128;
  bool chat = false;
  bool echo = false;
  bool verbose = false;
  std::string backend = "auto";
  float temperature = 0.0f;  // greedy: deterministic, and what small models answer best with
  int32_t top_k = 40;
  float top_p = 0.95f;
  uint64_t seed = 0;
  bool seed_given = false;
  int64_t context = 0;
  int64_t batch = model::LoadOptions{}.max_batch;
};

int run_generate(const GenerateArgs& args) {
  const char* where = "generate";
  // Positions are 32-bit on the device; the bounds also keep prompt + tokens from overflowing.
  constexpr int64_t kMaxTokens = INT32_MAX / 2;
  check(args.tokens >= 0 && args.tokens <= kMaxTokens, where, "-n/--tokens: value out of range (",
        args.tokens, "; expected 0..", kMaxTokens, ")");
  check(args.context >= 0 && args.context <= kMaxTokens, where,
        "--ctx: value out of range (", args.context, "; expected 1..", kMaxTokens,
        ", or 0 for prompt + tokens)");
  model::SamplerOptions sampling{.temperature = args.temperature,
                                 .top_k = args.top_k,
                                 .top_p = args.top_p,
                                 .seed = args.seed_given ? args.seed : std::random_device{}()};
  sampling.validate();
  // Parse the backend name before the (slow) model load, so a typo fails at once.
  const BackendChoice choice = parse_backend_choice(args.backend);
  const std::filesystem::path path = resolve_model(args.model, where);

  const std::unique_ptr<model::ModelSource> source = model::open_model(path);
  const std::optional<TokenizerData> vocab = source->tokenizer_data();
  check(vocab.has_value(), where, source->describe(),
        " has no vocabulary (tokenizer.ggml.*); generate needs one");
  const Tokenizer tokenizer(*vocab);

  std::string text = args.prompt;
  if (args.chat) {
    std::vector<ChatMessage> messages;
    if (!args.system.empty()) messages.push_back({"system", args.system});
    messages.push_back({"user", args.prompt});
    text = render_chat(tokenizer, messages);
  }
  const std::vector<int32_t> prompt = tokenizer.encode(text);
  check(!prompt.empty(), where,
        "the prompt is empty and the vocabulary adds no BOS token; pass -p TEXT");
  const auto prompt_tokens = static_cast<int64_t>(prompt.size());
  // Enough for the prompt and every requested token unless --ctx says otherwise.
  const int64_t context =
      args.context > 0 ? args.context : prompt_tokens + std::max<int64_t>(args.tokens, 1);
  check(prompt_tokens <= context, where, "the prompt has ", prompt_tokens,
        " tokens, more than the context of ", context, " (--ctx)");

  const std::shared_ptr<Backend> backend = make_backend(choice);
  ProgressLine progress;
  const double load_start = now_seconds();
  model::LoadOptions load;
  check(args.batch >= 1, where, "--batch must be at least 1, got ", args.batch);
  load.context = context;
  load.max_batch = args.batch;
  load.progress = [&](double fraction, const std::string& name) {
    progress.show(format("loading %3d%% %s", static_cast<int>(fraction * 100.0), name.c_str()));
  };
  model::LlamaModel llama(backend, *source, load);
  progress.clear();
  if (args.verbose) {
    std::fprintf(stderr, "model: %s (%s)\ndevice: %s\nloaded in %.2f s; context %lld tokens; %s\n",
                 source->describe().c_str(), source->config().describe().c_str(),
                 describe_device(*backend).c_str(), now_seconds() - load_start,
                 static_cast<long long>(context),
                 sampling.greedy() ? "greedy"
                                   : format("temperature %.2f, top-k %d, top-p %.2f, seed %llu",
                                            sampling.temperature, sampling.top_k, sampling.top_p,
                                            static_cast<unsigned long long>(sampling.seed))
                                         .c_str());
  }
  if (args.echo) {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  }

  model::Sampler sampler(sampling);
  const bool greedy = sampling.greedy();
  // Continuing the prompt: keep the space before the first generated word.
  Detokenizer detokenizer(tokenizer, {.render_special = false, .strip_space_prefix = false});

  const double prefill_start = now_seconds();
  const std::span<const float> logits = llama.prefill(prompt);
  int32_t next = greedy ? model::argmax(logits) : sampler.sample(logits);
  const double prefill_seconds = now_seconds() - prefill_start;

  const double decode_start = now_seconds();
  int64_t generated = 0;
  int64_t decode_steps = 0;
  bool context_full = false;
  constexpr int64_t kGreedyRun = 16;
  std::deque<int32_t> pending;  // greedy tokens computed ahead of printing
  while (generated < args.tokens && !tokenizer.is_end_of_generation(next)) {
    const std::string piece = detokenizer.push(next);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    ++generated;
    if (generated == args.tokens) break;
    // A greedy run has advanced the position past the tokens still pending: those were
    // computed inside the context and are printed before the context counts as full.
    if (pending.empty() && llama.position() >= llama.context()) {
      context_full = true;
      break;
    }
    if (greedy) {
      // Greedy decoding takes the argmax on the device (no logits download) and runs up to
      // kGreedyRun steps back to back, each fed by the previous one on the device; tokens
      // past an end of generation are computed but never printed.
      if (pending.empty()) {
        const int64_t run = std::min({kGreedyRun, args.tokens - generated, llama.context() - llama.position()});
        const std::vector<int32_t> tokens = llama.decode_greedy_run(next, run);
        pending.assign(tokens.begin(), tokens.end());
      }
      next = pending.front();
      pending.pop_front();
    } else {
      next = sampler.sample(llama.decode(next));
    }
    ++decode_steps;
  }
  const double decode_seconds = now_seconds() - decode_start;
  const std::string rest = detokenizer.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);

  if (context_full) {
    std::fprintf(
        stderr,
        "[generate] stopped after %lld tokens: the context of %lld tokens is full (--ctx)\n",
        static_cast<long long>(generated), static_cast<long long>(context));
  }
  const std::string generation_rate =
      decode_steps > 0 ? format("%.1f tok/s", static_cast<double>(decode_steps) / decode_seconds)
                       : "- tok/s";
  std::fprintf(stderr, "prompt: %lld tokens, %.0f tok/s; generation: %lld tokens, %s\n",
               static_cast<long long>(prompt_tokens),
               static_cast<double>(prompt_tokens) / prefill_seconds,
               static_cast<long long>(generated), generation_rate.c_str());
  return 0;
}

}  // namespace

Command add_generate_command(CLI::App& parent) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* app =
      parent.add_subcommand("generate", "Generate text from a prompt, streamed to stdout");
  app->footer(
      cat("Sampling: the default temperature 0 (or --top-k 1) is greedy and takes the argmax on "
          "the device;\n"
          "a temperature above 0 samples with top-k 40 and top-p 0.95 unless given, from a random "
          "seed unless\n"
          "--seed is given. Without -m the default model ",
          kDefaultModel,
          " is used (installed by scripts/setup).\nThe generation speed counts decode steps "
          "(the first token comes from the prompt pass)."));
  app->add_option("-m,--model", args->model,
                  "GGUF file or MLX directory (default: the SmolLM2-135M-Instruct Q4_1 model)");
  app->add_option("-p,--prompt", args->prompt, "Prompt text")->capture_default_str();
  app->add_option("-n,--tokens", args->tokens, "Tokens to generate at most")->capture_default_str();
  app->add_flag("--chat", args->chat,
                "Wrap the prompt in the model's chat template as a user message");
  app->add_option("--system", args->system, "System message for --chat");
  app->add_option("--backend", args->backend, "auto, cpu or cuda")->capture_default_str();
  app->add_option("--temp", args->temperature, "Sampling temperature; 0 = greedy")
      ->capture_default_str();
  app->add_option("--top-k", args->top_k, "Keep the k most likely tokens; 0 = all")
      ->capture_default_str();
  app->add_option("--top-p", args->top_p, "Keep the smallest set reaching probability p; 1 = all")
      ->capture_default_str();
  CLI::Option* seed = app->add_option("--seed", args->seed, "Sampling seed (default: random)");
  app->add_option("--ctx", args->context,
                  "KV-cache capacity in tokens (default 0: prompt + tokens)")
      ->capture_default_str();
  app->add_option("--batch", args->batch, "Prompt tokens per prefill chunk (one recorded graph each)")
      ->capture_default_str();
  app->add_flag("--echo", args->echo, "Print the prompt (as given to the model) before the answer");
  app->add_flag("-v,--verbose", args->verbose, "Describe the model, device and sampling on stderr");
  return {app, [args, seed] {
            args->seed_given = seed->count() > 0;
            return run_generate(*args);
          }};
}

}  // namespace onepass::cli
