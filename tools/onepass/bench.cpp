// onepass bench: prefill and decode speed of a model, against the memory-bandwidth floor.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common.h"
#include "onepass/backends/factory.h"
#include "onepass/core/error.h"
#include "onepass/exec/captured_graph.h"
#include "onepass/exec/graph_session.h"
#include "onepass/model/llama.h"
#include "onepass/model/loader.h"
#include "onepass/model/sampler.h"

namespace onepass::cli {
namespace {

struct BenchArgs {
  std::string model;
  std::string backend = "auto";
  int64_t prefill = 512;
  int64_t decode = 128;
  int reps = 3;
  int64_t batch = model::LoadOptions{}.max_batch;
  int64_t steps_per_graph = model::LoadOptions{}.fed_steps_per_graph;
  double l2_prefetch_mib = static_cast<double>(model::LoadOptions{}.l2_prefetch_bytes) / (1 << 20);
  bool json = false;
};


int run_bench(const BenchArgs& args) {
  const char* where = "bench";
  check(args.prefill >= 1, where, "--prefill must be at least 1, got ", args.prefill);
  check(args.decode >= 1, where, "--decode must be at least 1, got ", args.decode);
  check(args.reps >= 1, where, "--reps must be at least 1, got ", args.reps);
  const BackendChoice choice = parse_backend_choice(args.backend);
  const std::filesystem::path path = resolve_model(args.model, where);
  const std::unique_ptr<model::ModelSource> source = model::open_model(path);
  const std::shared_ptr<Backend> backend = make_backend(choice);
  const model::LlamaConfig& config = source->config();

  ProgressLine progress;
  if (!args.json) progress.show("measuring copy bandwidth", true);
  const CopyBandwidth copy = measure_copy_bandwidth(backend);

  model::LoadOptions load;
  check(args.batch >= 1, where, "--batch must be at least 1, got ", args.batch);
  load.context = args.prefill + args.decode + 1;
  load.max_batch = args.batch;
  check(args.steps_per_graph >= 1, where, "--steps-per-graph must be at least 1, got ", args.steps_per_graph);
  load.fed_steps_per_graph = args.steps_per_graph;
  check(args.l2_prefetch_mib >= 0, where, "--l2-prefetch-mib must not be negative, got ", args.l2_prefetch_mib);
  load.l2_prefetch_bytes = static_cast<int64_t>(args.l2_prefetch_mib * (1 << 20));
  load.progress = [&](double fraction, const std::string& name) {
    if (!args.json)
      progress.show(format("loading %3d%% %s", static_cast<int>(fraction * 100.0), name.c_str()));
  };
  model::LlamaModel llama(backend, *source, load);

  // Random prompt tokens (fixed seed, so runs are comparable).
  std::mt19937_64 rng(1234);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(config.vocab_size - 1));
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (int32_t& t : tokens) t = pick(rng);
    return tokens;
  };

  // Warm-up: a prefill of the measured length and a few decode steps. The first prefill of
  // a chunk length records its graph (and on CUDA sets up cuBLAS and captures its
  // products): that one-time cost is reported apart (prefill_cold_ms), not in the rates.
  if (!args.json) progress.show("warming up", true);
  llama.reset();
  const double cold0 = now_seconds();
  int32_t token = model::argmax(llama.prefill(random_tokens(args.prefill)));
  const double prefill_cold_ms = (now_seconds() - cold0) * 1e3;
  token = llama.decode_greedy_run(token, 4).back();  // records both decode graphs

  std::vector<double> prefill_rates, decode_rates, host_step_us;
  for (int rep = 0; rep < args.reps; ++rep) {
    if (!args.json) progress.show(format("rep %d/%d", rep + 1, args.reps), true);
    llama.reset();
    const std::vector<int32_t> prompt = random_tokens(args.prefill);
    const double t0 = now_seconds();
    token = model::argmax(llama.prefill(prompt));
    const double t1 = now_seconds();
    // Greedy decode as `onepass generate` runs it: each step fed from the previous one's
    // argmax on the device, launched back to back.
    const std::vector<int32_t> generated = llama.decode_greedy_run(token, args.decode);
    if (!generated.empty()) token = generated.back();
    host_step_us.push_back(static_cast<double>(llama.last_step_host_ns()) * 1e-3);
    const double t2 = now_seconds();
    prefill_rates.push_back(static_cast<double>(args.prefill) / (t1 - t0));
    decode_rates.push_back(static_cast<double>(args.decode) / (t2 - t1));
  }
  progress.clear();

  const double prefill_tok_s = median(prefill_rates);
  const double decode_tok_s = median(decode_rates);
  const size_t dispatches = llama.decode_dispatches();
  // Decode step i attends over prefill + i + 1 cached tokens.
  const double average_kv =
      static_cast<double>(args.prefill) + static_cast<double>(args.decode + 1) / 2.0;
  const size_t kv_bytes = llama.kv_bytes_read(static_cast<int64_t>(average_kv + 0.5));
  const size_t bytes_per_token = llama.weight_bytes() + kv_bytes;
  const double floor_tok_s = copy.bytes_per_second / static_cast<double>(bytes_per_token);
  const CaptureStats* stats = llama.decode_graph() ? &llama.decode_graph()->stats() : nullptr;

  if (args.json) {
    nlohmann::json j;
    j["model"] = path.string();
    j["config"] = config.describe();
    j["backend"] = backend_name(backend->kind());
    j["device"] = backend->info().name;
    j["prefill_tokens"] = args.prefill;
    j["decode_tokens"] = args.decode;
    j["reps"] = args.reps;
    j["prefill_tok_s"] = prefill_tok_s;
    j["prefill_cold_ms"] = prefill_cold_ms;
    j["decode_tok_s"] = decode_tok_s;
    j["prefill_tok_s_runs"] = prefill_rates;
    j["decode_tok_s_runs"] = decode_rates;
    j["decode_ms_per_token"] = 1e3 / decode_tok_s;
    j["host_us_per_step"] = median(host_step_us);
    j["dispatches_per_token"] = dispatches;
    j["dispatches_per_layer"] =
        static_cast<double>(dispatches) / static_cast<double>(config.layers);
    if (stats != nullptr) {
      j["nodes_recorded"] = stats->nodes_recorded;
      j["fusions"] = stats->fusions;
      j["dataflow_edges"] = stats->dataflow_edges;
    }
    j["weight_bytes"] = llama.weight_bytes();
    j["kv_bytes_per_token"] = kv_bytes;
    j["bytes_per_token"] = bytes_per_token;
    j["copy_bytes"] = copy.bytes;
    j["copy_bandwidth_gb_s"] = copy.bytes_per_second / 1e9;
    j["copy_timing"] = copy.device_timed ? "device" : "host";
    j["floor_tok_s"] = floor_tok_s;
    j["floor_fraction"] = decode_tok_s / floor_tok_s;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("model:    %s\n          %s\n", path.string().c_str(), config.describe().c_str());
  std::printf("device:   %s\n", describe_device(*backend).c_str());
  std::printf(
      "runs:     %d reps of %lld prompt tokens then %lld decode steps (medians; greedy on the "
      "device)\n",
      args.reps, static_cast<long long>(args.prefill), static_cast<long long>(args.decode));
  std::printf("prefill:  %10.1f tok/s  (the first, recording its graph: %.1f ms)\n", prefill_tok_s, prefill_cold_ms);
  // The CPU backend runs a step inside its launch, so there the host time is the step time.
  std::printf("decode:   %10.1f tok/s  (%.3f ms/token, host %.1f us/step%s)\n", decode_tok_s,
              1e3 / decode_tok_s, median(host_step_us),
              backend->kind() == BackendKind::cpu ? ", execution included on the CPU" : "");
  std::printf("kernels:  %zu per token, %.1f per layer", dispatches,
              static_cast<double>(dispatches) / static_cast<double>(config.layers));
  if (stats != nullptr)
    std::printf(" (%zu recorded, %u fused)", stats->nodes_recorded, stats->fusions);
  std::printf("\n");
  std::printf(
      "floor:    %s weights + %s KV (avg %.0f tokens) = %s per token; copy bandwidth %.1f GB/s (%s "
      "timed)\n",
      format_bytes(llama.weight_bytes()).c_str(), format_bytes(kv_bytes).c_str(), average_kv,
      format_bytes(bytes_per_token).c_str(), copy.bytes_per_second / 1e9,
      copy.device_timed ? "device" : "host");
  std::printf("          -> %.1f tok/s floor; decode reaches %.1f%% of it\n", floor_tok_s,
              100.0 * decode_tok_s / floor_tok_s);
  return 0;
}

}  // namespace

Command add_bench_command(CLI::App& parent) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* app = parent.add_subcommand(
      "bench", "Measure prefill and decode tokens/s and the memory-bandwidth floor");
  app->footer(
      "Decode is greedy (argmax on the device) after a prefill of random token ids; each rep "
      "starts from an empty\n"
      "cache. The floor is (weight bytes + KV bytes read at the average KV length) / the copy "
      "bandwidth measured\n"
      "on the same backend (read + write bytes of a 1 GiB device copy on CUDA, 256 MiB on the "
      "CPU).");
  app->add_option("-m,--model", args->model,
                  "GGUF file or MLX directory (default: the default model)");
  app->add_option("--backend", args->backend, "auto, cpu or cuda")->capture_default_str();
  app->add_option("--prefill", args->prefill, "Prompt tokens per rep")->capture_default_str();
  app->add_option("--decode", args->decode, "Decode steps per rep")->capture_default_str();
  app->add_option("--reps", args->reps, "Repetitions (medians are reported)")
      ->capture_default_str();
  app->add_option("--batch", args->batch, "Prompt tokens per prefill chunk")->capture_default_str();
  app->add_option("--steps-per-graph", args->steps_per_graph,
                  "Greedy decode steps recorded into one replayed graph")
      ->capture_default_str();
  app->add_option("--l2-prefetch-mib", args->l2_prefetch_mib,
                  "CUDA decode: MiB of each layer's gate/up weights requested into L2 during attention (0: off)")
      ->capture_default_str();
  app->add_flag("--json", args->json, "Print one JSON object");
  return {app, [args] { return run_bench(*args); }};
}

}  // namespace onepass::cli
