// onepass bench: prefill and decode speed of a model over several configurations (comma
// lists of prompt lengths, decode lengths and thread counts), with mean ± stddev over
// repetitions and the per-token floor from the measured memory bandwidth.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
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
#include "onepass/version.h"

namespace onepass::cli {
namespace {

struct BenchArgs {
  std::string model;
  std::string backend = "auto";
  std::string prefill = "512";
  std::string decode = "128";
  std::string threads = "0";
  std::string parallel;  // --parallel: comma list of batch sizes (empty: one sequence)
  int reps = 3;
  int64_t batch = model::LoadOptions{}.max_batch;
  int64_t steps_per_graph = model::LoadOptions{}.fed_steps_per_graph;
  double l2_prefetch_mib = static_cast<double>(model::LoadOptions{}.l2_prefetch_bytes) / (1 << 20);
  bool json = false;
  std::string output = "text";
};

// "128,512" -> {128, 512}: whole numbers in [min_value, max_value], at least one.
std::vector<int64_t> parse_list(const std::string& text, const char* option, int64_t min_value,
                                int64_t max_value) {
  std::vector<int64_t> values;
  size_t start = 0;
  while (true) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    int64_t value = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    check(!item.empty() && ec == std::errc() && end == item.data() + item.size() &&
              value >= min_value && value <= max_value,
          "bench", option, ": expected a comma-separated list of whole numbers in ", min_value,
          "..", max_value, ", got '", text, "'");
    values.push_back(value);
    if (comma == text.size()) break;
    start = comma + 1;
  }
  return values;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(colon + 1);
        name.erase(0, name.find_first_not_of(" \t"));
        return name;
      }
    }
  }
  return "unknown";
}

struct ReadBandwidth {
  uint64_t bytes = 0;
  int threads = 0;
  double bytes_per_second = 0;  // median of the timed passes
};

// Bytes a decode step reads come from memory, not the caches: a sum over a buffer far past
// the last-level cache (256 MiB), split over `threads` threads, each reading its own part
// (first touched by that thread). Median of 5 passes after a warm-up.
ReadBandwidth measure_read_bandwidth(int threads) {
  constexpr size_t kBytes = size_t{256} << 20;
  const size_t words = kBytes / sizeof(uint64_t);
  std::unique_ptr<uint64_t[]> buffer(new uint64_t[words]);
  const auto slice = [&](int t) {
    const size_t per = words / static_cast<size_t>(threads);
    const size_t first = per * static_cast<size_t>(t);
    return std::pair<size_t, size_t>(first, t == threads - 1 ? words : first + per);
  };
  std::vector<uint64_t> sums(static_cast<size_t>(threads) * 8);  // a cache line per thread
  auto run = [&](auto&& body) {
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(body, t);
    body(0);
    for (std::thread& th : pool) th.join();
  };
  run([&](int t) {
    const auto [first, last] = slice(t);
    for (size_t i = first; i < last; ++i) buffer[i] = i * 0x9E3779B97F4A7C15ull;
  });
  std::vector<double> rates;
  for (int pass = 0; pass < 6; ++pass) {
    const double start = now_seconds();
    run([&](int t) {
      const auto [first, last] = slice(t);
      uint64_t a = 0, b = 0, c = 0, d = 0;
      size_t i = first;
      for (; i + 4 <= last; i += 4) {
        a += buffer[i];
        b += buffer[i + 1];
        c += buffer[i + 2];
        d += buffer[i + 3];
      }
      for (; i < last; ++i) a += buffer[i];
      sums[static_cast<size_t>(t) * 8] = a + b + c + d;
    });
    const double seconds = now_seconds() - start;
    if (pass > 0) rates.push_back(static_cast<double>(kBytes) / seconds);
  }
  uint64_t total = 0;
  for (const uint64_t s : sums) total += s;
  check(total != 1, "bench", "read bandwidth: impossible checksum");  // keeps the sums live
  return {kBytes, threads, median(rates)};
}

// One configuration's measurements.
struct BenchRow {
  int threads = 0;
  int64_t prefill = 0;
  int64_t decode = 0;
  std::vector<double> prefill_rates, decode_rates, host_step_us;
  double prefill_cold_ms = 0;
  size_t dispatches = 0;
  size_t kv_bytes = 0;
  size_t bytes_per_token = 0;
  double average_kv = 0;
  CopyBandwidth copy;
  ReadBandwidth read;           // CPU only
  double floor_tok_s = 0;       // from the copy bandwidth
  double read_floor_tok_s = 0;  // CPU: from the read bandwidth
  std::optional<CaptureStats> stats;
};

struct BenchHeader {
  std::string model;
  std::string config;
  std::string backend;
  std::string device;       // "cpu: cpu (2 threads)", "cuda: NVIDIA H100 ... (sm_90, ...)"
  std::string device_name;  // DeviceInfo::name
  std::string cpu_model;
  std::string isa;
  uint64_t weight_bytes = 0;
  int64_t layers = 1;
};

nlohmann::json row_json(const BenchHeader& h, const BenchRow& r, int reps) {
  nlohmann::json j;
  j["threads"] = r.threads;
  j["prefill_tokens"] = r.prefill;
  j["decode_tokens"] = r.decode;
  j["reps"] = reps;
  j["prefill_tok_s"] = median(r.prefill_rates);
  j["prefill_tok_s_mean"] = mean(r.prefill_rates);
  j["prefill_tok_s_stddev"] = stddev(r.prefill_rates);
  j["prefill_cold_ms"] = r.prefill_cold_ms;
  j["decode_tok_s"] = median(r.decode_rates);
  j["decode_tok_s_mean"] = mean(r.decode_rates);
  j["decode_tok_s_stddev"] = stddev(r.decode_rates);
  j["prefill_tok_s_runs"] = r.prefill_rates;
  j["decode_tok_s_runs"] = r.decode_rates;
  const double decode_tok_s = median(r.decode_rates);
  j["decode_ms_per_token"] = 1e3 / decode_tok_s;
  j["host_us_per_step"] = median(r.host_step_us);
  j["dispatches_per_token"] = r.dispatches;
  j["dispatches_per_layer"] = static_cast<double>(r.dispatches) / static_cast<double>(h.layers);
  if (r.stats) {
    j["nodes_recorded"] = r.stats->nodes_recorded;
    j["fusions"] = r.stats->fusions;
    j["dataflow_edges"] = r.stats->dataflow_edges;
  }
  j["weight_bytes"] = h.weight_bytes;
  j["kv_bytes_per_token"] = r.kv_bytes;
  j["bytes_per_token"] = r.bytes_per_token;
  j["copy_bytes"] = r.copy.bytes;
  j["copy_bandwidth_gb_s"] = r.copy.bytes_per_second / 1e9;
  j["copy_timing"] = r.copy.device_timed ? "device" : "host";
  j["floor_tok_s"] = r.floor_tok_s;
  j["floor_fraction"] = decode_tok_s / r.floor_tok_s;
  if (r.read.bytes > 0) {
    j["read_bytes"] = r.read.bytes;
    j["read_bandwidth_gb_s"] = r.read.bytes_per_second / 1e9;
    j["read_floor_tok_s"] = r.read_floor_tok_s;
    j["read_floor_fraction"] = decode_tok_s / r.read_floor_tok_s;
  }
  return j;
}

// The floor a row is judged against: the read bandwidth's on the CPU (a decode step reads
// its weights; it writes little), the copy bandwidth's on the GPU.
double row_floor(const BenchRow& r) {
  return r.read.bytes > 0 ? r.read_floor_tok_s : r.floor_tok_s;
}

std::string rate_text(const std::vector<double>& rates) {
  return format("%.1f ± %.1f", mean(rates), stddev(rates));
}

// One row per test, as llama-bench prints them: ppN (prefill) and tgN (decode).
std::vector<std::vector<std::string>> table_rows(const BenchHeader& h,
                                                 const std::vector<BenchRow>& rows) {
  std::vector<std::vector<std::string>> out;
  out.push_back({"model", "size", "backend", "threads", "test", "t/s (mean ± sd)", "median",
                 "floor t/s", "% floor"});
  const std::string name = std::filesystem::path(h.model).filename().string();
  for (const BenchRow& r : rows) {
    const std::string threads = std::to_string(r.threads);
    out.push_back({name, format_bytes(h.weight_bytes), h.backend, threads, cat("pp", r.prefill),
                   rate_text(r.prefill_rates), format("%.1f", median(r.prefill_rates)), "", ""});
    out.push_back({name, format_bytes(h.weight_bytes), h.backend, threads, cat("tg", r.decode),
                   rate_text(r.decode_rates), format("%.1f", median(r.decode_rates)),
                   format("%.1f", row_floor(r)),
                   format("%.1f%%", 100.0 * median(r.decode_rates) / row_floor(r))});
  }
  return out;
}

// Display width of UTF-8 text (the ± sign is two bytes, one column).
size_t columns(const std::string& text) {
  size_t n = 0;
  for (const char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::string pad(const std::string& text, size_t width, bool right) {
  const std::string fill(width > columns(text) ? width - columns(text) : 0, ' ');
  return right ? fill + text : text + fill;
}

std::string build_line() {
  return cat("onepass ", kVersion, " (commit ", kGitCommit, ", backends: ", kBackends, ")");
}

void print_markdown(const BenchHeader& h, const std::vector<BenchRow>& rows, int reps) {
  std::printf("%s; %s; CPU: %s%s; %d reps (mean ± sample stddev)\n\n", build_line().c_str(),
              h.device.c_str(), h.cpu_model.c_str(),
              h.isa.empty() ? "" : (", ISA " + h.isa).c_str(), reps);
  const auto table = table_rows(h, rows);
  for (size_t i = 0; i < table.size(); ++i) {
    std::string line = "|";
    for (size_t c = 0; c < table[i].size(); ++c) line += " " + table[i][c] + " |";
    std::printf("%s\n", line.c_str());
    if (i == 0) {
      line = "|";
      for (size_t c = 0; c < table[i].size(); ++c) line += c < 4 ? " --- |" : " ---: |";
      std::printf("%s\n", line.c_str());
    }
  }
}

void print_text(const BenchHeader& h, const std::vector<BenchRow>& rows, int reps) {
  std::printf("build:    %s\n", build_line().c_str());
  std::printf("model:    %s\n          %s\n", h.model.c_str(), h.config.c_str());
  std::printf("device:   %s\n", h.device.c_str());
  std::printf("cpu:      %s%s\n", h.cpu_model.c_str(),
              h.isa.empty() ? "" : cat(" (ISA path ", h.isa, ")").c_str());
  std::printf(
      "runs:     %d reps per configuration, each from an empty cache: a prefill of random tokens,\n"
      "          then greedy decode steps on the device (mean ± sample stddev, and the median)\n\n",
      reps);
  const auto table = table_rows(h, rows);
  std::vector<size_t> widths(table[0].size(), 0);
  for (const auto& row : table) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], columns(row[c]));
  }
  for (const auto& row : table) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c)
      line += (c ? "  " : "") + pad(row[c], widths[c], c >= 3);
    std::printf("%s\n", line.c_str());
  }
  std::printf("\n");
  for (const BenchRow& r : rows) {
    std::printf(
        "threads %d, pp%lld tg%lld: first prefill (recording its graph) %.1f ms; decode %.3f "
        "ms/token, "
        "host %.1f us/step%s\n",
        r.threads, static_cast<long long>(r.prefill), static_cast<long long>(r.decode),
        r.prefill_cold_ms, 1e3 / median(r.decode_rates), median(r.host_step_us),
        h.backend == "cpu" ? " (execution included on the CPU)" : "");
    std::printf("  kernels: %zu per token, %.1f per layer", r.dispatches,
                static_cast<double>(r.dispatches) / static_cast<double>(h.layers));
    if (r.stats)
      std::printf(" (%zu recorded, %u fused)", r.stats->nodes_recorded, r.stats->fusions);
    std::printf("\n  floor: %s weights + %s KV (avg %.0f tokens) = %s per token\n",
                format_bytes(h.weight_bytes).c_str(), format_bytes(r.kv_bytes).c_str(),
                r.average_kv, format_bytes(r.bytes_per_token).c_str());
    if (r.read.bytes > 0) {
      std::printf(
          "         memory read %.1f GB/s (%d thread%s, %s buffer) -> %.1f tok/s; decode reaches "
          "%.1f%%\n",
          r.read.bytes_per_second / 1e9, r.read.threads, r.read.threads == 1 ? "" : "s",
          format_bytes(r.read.bytes).c_str(), r.read_floor_tok_s,
          100.0 * median(r.decode_rates) / r.read_floor_tok_s);
    }
    std::printf(
        "         copy %.1f GB/s read + write (%s timed) -> %.1f tok/s; decode reaches %.1f%%\n",
        r.copy.bytes_per_second / 1e9, r.copy.device_timed ? "device" : "host", r.floor_tok_s,
        100.0 * median(r.decode_rates) / r.floor_tok_s);
  }
}

// --parallel B: B sequences decoded together by batched steps over the paged KV pool, the
// workload of llama-batched-bench -npp P -ntg N -npl B: B prompts of P random tokens
// prefilled (in steps of up to --batch rows), then N steps of B decode rows each. Rates are
// aggregate over the batch.
struct ParallelRow {
  int threads = 0;
  int64_t sequences = 0;
  int64_t prefill = 0;
  int64_t decode = 0;
  std::vector<double> prefill_rates, decode_rates, total_rates;
};

int run_parallel_bench(const BenchArgs& args, const std::string& output) {
  const char* where = "bench";
  const std::vector<int64_t> batches = parse_list(args.parallel, "--parallel", 1, 4096);
  const std::vector<int64_t> prefills = parse_list(args.prefill, "-p/--prefill", 1, int64_t{1} << 20);
  const std::vector<int64_t> decodes = parse_list(args.decode, "-n/--decode", 1, int64_t{1} << 20);
  const std::vector<int64_t> thread_counts = parse_list(args.threads, "-t/--threads", 0, 1024);
  check(args.reps >= 1, where, "-r/--reps must be at least 1, got ", args.reps);
  const BackendChoice choice = parse_backend_choice(args.backend);
  const std::filesystem::path path = resolve_model(args.model, where);
  const std::unique_ptr<model::ModelSource> source = model::open_model(path);
  const model::LlamaConfig& config = source->config();
  const bool quiet = output != "text";
  const int64_t most = *std::max_element(batches.begin(), batches.end());
  ProgressLine progress;
  auto show = [&](const std::string& text) {
    if (!quiet) progress.show(text, true);
  };
  std::vector<ParallelRow> rows;
  std::string backend_label, device;
  for (const int64_t threads : thread_counts) {
    const std::shared_ptr<Backend> backend = make_backend(choice, backend_options(threads, where));
    const bool cpu = backend->kind() == BackendKind::cpu;
    backend_label = backend_name(backend->kind());
    device = cpu ? cat("cpu (", backend->info().threads, " threads)") : describe_device(*backend);
    model::LoadOptions load;
    load.context = *std::max_element(prefills.begin(), prefills.end()) +
                   *std::max_element(decodes.begin(), decodes.end()) + 1;
    load.max_batch = std::max(args.batch, most);  // a decode step of every sequence in one step
    load.sequences = most;
    load.progress = [&](double fraction, const std::string& name) {
      if (!quiet) progress.show(format("loading %3d%% %s", static_cast<int>(fraction * 100.0), name.c_str()));
    };
    model::LlamaModel llama(backend, *source, load);
    model::KvBlockPool& pool = llama.kv_pool();
    const auto max_rows = static_cast<size_t>(llama.max_step_rows());
    std::mt19937_64 rng(1234);
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(config.vocab_size - 1));
    // One run: prefill then decode; returns their seconds.
    auto run = [&](int64_t batch, int64_t prefill, int64_t decode) {
      std::vector<int32_t> sequences;
      std::vector<model::BatchRow> rows_of_prompts;
      for (int64_t b = 0; b < batch; ++b) {
        sequences.push_back(pool.add_sequence());
        for (int64_t i = 0; i < prefill; ++i) {
          rows_of_prompts.push_back({sequences.back(), pick(rng), static_cast<int32_t>(i), i + 1 == prefill});
        }
      }
      std::vector<int32_t> next;
      const double t0 = now_seconds();
      for (size_t first = 0; first < rows_of_prompts.size(); first += max_rows) {
        const size_t n = std::min(max_rows, rows_of_prompts.size() - first);
        const model::BatchResult r = llama.step(std::span(rows_of_prompts).subspan(first, n), false);
        next.insert(next.end(), r.argmax.begin(), r.argmax.end());
      }
      const double t1 = now_seconds();
      std::vector<model::BatchRow> step(static_cast<size_t>(batch));
      for (int64_t i = 0; i < decode; ++i) {
        for (int64_t b = 0; b < batch; ++b) {
          step[static_cast<size_t>(b)] = {sequences[static_cast<size_t>(b)], next[static_cast<size_t>(b)],
                                          static_cast<int32_t>(prefill + i), true};
        }
        const model::BatchResult r = llama.step(step, false);
        std::copy(r.argmax.begin(), r.argmax.end(), next.begin());
      }
      const double t2 = now_seconds();
      for (const int32_t sequence : sequences) pool.release(sequence);
      return std::pair<double, double>(t1 - t0, t2 - t1);
    };
    for (const int64_t batch : batches) {
      for (const int64_t prefill : prefills) {
        for (const int64_t decode : decodes) {
          ParallelRow row;
          row.threads = cpu ? backend->info().threads : static_cast<int>(threads);
          row.sequences = batch;
          row.prefill = prefill;
          row.decode = decode;
          // Warm-up: records the step graphs of this configuration's buckets.
          show(format("B=%lld pp%lld tg%lld: warming up", static_cast<long long>(batch),
                      static_cast<long long>(prefill), static_cast<long long>(decode)));
          run(batch, prefill, std::min<int64_t>(decode, 4));
          for (int rep = 0; rep < args.reps; ++rep) {
            show(format("B=%lld pp%lld tg%lld: rep %d/%d", static_cast<long long>(batch),
                        static_cast<long long>(prefill), static_cast<long long>(decode), rep + 1, args.reps));
            const auto [prefill_s, decode_s] = run(batch, prefill, decode);
            const auto b = static_cast<double>(batch);
            row.prefill_rates.push_back(b * static_cast<double>(prefill) / prefill_s);
            row.decode_rates.push_back(b * static_cast<double>(decode) / decode_s);
            row.total_rates.push_back(b * static_cast<double>(prefill + decode) / (prefill_s + decode_s));
          }
          rows.push_back(std::move(row));
        }
      }
    }
  }
  progress.clear();
  if (output == "json") {
    nlohmann::json j;
    j["build"] = {{"version", kVersion}, {"commit", kGitCommit}, {"backends", kBackends}};
    j["model"] = path.string();
    j["backend"] = backend_label;
    j["device_description"] = device;
    j["reps"] = args.reps;
    nlohmann::json results = nlohmann::json::array();
    for (const ParallelRow& r : rows) {
      results.push_back({{"threads", r.threads},
                         {"sequences", r.sequences},
                         {"prefill_tokens", r.prefill},
                         {"decode_tokens", r.decode},
                         {"prefill_tok_s", median(r.prefill_rates)},
                         {"decode_tok_s", median(r.decode_rates)},
                         {"decode_tok_s_runs", r.decode_rates},
                         {"total_tok_s", median(r.total_rates)}});
    }
    j["results"] = results;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("build:    %s\nmodel:    %s\n          %s\ndevice:   %s\n", build_line().c_str(), path.string().c_str(),
              config.describe().c_str(), device.c_str());
  std::printf(
      "runs:     %d reps: B prompts of random tokens prefilled, then greedy decode steps of all B\n"
      "          sequences (batched steps over the paged KV cache); aggregate tokens/s, mean ± sd\n\n",
      args.reps);
  const bool md = output == "md";
  std::printf(md ? "| B | pp | tg | prefill t/s | decode t/s | total t/s |\n| ---: | ---: | ---: | ---: | ---: | ---: |\n"
                 : "%6s %6s %6s %22s %22s %12s\n",
              "B", "pp", "tg", "prefill t/s", "decode t/s", "total t/s");
  for (const ParallelRow& r : rows) {
    const std::string pp = rate_text(r.prefill_rates), tg = rate_text(r.decode_rates);
    std::printf(md ? "| %lld | %lld | %lld | %s | %s | %.1f |\n" : "%6lld %6lld %6lld %22s %22s %12.1f\n",
                static_cast<long long>(r.sequences), static_cast<long long>(r.prefill),
                static_cast<long long>(r.decode), pp.c_str(), tg.c_str(), median(r.total_rates));
  }
  return 0;
}

int run_bench(const BenchArgs& args) {
  const char* where = "bench";
  constexpr int64_t kWarmUpSteps = 4;
  constexpr int64_t kMaxTokens = int64_t{1} << 20;
  const std::vector<int64_t> prefills = parse_list(args.prefill, "-p/--prefill", 1, kMaxTokens);
  const std::vector<int64_t> decodes = parse_list(args.decode, "-n/--decode", 1, kMaxTokens);
  const std::vector<int64_t> thread_counts = parse_list(args.threads, "-t/--threads", 0, 1024);
  check(args.reps >= 1, where, "-r/--reps must be at least 1, got ", args.reps);
  check(args.batch >= 1, where, "--batch must be at least 1, got ", args.batch);
  check(args.steps_per_graph >= 0, where, "--steps-per-graph must not be negative, got ",
        args.steps_per_graph);
  check(args.l2_prefetch_mib >= 0, where, "--l2-prefetch-mib must not be negative, got ",
        args.l2_prefetch_mib);
  check(args.output == "text" || args.output == "md" || args.output == "json", where,
        "-o/--output: expected text, md or json, got '", args.output, "'");
  const std::string output = args.json ? "json" : args.output;
  if (!args.parallel.empty()) return run_parallel_bench(args, output);
  const BackendChoice choice = parse_backend_choice(args.backend);
  const std::filesystem::path path = resolve_model(args.model, where);
  const std::unique_ptr<model::ModelSource> source = model::open_model(path);
  const model::LlamaConfig& config = source->config();
  const bool quiet = output != "text";

  BenchHeader header;
  header.model = path.string();
  header.config = config.describe();
  header.cpu_model = cpu_model_name();
  header.layers = config.layers;
  std::vector<BenchRow> rows;
  ProgressLine progress;
  auto show = [&](const std::string& text) {
    if (!quiet) progress.show(text, true);
  };
  for (const int64_t threads : thread_counts) {
    const std::shared_ptr<Backend> backend = make_backend(choice, backend_options(threads, where));
    const bool cpu = backend->kind() == BackendKind::cpu;
    header.backend = backend_name(backend->kind());
    // The CPU's thread count differs per row; the device line names the backend only.
    header.device = cpu ? std::string("cpu") : describe_device(*backend);
    header.device_name = backend->info().name;
    header.isa = backend->info().isa;
    const int used_threads = cpu ? backend->info().threads : static_cast<int>(threads);

    show("measuring memory bandwidth");
    const CopyBandwidth copy = measure_copy_bandwidth(backend);
    const ReadBandwidth read =
        cpu ? measure_read_bandwidth(std::max(1, used_threads)) : ReadBandwidth{};

    model::LoadOptions load;
    // The longest run, and room for the warm-up's kWarmUpSteps after the longest prefill.
    load.context = *std::max_element(prefills.begin(), prefills.end()) +
                   std::max(*std::max_element(decodes.begin(), decodes.end()), kWarmUpSteps) + 1;
    load.max_batch = args.batch;
    load.fed_steps_per_graph = args.steps_per_graph;
    load.l2_prefetch_bytes = static_cast<int64_t>(args.l2_prefetch_mib * (1 << 20));
    load.progress = [&](double fraction, const std::string& name) {
      if (!quiet)
        progress.show(format("loading %3d%% %s", static_cast<int>(fraction * 100.0), name.c_str()));
    };
    model::LlamaModel llama(backend, *source, load);
    header.weight_bytes = llama.weight_bytes();

    // Random prompt tokens (fixed seed, so runs are comparable).
    std::mt19937_64 rng(1234);
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(config.vocab_size - 1));
    auto random_tokens = [&](int64_t n) {
      std::vector<int32_t> tokens(static_cast<size_t>(n));
      for (int32_t& t : tokens) t = pick(rng);
      return tokens;
    };
    for (const int64_t prefill : prefills) {
      for (const int64_t decode : decodes) {
        BenchRow row;
        row.threads = used_threads;
        row.prefill = prefill;
        row.decode = decode;
        row.copy = copy;
        row.read = read;
        // Warm-up: a prefill of the measured length and a few decode steps. The first
        // prefill of a chunk length records its graph (and on CUDA sets up cuBLAS and
        // captures its products): that one-time cost is reported apart, not in the rates.
        show(format("t=%lld pp%lld tg%lld: warming up", static_cast<long long>(threads),
                    static_cast<long long>(prefill), static_cast<long long>(decode)));
        llama.reset();
        const double cold0 = now_seconds();
        int32_t token = model::argmax(llama.prefill(random_tokens(prefill)));
        row.prefill_cold_ms = (now_seconds() - cold0) * 1e3;
        token = llama.decode_greedy_run(token, kWarmUpSteps).back();  // records both decode graphs
        for (int rep = 0; rep < args.reps; ++rep) {
          show(format("t=%lld pp%lld tg%lld: rep %d/%d", static_cast<long long>(threads),
                      static_cast<long long>(prefill), static_cast<long long>(decode), rep + 1,
                      args.reps));
          llama.reset();
          const std::vector<int32_t> prompt = random_tokens(prefill);
          const double t0 = now_seconds();
          token = model::argmax(llama.prefill(prompt));
          const double t1 = now_seconds();
          // Greedy decode as `onepass generate` runs it: each step fed from the previous
          // one's argmax on the device, launched back to back.
          const std::vector<int32_t> generated = llama.decode_greedy_run(token, decode);
          if (!generated.empty()) token = generated.back();
          row.host_step_us.push_back(static_cast<double>(llama.last_step_host_ns()) * 1e-3);
          const double t2 = now_seconds();
          row.prefill_rates.push_back(static_cast<double>(prefill) / (t1 - t0));
          row.decode_rates.push_back(static_cast<double>(decode) / (t2 - t1));
        }
        row.dispatches = llama.decode_dispatches();
        // Decode step i attends over prefill + i + 1 cached tokens.
        row.average_kv = static_cast<double>(prefill) + static_cast<double>(decode + 1) / 2.0;
        row.kv_bytes = llama.kv_bytes_read(static_cast<int64_t>(row.average_kv + 0.5));
        row.bytes_per_token = llama.weight_bytes() + row.kv_bytes;
        row.floor_tok_s = copy.bytes_per_second / static_cast<double>(row.bytes_per_token);
        if (cpu)
          row.read_floor_tok_s = read.bytes_per_second / static_cast<double>(row.bytes_per_token);
        if (llama.decode_graph() != nullptr) row.stats = llama.decode_graph()->stats();
        rows.push_back(std::move(row));
      }
    }
  }
  progress.clear();

  if (output == "json") {
    nlohmann::json j;
    j["build"] = {{"version", kVersion}, {"commit", kGitCommit}, {"backends", kBackends}};
    j["model"] = header.model;
    j["config"] = header.config;
    j["backend"] = header.backend;
    j["device"] = header.device_name;
    j["device_description"] = header.device;
    if (header.backend == "cuda") j["gpu"] = header.device_name;
    j["cpu_model"] = header.cpu_model;
    if (!header.isa.empty()) j["isa"] = header.isa;
    j["reps"] = args.reps;
    nlohmann::json results = nlohmann::json::array();
    for (const BenchRow& r : rows) results.push_back(row_json(header, r, args.reps));
    // One configuration: its keys at the top level too, as scripts/bench-gpu reads them.
    if (rows.size() == 1) j.update(results[0]);
    j["results"] = results;
    std::printf("%s\n", j.dump(2).c_str());
  } else if (output == "md") {
    print_markdown(header, rows, args.reps);
  } else {
    print_text(header, rows, args.reps);
  }
  return 0;
}

}  // namespace

Command add_bench_command(CLI::App& parent) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* app = parent.add_subcommand(
      "bench", "Measure prefill and decode tokens/s and the memory-bandwidth floor");
  app->footer(
      "-p, -n and -t take comma lists (-p 128,512 -n 128 -t 1,2) and every combination is run.\n"
      "Decode is greedy (argmax on the device) after a prefill of random token ids; each rep "
      "starts\n"
      "from an empty cache. The floor is (weight bytes + KV bytes read at the average KV length) "
      "per\n"
      "token against a measured bandwidth: on the CPU a multi-threaded read of a 256 MiB buffer "
      "(the\n"
      "copy bandwidth is shown too), on CUDA the read + write bytes of a 1 GiB device copy.");
  app->add_option("-m,--model", args->model,
                  "GGUF file or MLX directory (default: the default model)");
  app->add_option("--backend", args->backend, "auto, cpu or cuda")->capture_default_str();
  app->add_option("-p,--prefill", args->prefill, "Prompt tokens per rep (comma list)")
      ->capture_default_str();
  app->add_option("-n,--decode", args->decode, "Decode steps per rep (comma list)")
      ->capture_default_str();
  app->add_option(
         "-t,--threads", args->threads,
         "CPU worker threads (comma list; 0: ONEPASS_THREADS, else one per hardware thread)")
      ->capture_default_str();
  app->add_option("-r,--reps", args->reps, "Repetitions per configuration")->capture_default_str();
  app->add_option("--parallel", args->parallel,
                  "Sequences decoded together (comma list): B prompts of -p tokens, then -n batched decode "
                  "steps; aggregate tokens/s (llama-batched-bench -npp P -ntg N -npl B)");
  app->add_option("--batch", args->batch, "Prompt tokens per prefill chunk")->capture_default_str();
  app->add_option("--steps-per-graph", args->steps_per_graph,
                  "Greedy decode steps recorded into one replayed graph (0: the backend's choice, 8 on CUDA, 1 on the CPU)")
      ->capture_default_str();
  app->add_option("--l2-prefetch-mib", args->l2_prefetch_mib,
                  "CUDA decode: MiB of each layer's gate/up weights requested into L2 during "
                  "attention (0: off)")
      ->capture_default_str();
  app->add_option("-o,--output", args->output, "text, md (a markdown table) or json")
      ->capture_default_str();
  app->add_flag("--json", args->json, "Print one JSON object (-o json)");
  return {app, [args] { return run_bench(*args); }};
}

}  // namespace onepass::cli
