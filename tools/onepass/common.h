// Shared pieces of the `onepass` command-line tool: subcommand registration, model and
// backend lookup, the stderr progress line, number formatting.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "onepass/core/options.h"
#include "onepass/exec/backend.h"
#include "onepass/model/sampler.h"

namespace onepass::cli {

/// A subcommand: its CLI11 app and what to run when it was given. `run` throws
/// onepass::Error on failure and returns the exit status.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_generate_command(CLI::App& parent);
Command add_inspect_command(CLI::App& parent);
Command add_make_model_command(CLI::App& parent);
Command add_bench_command(CLI::App& parent);
Command add_profile_command(CLI::App& parent);
Command add_perplexity_command(CLI::App& parent);
Command add_chat_command(CLI::App& parent);
Command add_serve_command(CLI::App& parent);

/// Adds -t/--threads (CPU worker threads) to a command that runs a model.
void add_threads_option(CLI::App& app, int64_t& threads);
/// Options::defaults() (ONEPASS_* environment) with -t applied when given (> 0); throws
/// Error naming `where` for a count out of range.
Options backend_options(int64_t threads, std::string_view where);

/// The sampling options of generate and chat, as given on the command line.
struct SamplingArgs {
  float temperature = 0.0f;  // greedy: deterministic, and what small models answer best with
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.0f;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t repeat_last_n = 64;
  uint64_t seed = 0;
  CLI::Option* seed_option = nullptr;
};
/// Adds -s/--seed, --temp, --top-k, --top-p, --min-p, --repeat-penalty, --presence-penalty,
/// --frequency-penalty, --repeat-last-n.
void add_sampling_options(CLI::App& app, SamplingArgs& args);
/// The sampler options of `args` (a random seed unless --seed was given); throws Error
/// naming `where` and the option for a value out of range (--temp -1, --top-p 2).
model::SamplerOptions sampler_options(const SamplingArgs& args, std::string_view where);
/// "greedy" or "temperature 0.80, top-k 40, ..." for --verbose.
std::string describe_sampling(const model::SamplerOptions& options);

/// Adds to every integer option of `app` and its subcommands a check of the text before
/// CLI11 converts it (CLI11 saturates out-of-range 64-bit values silently and reads "0x"
/// and leading-zero numbers as hex and octal): a decimal whole number within the option's
/// 64-bit range, else "value out of range" / "not a whole number".
void check_integer_options(CLI::App& app);

/// The name in `names` within a small edit distance of `given` (a typo), or "".
std::string closest_name(const std::string& given, const std::vector<std::string>& names);
/// "a, b, c".
std::string join(const std::vector<std::string>& names);

/// `text` safe to print on a terminal: control characters (C0, DEL, C1) and bytes that are
/// not UTF-8 become \xNN escapes, so a file cannot move the cursor, clear the screen or set
/// the window title. `newlines`: keep '\n' as is (multi-line text).
std::string printable(std::string_view text, bool newlines = true);

/// The model installed by scripts/setup, relative to the repository root.
inline constexpr std::string_view kDefaultModel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// `given` when not empty; otherwise the default model, looked up relative to the current
/// directory and to the executable's ../../models/ (build*/bin/onepass in a checkout).
/// Throws Error (naming `command`) saying how to get it when it is nowhere.
std::filesystem::path resolve_model(const std::string& given, std::string_view command);

/// "cpu: cpu (2 threads)" / "cuda: NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)".
std::string describe_device(const Backend& backend);

/// A status line on stderr, redrawn in place ("\r...\033[K"). Drawn only when stderr is a
/// terminal, so logs and tests see no carriage returns; at most ~20 redraws a second.
class ProgressLine {
 public:
  void show(const std::string& text, bool force = false);
  /// Erases the line (if drawn).
  void clear();
  ~ProgressLine() { clear(); }

 private:
  bool drawn_ = false;
  int64_t last_ns_ = 0;
};

/// Erases any progress line still drawn (before an error message is printed).
void clear_progress_lines();

/// 97.8 MB / 2.48 GB (powers of 1000, as model sizes are quoted).
std::string format_bytes(uint64_t bytes);
/// 134.5M / 1.24B / 35.3K.
std::string format_count(uint64_t count);
/// 98,362,432.
std::string format_grouped(uint64_t value);
/// printf into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

/// Median of `values` (0 when empty).
double median(std::vector<double> values);
/// Arithmetic mean and sample standard deviation (n - 1; 0 for fewer than two values).
double mean(const std::vector<double>& values);
double stddev(const std::vector<double>& values);

struct CopyBandwidth {
  uint64_t bytes = 0;           // bytes copied per run
  double bytes_per_second = 0;  // (read + write) bytes / s, median
  bool device_timed = false;    // timed with device events (CUDA) or on the host
};

/// The copy bandwidth decode floors are measured against: a large device-to-device copy
/// through the library's own copy kernel, replayed as a captured graph, counting the bytes
/// read plus the bytes written (median of 7 after a warm-up).
CopyBandwidth measure_copy_bandwidth(const std::shared_ptr<Backend>& backend);
/// Seconds since an arbitrary epoch (steady clock).
double now_seconds();

}  // namespace onepass::cli
