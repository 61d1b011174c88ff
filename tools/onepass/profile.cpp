// onepass profile: where the time of a decode step goes — per-op GPU (or CPU) time, achieved
// bandwidth against the measured copy bandwidth, a Chrome/Perfetto trace and a DOT graph.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common.h"
#include "layered_dot.h"
#include "onepass/backends/factory.h"
#include "onepass/core/error.h"
#include "onepass/exec/captured_graph.h"
#include "onepass/exec/counters.h"
#include "onepass/exec/profile.h"
#include "onepass/exec/profile_report.h"
#include "onepass/model/llama.h"
#include "onepass/model/loader.h"
#include "onepass/model/sampler.h"

namespace onepass::cli {
namespace {

struct ProfileArgs {
  std::string model;
  std::string backend = "auto";
  int64_t prompt = 64;
  int64_t decode = 16;
  std::string group = "op";
  std::string trace;
  std::string dot;
  int64_t threads = 0;
  int64_t parallel = 0;  // --parallel B: batched decode steps of B sequences
};

int run_profile(const ProfileArgs& args) {
  const char* where = "profile";
  check(args.decode >= 1, where, "--decode must be at least 1, got ", args.decode);
  check(args.prompt >= 1, where, "--prompt must be at least 1, got ", args.prompt);
  ProfileGroup group = ProfileGroup::op_kind;
  if (args.group == "label") {
    group = ProfileGroup::label;
  } else if (args.group == "kernel") {
    group = ProfileGroup::kernel;
  } else {
    check(args.group == "op", where, "--group must be op, label or kernel, got '", args.group, "'");
  }
  const std::filesystem::path path = resolve_model(args.model, where);
  const std::unique_ptr<model::ModelSource> source = model::open_model(path);
  // Per-dispatch timing: an event pair per dispatch on CUDA, one dispatch at a time on the
  // CPU. The same switches as ONEPASS_PROFILE_DISPATCH / ONEPASS_PROFILE_CB.
  Options options = backend_options(args.threads, where);
  options.profile_dispatches = true;
  options.profile_submissions = true;
  const std::shared_ptr<Backend> backend = make_backend(parse_backend_choice(args.backend), options);

  ProgressLine progress;
  progress.show("measuring copy bandwidth", true);
  const CopyBandwidth copy = measure_copy_bandwidth(backend);
  model::LoadOptions load;
  load.context = args.prompt + args.decode + 8;
  if (args.parallel > 0) {
    load.sequences = args.parallel;
    load.max_batch = args.parallel;
  }
  load.progress = [&](double fraction, const std::string& name) {
    progress.show(format("loading %3d%% %s", static_cast<int>(fraction * 100.0), name.c_str()));
  };
  model::LlamaModel llama(backend, *source, load);
  std::mt19937_64 rng(1234);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(source->config().vocab_size - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(args.prompt));
  for (int32_t& t : prompt) t = pick(rng);
  progress.show("prefill and warm-up", true);
  std::vector<double> step_ns;
  size_t per_step = 0;
  if (args.parallel > 0) {
    // B sequences with the same random prompt, then batched greedy decode steps of all B;
    // step time from the host clock (the replayed step graph, inputs and argmax readback).
    model::KvBlockPool& pool = llama.kv_pool();
    std::vector<model::BatchRow> rows(static_cast<size_t>(args.parallel));
    std::vector<int32_t> next(rows.size());
    for (size_t b = 0; b < rows.size(); ++b) {
      const int32_t sequence = pool.add_sequence();
      for (int64_t i = 0; i < args.prompt; ++i) {
        const model::BatchRow row{sequence, prompt[static_cast<size_t>(i)], static_cast<int32_t>(i), i + 1 == args.prompt};
        const model::BatchResult r = llama.step(std::span(&row, 1), false);
        if (!r.argmax.empty()) next[b] = r.argmax[0];
      }
      rows[b] = {sequence, next[b], static_cast<int32_t>(args.prompt), true};
    }
    auto step = [&] {
      const model::BatchResult r = llama.step(rows, false);
      for (size_t b = 0; b < rows.size(); ++b) {
        rows[b].token = r.argmax[b];
        ++rows[b].position;
      }
    };
    for (int i = 0; i < 3; ++i) step();
    Profiler::global().clear();
    for (int64_t i = 0; i < args.decode; ++i) {
      const double t0 = now_seconds();
      step();
      step_ns.push_back((now_seconds() - t0) * 1e9);
    }
    per_step = Profiler::global().dispatches().size() / static_cast<size_t>(args.decode);
  } else {
    int32_t token = model::argmax(llama.prefill(prompt));
    for (int i = 0; i < 3; ++i) token = llama.decode_greedy(token);
    Profiler::global().clear();
    for (int64_t i = 0; i < args.decode; ++i) {
      token = llama.decode_greedy(token);
      if (auto ns = llama.decode_graph() ? llama.decode_graph()->gpu_time_ns() : std::nullopt) {
        step_ns.push_back(static_cast<double>(*ns));
      }
    }
    per_step = llama.decode_dispatches();
  }
  progress.clear();
  const std::vector<DispatchSample> samples = Profiler::global().dispatches();
  double total_ns = 0;
  for (double ns : step_ns) total_ns += ns;
  const double copy_gbps = copy.bytes_per_second / 1e9;
  const ProfileReport report =
      make_profile_report(samples, group, total_ns, static_cast<uint64_t>(args.decode), copy_gbps);

  std::printf("%s\n", describe_device(*backend).c_str());
  std::printf("model: %s (%s)\n", path.string().c_str(), source->config().describe().c_str());
  std::printf("decode step%s: median %.1f us, %zu dispatches, %.1f per layer; weights %.1f MB read per step\n",
              args.parallel > 0 ? cat(" of ", args.parallel, " sequences (host clock)").c_str() : "",
              median(step_ns) / 1e3, per_step,
              static_cast<double>(per_step) / static_cast<double>(source->config().layers),
              static_cast<double>(llama.weight_bytes()) / 1e6);
  std::printf("%s", report.table(cat("decode, ", args.decode, " steps, grouped by ", args.group)).c_str());
  if (const CapturedGraph* graph = args.parallel > 0 ? nullptr : llama.decode_graph()) {
    const CaptureStats& s = graph->stats();
    std::printf("graph: %zu nodes recorded, %u fusions, %zu dispatches, %zu dataflow edges, depth %zu\n",
                s.nodes_recorded, s.fusions, s.dispatches, s.dataflow_edges, s.dataflow_depth);
  }
  if (!args.trace.empty()) {
    // The last step only: one slice per dispatch.
    std::vector<DispatchSample> last(samples.end() - static_cast<long>(std::min(per_step, samples.size())), samples.end());
    std::ofstream out(args.trace);
    check(static_cast<bool>(out), where, "cannot write ", args.trace);
    out << chrome_trace_json(last, cat("onepass decode step (", backend->info().name, ")"));
    std::printf("trace: %s (open in ui.perfetto.dev or chrome://tracing)\n", args.trace.c_str());
  }
  if (!args.dot.empty() && args.parallel == 0 && llama.decode_graph()) {
    std::ofstream out(args.dot);
    check(static_cast<bool>(out), where, "cannot write ", args.dot);
    const ComputeGraph& step = llama.decode_graph()->graph();
    const LayerSpans spans = find_layers(step, source->config().layers);
    out << layered_dot(step, spans, "decode");
    std::printf("graph: %s, %s (render with: dot -Tsvg %s -o decode.svg, or -Tpng)\n", args.dot.c_str(),
                spans.found() ? cat("one cluster per layer, ", spans.per_layer, " dispatches each").c_str()
                              : "no repeating layer found: no clusters",
                args.dot.c_str());
  }
  return 0;
}

}  // namespace

Command add_profile_command(CLI::App& parent) {
  auto args = std::make_shared<ProfileArgs>();
  CLI::App* app = parent.add_subcommand("profile", "Per-op time and bandwidth of a decode step, trace and graph");
  app->footer(
      "Replays the recorded decode step with per-dispatch timing (CUDA events inside the graph on\n"
      "the GPU, steady_clock per dispatch on the CPU) and prints one row per op kind: count, total\n"
      "time, share of the step, achieved GB/s from the bytes each dispatch declares, and that as a\n"
      "share of the copy bandwidth measured on the same device.");
  app->add_option("-m,--model", args->model, "GGUF file or MLX directory (default: the default model)");
  app->add_option("--backend", args->backend, "auto, cpu or cuda")->capture_default_str();
  app->add_option("--prompt", args->prompt, "Prompt tokens before decoding")->capture_default_str();
  app->add_option("--decode", args->decode, "Decode steps profiled")->capture_default_str();
  app->add_option("--group", args->group, "Rows by op, label or kernel")->capture_default_str();
  app->add_option("--trace", args->trace, "Write a Chrome/Perfetto trace (JSON) of the last step");
  app->add_option("--dot", args->dot, "Write the decode graph as Graphviz DOT, a cluster per layer");
  app->add_option("--parallel", args->parallel,
                  "Profile batched decode steps of B sequences (the serving path) instead of one sequence")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  add_threads_option(*app, args->threads);
  return {app, [args] { return run_profile(*args); }};
}

}  // namespace onepass::cli
