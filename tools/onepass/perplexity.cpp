// onepass perplexity: perplexity of a model over a text file, and its agreement with a
// saved run of another model, backend or weight type (KL divergence, top-1 agreement, Δp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "onepass/backends/factory.h"
#include "onepass/core/error.h"
#include "onepass/model/llama.h"
#include "onepass/model/loader.h"
#include "onepass/model/tokenizer.h"

namespace onepass::cli {
namespace {

constexpr const char* kWhere = "perplexity";
// --save-logits files: this magic, u32 version, u32 vocab, u64 scored positions, u64
// tokens, the i32 tokens, then f32 logits [positions, vocab] in scoring order.
constexpr char kMagic[16] = "onepass-logits1";
constexpr uint32_t kVersion = 1;

struct PerplexityArgs {
  std::string model;
  std::string text_file;
  std::string backend = "auto";
  int64_t context = 512;
  int64_t batch = model::LoadOptions{}.max_batch;
  std::string save_logits;
  std::string kl_base;
  int64_t threads = 0;
};

struct LogitsHeader {
  char magic[16];
  uint32_t version;
  uint32_t vocab;
  uint64_t positions;
  uint64_t tokens;
};

// Log-softmax of one row in double.
std::vector<double> log_softmax(std::span<const float> row) {
  double max = -INFINITY;
  for (float v : row) max = std::max(max, static_cast<double>(v));
  double sum = 0;
  for (float v : row) sum += std::exp(static_cast<double>(v) - max);
  const double log_sum = max + std::log(sum);
  std::vector<double> out(row.size());
  for (size_t i = 0; i < row.size(); ++i) out[i] = static_cast<double>(row[i]) - log_sum;
  return out;
}

int run_perplexity(const PerplexityArgs& args) {
  check(args.context >= 2 && args.context <= INT32_MAX / 2, kWhere, "--ctx must be in 2..", INT32_MAX / 2, ", got ",
        args.context);
  check(args.batch >= 1, kWhere, "--batch must be at least 1, got ", args.batch);
  const BackendChoice choice = parse_backend_choice(args.backend);
  const Options backend_opts = backend_options(args.threads, kWhere);
  std::ifstream text_in(args.text_file, std::ios::binary);
  check(text_in.good(), kWhere, "cannot read the text file '", args.text_file, "'");
  const std::string text{std::istreambuf_iterator<char>(text_in), std::istreambuf_iterator<char>()};
  const std::filesystem::path path = resolve_model(args.model, kWhere);
  const std::unique_ptr<model::ModelSource> source = model::open_model(path);
  std::optional<model::TokenizerData> vocab_data = source->tokenizer_data();
  check(vocab_data.has_value(), kWhere, source->describe(), " has no vocabulary; perplexity needs one");
  const model::Tokenizer tokenizer(std::move(*vocab_data));
  const std::vector<int32_t> tokens = tokenizer.encode(text);
  check(tokens.size() >= 2, kWhere, "the text '", args.text_file, "' has ", tokens.size(),
        " tokens; at least 2 are needed");

  const std::shared_ptr<Backend> backend = make_backend(choice, backend_opts);
  model::LoadOptions load;
  load.context = args.context;
  load.max_batch = args.batch;
  ProgressLine progress;
  load.progress = [&](double fraction, const std::string& name) {
    progress.show(format("loading %3d%% %s", static_cast<int>(fraction * 100.0), name.c_str()));
  };
  model::LlamaModel llama(backend, *source, load);
  progress.clear();
  const auto vocab = static_cast<size_t>(llama.config().vocab_size);

  // Windows of --ctx tokens, each evaluated from an empty cache; the logits of a window's
  // position i predict its token i + 1, so a window of n tokens scores n - 1 of them.
  const auto ctx = static_cast<size_t>(args.context);
  size_t positions = 0;
  for (size_t first = 0; first + 1 < tokens.size(); first += ctx) positions += std::min(ctx, tokens.size() - first) - 1;

  std::ofstream save;
  if (!args.save_logits.empty()) {
    save.open(args.save_logits, std::ios::binary | std::ios::trunc);
    check(save.good(), kWhere, "cannot write --save-logits file '", args.save_logits, "'");
    LogitsHeader h{};
    std::memcpy(h.magic, kMagic, sizeof(kMagic));
    h.version = kVersion;
    h.vocab = static_cast<uint32_t>(vocab);
    h.positions = positions;
    h.tokens = tokens.size();
    save.write(reinterpret_cast<const char*>(&h), sizeof(h));
    save.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 4));
  }
  std::ifstream base;
  if (!args.kl_base.empty()) {
    base.open(args.kl_base, std::ios::binary);
    check(base.good(), kWhere, "cannot read --kl-base file '", args.kl_base, "'");
    LogitsHeader h{};
    base.read(reinterpret_cast<char*>(&h), sizeof(h));
    check(base.good() && std::memcmp(h.magic, kMagic, sizeof(kMagic)) == 0 && h.version == kVersion, kWhere,
          args.kl_base, " is not a logits file of onepass perplexity --save-logits (version ", kVersion, ")");
    check(h.vocab == vocab && h.positions == positions && h.tokens == tokens.size(), kWhere, args.kl_base,
          " holds ", h.positions, " positions of ", h.tokens, " tokens over a vocabulary of ", h.vocab,
          "; expected ", positions, " positions of ", tokens.size(), " tokens over ", vocab,
          " (the same text, tokenizer and --ctx)");
    std::vector<int32_t> base_tokens(tokens.size());
    base.read(reinterpret_cast<char*>(base_tokens.data()), static_cast<std::streamsize>(tokens.size() * 4));
    check(base.good() && base_tokens == tokens, kWhere, args.kl_base, " was made from other tokens");
  }

  double nll = 0, base_nll = 0, kl_sum = 0, delta_p = 0;
  size_t scored = 0, agree = 0;
  std::vector<float> base_row(vocab);
  const double start = now_seconds();
  for (size_t first = 0; first + 1 < tokens.size(); first += ctx) {
    const size_t n = std::min(ctx, tokens.size() - first);
    llama.reset();
    const std::span<const float> logits = llama.evaluate(std::span(tokens).subspan(first, n));
    for (size_t i = 0; i + 1 < n; ++i) {
      const std::span<const float> row = logits.subspan(i * vocab, vocab);
      const std::vector<double> lp = log_softmax(row);
      const auto next = static_cast<size_t>(tokens[first + i + 1]);
      nll -= lp[next];
      if (save.is_open()) save.write(reinterpret_cast<const char*>(row.data()), static_cast<std::streamsize>(vocab * 4));
      if (base.is_open()) {
        base.read(reinterpret_cast<char*>(base_row.data()), static_cast<std::streamsize>(vocab * 4));
        check(base.good(), kWhere, args.kl_base, " ends early");
        const std::vector<double> blp = log_softmax(base_row);
        double kl = 0;
        for (size_t v = 0; v < vocab; ++v) kl += std::exp(blp[v]) * (blp[v] - lp[v]);
        kl_sum += kl;
        base_nll -= blp[next];
        const auto top = std::max_element(lp.begin(), lp.end()) - lp.begin();
        const auto base_top = std::max_element(blp.begin(), blp.end()) - blp.begin();
        agree += top == base_top ? 1 : 0;
        delta_p += std::exp(lp[next]) - std::exp(blp[next]);
      }
      ++scored;
    }
    progress.show(format("%zu / %zu positions", scored, positions));
  }
  progress.clear();
  if (save.is_open()) {
    save.flush();
    check(save.good(), kWhere, "writing --save-logits file '", args.save_logits, "' failed");
  }
  const double seconds = now_seconds() - start;
  const auto count = static_cast<double>(scored);
  std::printf("model: %s\ndevice: %s\n", source->describe().c_str(), describe_device(*backend).c_str());
  std::printf("perplexity: %.4f over %zu positions (%zu tokens, windows of %lld), %.1f tokens/s\n",
              std::exp(nll / count), scored, tokens.size(), static_cast<long long>(args.context),
              count / std::max(seconds, 1e-9));
  if (base.is_open()) {
    std::printf("base perplexity: %.4f (%s)\n", std::exp(base_nll / count), args.kl_base.c_str());
    std::printf("mean KL divergence (base || this): %.6g\n", kl_sum / count);
    std::printf("top-1 agreement: %.2f%%\n", 100.0 * static_cast<double>(agree) / count);
    std::printf("mean delta p (this - base) of the true token: %+.4f%%\n", 100.0 * delta_p / count);
  }
  return 0;
}

}  // namespace

Command add_perplexity_command(CLI::App& parent) {
  auto args = std::make_shared<PerplexityArgs>();
  CLI::App* app = parent.add_subcommand(
      "perplexity", "Perplexity over a text file; KL divergence and top-1 agreement against a saved run");
  app->footer(
      "The text is tokenized once and cut into windows of --ctx tokens, each evaluated from an\n"
      "empty cache; every position but a window's last predicts the next token. --save-logits\n"
      "writes every scored position's logits (vocab x 4 bytes each); --kl-base compares with such\n"
      "a file made from the same text and --ctx (another backend, weight type or model).");
  app->add_option("-m,--model", args->model, "GGUF file or MLX directory (default: the SmolLM2 model)");
  app->add_option("-f,--file", args->text_file, "Text file to score")->required();
  app->add_option("--ctx", args->context, "Tokens per window")->capture_default_str();
  app->add_option("--batch", args->batch, "Tokens per evaluated chunk at most (and the model's --batch)")
      ->capture_default_str();
  app->add_option("--backend", args->backend, "auto, cpu or cuda")->capture_default_str();
  app->add_option("--save-logits", args->save_logits, "Write the logits of every scored position to FILE");
  app->add_option("--kl-base", args->kl_base, "Compare with the logits saved in FILE");
  add_threads_option(*app, args->threads);
  return {app, [args] { return run_perplexity(*args); }};
}

}  // namespace onepass::cli
