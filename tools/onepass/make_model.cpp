// onepass make-model: a random-weight Llama GGUF of a named or explicit shape.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "common.h"
#include "onepass/core/error.h"
#include "onepass/model/model_maker.h"

namespace onepass::cli {
namespace {

struct MakeModelArgs {
  std::string shape;
  std::string output;
  std::string type;
  uint64_t seed = 0;
  int threads = 0;
  bool dry_run = false;
  bool list_tensors = false;
  // Explicit dimensions: a whole shape without SHAPE, or overrides of a named one.
  std::optional<int64_t> hidden, ffn, layers, heads, kv_heads, vocab, context;
  std::optional<int64_t> experts, experts_used, expert_ffn;  // mixture of experts
  bool tied = false;
  bool tied_given = false;  // --tied or --untied was passed
  std::optional<float> rope_theta;
  std::optional<std::string> name, pre;
};

std::string type_list() {
  std::string out;
  for (DType t : model::model_file_types())
    out += (out.empty() ? "" : ", ") + std::string(dtype_name(t));
  return out;
}

// "smollm2-135m, llama-1b, ..." (every named shape).
std::string shape_names() {
  std::string names;
  for (const model::ModelShape& s : model::model_shapes()) names += (names.empty() ? "" : ", ") + s.name;
  return names;
}

model::ModelShape build_shape(const MakeModelArgs& args) {
  const char* where = "make-model";
  model::ModelShape shape;
  if (!args.shape.empty()) {
    std::optional<model::ModelShape> named = model::find_model_shape(args.shape);
    if (!named) {
      fail(where, "unknown shape '", args.shape, "' (expected ", shape_names(),
           ", or explicit --hidden --ffn --layers --heads --vocab)");
    }
    shape = *named;
  } else {
    check(args.hidden && args.ffn && args.layers && args.heads && args.vocab, where,
          "give a SHAPE (", shape_names(), ") or all of --hidden --ffn --layers --heads --vocab");
    shape.name = "custom";
  }
  if (args.hidden) shape.hidden = *args.hidden;
  if (args.ffn) shape.ffn = *args.ffn;
  if (args.layers) shape.layers = *args.layers;
  if (args.heads) shape.heads = *args.heads;
  if (args.kv_heads) {
    shape.kv_heads = *args.kv_heads;
  } else if (args.shape.empty()) {
    shape.kv_heads = shape.heads;
  }
  if (args.vocab) shape.vocab = *args.vocab;
  if (args.context) shape.context = *args.context;
  if (args.experts) shape.experts = *args.experts;
  if (args.experts_used) shape.experts_used = *args.experts_used;
  if (args.expert_ffn) shape.expert_ffn = *args.expert_ffn;
  if (args.tied_given) shape.tied = args.tied;
  if (args.rope_theta) shape.rope_theta = *args.rope_theta;
  if (args.pre) shape.pre = *args.pre;
  if (args.name) {
    shape.name = *args.name;
  } else if (args.shape.empty()) {
    shape.name = cat("random-", shape.hidden, "x", shape.layers);
  }
  shape.validate();
  return shape;
}

void print_plan(const model::ModelPlan& plan, bool list_tensors) {
  std::printf("%s\n", plan.shape.describe().c_str());
  std::printf("type %s (llama.cpp file type %u): %zu tensors, %s parameters\n",
              std::string(dtype_name(plan.file_type)).c_str(),
              model::llama_file_type(plan.file_type), plan.tensors.size(),
              format_count(plan.parameters).c_str());
  for (const auto& [type, total] : plan.totals_by_type()) {
    std::printf("  %-5s %4zu tensor%s %10s params %12s\n", std::string(dtype_name(type)).c_str(),
                total.tensors, total.tensors == 1 ? " " : "s",
                format_count(total.parameters).c_str(), format_bytes(total.bytes).c_str());
  }
  if (list_tensors) {
    for (const model::PlannedTensor& t : plan.tensors) {
      std::printf("  %-28s %-5s %-14s %12s bytes\n", t.name.c_str(),
                  std::string(dtype_name(t.dtype)).c_str(), t.shape.str().c_str(),
                  format_grouped(t.bytes).c_str());
    }
  }
}

int run_make_model(const MakeModelArgs& args) {
  const char* where = "make-model";
  const model::ModelShape shape = build_shape(args);
  DType type = shape.default_type;
  if (!args.type.empty()) {
    const std::optional<DType> parsed = parse_dtype(args.type);
    check(parsed.has_value(), where, "unknown --type '", args.type, "' (expected ", type_list(),
          ")");
    type = *parsed;
  }
  (void)model::llama_file_type(type);  // rejects types make-model does not write
  check(args.threads >= 0, where, "--threads must be at least 0, got ", args.threads);

  if (args.dry_run) {
    const model::ModelPlan plan = model::plan_model(shape, type, args.seed);
    print_plan(plan, args.list_tensors);
    std::printf("file size: %s bytes (%s)\n", format_grouped(plan.file_bytes).c_str(),
                format_bytes(plan.file_bytes).c_str());
    return 0;
  }
  check(!args.output.empty(), where, "-o FILE is required (or --dry-run)");

  ProgressLine progress;
  model::MakeModelOptions options;
  options.seed = args.seed;
  options.threads = args.threads;
  options.progress = [&](double fraction, const std::string& name) {
    progress.show(format("writing %3d%% %s", static_cast<int>(fraction * 100.0), name.c_str()));
  };
  const model::MakeModelReport report = model::make_model(shape, type, args.output, options);
  progress.clear();
  print_plan(report.plan, args.list_tensors);
  std::printf("wrote %s: %s bytes (%s) in %.2f s (%.0f MB/s)\n", args.output.c_str(),
              format_grouped(report.file_bytes).c_str(), format_bytes(report.file_bytes).c_str(),
              report.seconds,
              static_cast<double>(report.file_bytes) / 1e6 / std::max(report.seconds, 1e-9));
  return 0;
}

}  // namespace

Command add_make_model_command(CLI::App& parent) {
  auto args = std::make_shared<MakeModelArgs>();
  CLI::App* app = parent.add_subcommand(
      "make-model", "Write a random-weight Llama GGUF model of a named or explicit shape");
  app->footer(cat(
      "Shapes: ", shape_names(), ".\n"
      "Without SHAPE give --hidden --ffn --layers --heads --vocab (--kv-heads defaults to --heads; "
      "default type q4_0);\n"
      "dimension flags also override a named shape. Tensor types follow llama.cpp: norms f32, "
      "matrices in --type,\n"
      "except that the output matrix of a file below 8 bits is q6_k (q8_0 when its rows are not a "
      "multiple of 256)."));
  app->add_option("shape", args->shape, "A named shape (see below)");
  app->add_option("-o,--output", args->output, "GGUF file to write");
  app->add_option("--type", args->type, type_list() + " (default: the shape's)");
  app->add_option("--seed", args->seed, "Seed of the weights and vocabulary")
      ->capture_default_str();
  app->add_option("--threads", args->threads, "Threads (default 0: one per hardware thread)")
      ->capture_default_str();
  app->add_option("--hidden", args->hidden, "Embedding length");
  app->add_option("--ffn", args->ffn, "Feed-forward length");
  app->add_option("--layers", args->layers, "Blocks");
  app->add_option("--heads", args->heads, "Attention heads");
  app->add_option("--kv-heads", args->kv_heads, "Key/value heads");
  app->add_option("--vocab", args->vocab,
                  "Vocabulary size (at least 256 byte tokens + the special tokens)");
  app->add_option("--context", args->context, "Training context length recorded in the file");
  app->add_option("--rope-theta", args->rope_theta, "RoPE frequency base");
  app->add_option("--experts", args->experts, "Experts per layer (mixture of experts; 0: a dense FFN)");
  app->add_option("--experts-used", args->experts_used, "Experts each token uses");
  app->add_option("--expert-ffn", args->expert_ffn, "Feed-forward length of one expert (default: --ffn)");
  CLI::Option* tied = app->add_flag("--tied,!--untied", args->tied,
                                    "LM head shared with the token embedding (or not)");
  app->add_option("--name", args->name, "general.name");
  app->add_option("--pre", args->pre, "Pre-tokenizer of the vocabulary: llama-bpe, smollm, ...");
  app->add_flag("--dry-run", args->dry_run, "Print the plan (types, sizes) without writing");
  app->add_flag("--tensors", args->list_tensors, "List every tensor");
  return {app, [args, tied] {
            args->tied_given = tied->count() > 0;
            try {
              return run_make_model(*args);
            } catch (const Error& e) {
              // The library's checks of the shape, the vocabulary and the output speak for
              // this command: "[make-model] vocab_size 10 is too small ...".
              if (e.where() == "make-model") throw;
              fail("make-model", e.detail());
            }
          }};
}

}  // namespace onepass::cli
