#include "common.h"
#include "onepass/ops/ops.h"
#include "onepass/exec/graph_session.h"
#include "onepass/exec/captured_graph.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdarg>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "onepass/core/error.h"

namespace onepass::cli {
namespace {

// Progress lines drawn right now, so an error can erase them before printing.
std::vector<ProgressLine*>& live_lines() {
  static std::vector<ProgressLine*> lines;
  return lines;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::filesystem::path executable_path() {
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : exe;
}

}  // namespace

void check_integer_options(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    const std::string type = option->get_type_name();
    if (type != "INT" && type != "UINT") continue;
    const bool is_unsigned = type == "UINT";
    option->check(CLI::Validator(
        [is_unsigned](std::string& text) -> std::string {
          const char* first = text.data();
          const char* last = text.data() + text.size();
          std::from_chars_result result{};
          if (is_unsigned) {
            uint64_t value = 0;
            result = std::from_chars(first, last, value);
          } else {
            int64_t value = 0;
            result = std::from_chars(first, last, value);
          }
          if (result.ec == std::errc::result_out_of_range) {
            return cat("value out of range ('", text, "'; expected ",
                       is_unsigned ? "0.." + std::to_string(UINT64_MAX)
                                   : std::to_string(INT64_MIN) + ".." + std::to_string(INT64_MAX),
                       ")");
          }
          if (result.ec != std::errc() || result.ptr != last) {
            return cat("'", text, "' is not a ", is_unsigned ? "non-negative " : "",
                       "decimal whole number");
          }
          return "";
        },
        "", "integer"));
  }
  for (CLI::App* sub : app.get_subcommands({})) check_integer_options(*sub);
}

std::string closest_name(const std::string& given, const std::vector<std::string>& names) {
  // Levenshtein distance, one row at a time.
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diagonal = up;
      }
    }
    return row[b.size()];
  };
  std::string best;
  size_t best_distance = 3;  // a typo: at most two edits
  for (const std::string& name : names) {
    const size_t d = distance(given, name);
    if (d < best_distance || (given.size() >= 3 && name.rfind(given, 0) == 0 && best.empty())) {
      best = name;
      best_distance = std::min(d, best_distance);
    }
  }
  return best;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

std::string printable(std::string_view text, bool newlines) {
  std::string out;
  out.reserve(text.size());
  auto escape = [&](unsigned char byte) { out += format("\\x%02x", byte); };
  for (size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x80) {
      if ((byte < 0x20 && !(newlines && byte == '\n')) || byte == 0x7f) {
        escape(byte);
      } else {
        out += static_cast<char>(byte);
      }
      ++i;
      continue;
    }
    // A well-formed UTF-8 sequence of a printable code point is kept; C1 controls
    // (U+0080..U+009F, which some terminals obey) and malformed bytes are escaped.
    size_t length = 0;
    if (byte >= 0xC2 && byte <= 0xDF) length = 2;
    if (byte >= 0xE0 && byte <= 0xEF) length = 3;
    if (byte >= 0xF0 && byte <= 0xF4) length = 4;
    bool valid = length > 0 && i + length <= text.size();
    uint32_t code = 0;
    if (valid) {
      code = byte & (0x7F >> length);
      for (size_t k = 1; k < length && valid; ++k) {
        const auto next = static_cast<unsigned char>(text[i + k]);
        valid = (next & 0xC0) == 0x80;
        code = (code << 6) | (next & 0x3F);
      }
      const uint32_t min_code = length == 2 ? 0x80 : length == 3 ? 0x800 : 0x10000;
      valid = valid && code >= min_code && code <= 0x10FFFF && !(code >= 0xD800 && code <= 0xDFFF);
    }
    if (valid && code >= 0xA0) {
      out.append(text.substr(i, length));
      i += length;
    } else if (valid) {  // C1 control
      for (size_t k = 0; k < length; ++k) escape(static_cast<unsigned char>(text[i + k]));
      i += length;
    } else {
      escape(byte);
      ++i;
    }
  }
  return out;
}

std::filesystem::path resolve_model(const std::string& given, std::string_view command) {
  if (!given.empty()) return given;
  std::vector<std::filesystem::path> candidates = {std::filesystem::path(kDefaultModel)};
  if (const std::filesystem::path exe = executable_path(); !exe.empty()) {
    candidates.push_back(exe.parent_path() / "../.." / kDefaultModel);
  }
  std::error_code ec;
  for (const std::filesystem::path& p : candidates) {
    if (std::filesystem::is_regular_file(p, ec)) return p.lexically_normal();
  }
  std::string looked;
  for (const std::filesystem::path& p : candidates) {
    looked +=
        (looked.empty() ? "" : ", ") + std::filesystem::absolute(p, ec).lexically_normal().string();
  }
  fail(command, "no model given and the default model ", kDefaultModel,
       " is not installed (looked at ", looked,
       "); run scripts/setup to download it, or pass -m MODEL");
}

std::string describe_device(const Backend& backend) {
  const DeviceInfo& info = backend.info();
  if (info.kind == BackendKind::cpu) return cat(backend_name(info.kind), ": ", info.name);
  return format("%s: %s (sm_%d%d, %d SMs, %.1f GiB)", backend_name(info.kind), info.name.c_str(),
                info.compute_major, info.compute_minor, info.multiprocessors,
                static_cast<double>(info.total_memory) / (1u << 30));
}

void ProgressLine::show(const std::string& text, bool force) {
  static const bool terminal = isatty(STDERR_FILENO) != 0;
  if (!terminal) return;
  const int64_t now = now_ns();
  if (!force && drawn_ && now - last_ns_ < 50'000'000) return;
  last_ns_ = now;
  std::fprintf(stderr, "\r%s\033[K", text.c_str());
  std::fflush(stderr);
  if (!drawn_) live_lines().push_back(this);
  drawn_ = true;
}

void ProgressLine::clear() {
  if (!drawn_) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  drawn_ = false;
  auto& lines = live_lines();
  lines.erase(std::remove(lines.begin(), lines.end(), this), lines.end());
}

void clear_progress_lines() {
  while (!live_lines().empty()) live_lines().back()->clear();
}

std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, args);
  va_end(args);
  return out;
}

std::string format_bytes(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1e9) return format("%.2f GB", b / 1e9);
  if (b >= 1e6) return format("%.1f MB", b / 1e6);
  if (b >= 1e3) return format("%.1f kB", b / 1e3);
  return format("%llu B", static_cast<unsigned long long>(bytes));
}

std::string format_count(uint64_t count) {
  const double c = static_cast<double>(count);
  if (c >= 1e9) return format("%.2fB", c / 1e9);
  if (c >= 1e6) return format("%.1fM", c / 1e6);
  if (c >= 1e3) return format("%.1fK", c / 1e3);
  return std::to_string(count);
}

std::string format_grouped(uint64_t value) {
  std::string digits = std::to_string(value);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double mean(const std::vector<double>& values) {
  if (values.empty()) return 0.0;
  double total = 0.0;
  for (const double v : values) total += v;
  return total / static_cast<double>(values.size());
}

double stddev(const std::vector<double>& values) {
  if (values.size() < 2) return 0.0;
  const double m = mean(values);
  double squares = 0.0;
  for (const double v : values) squares += (v - m) * (v - m);
  return std::sqrt(squares / static_cast<double>(values.size() - 1));
}

void add_threads_option(CLI::App& app, int64_t& threads) {
  app.add_option("-t,--threads", threads,
                 "CPU worker threads (default: ONEPASS_THREADS, else one per hardware thread)");
}

Options backend_options(int64_t threads, std::string_view where) {
  constexpr int64_t kMaxThreads = 1024;
  check(threads >= 0 && threads <= kMaxThreads, where, "-t/--threads: expected 1..", kMaxThreads,
        ", got ", threads);
  Options options = Options::defaults();
  if (threads > 0) options.cpu_threads = static_cast<int>(threads);
  return options;
}

void add_sampling_options(CLI::App& app, SamplingArgs& args) {
  args.seed_option = app.add_option("-s,--seed", args.seed, "Sampling seed (default: random)");
  app.add_option("--temp", args.temperature, "Sampling temperature; 0 = greedy")->capture_default_str();
  app.add_option("--top-k", args.top_k, "Keep the k most likely tokens; 0 = all")->capture_default_str();
  app.add_option("--top-p", args.top_p, "Keep the smallest set reaching probability p; 1 = all")
      ->capture_default_str();
  app.add_option("--min-p", args.min_p,
                 "Keep tokens at least this fraction as likely as the most likely one; 0 = all")
      ->capture_default_str();
  app.add_option("--repeat-penalty", args.repeat_penalty,
                 "Penalise the last --repeat-last-n tokens (logit / p, or * p when negative); 1 = off")
      ->capture_default_str();
  app.add_option("--presence-penalty", args.presence_penalty,
                 "Subtract this from the logit of every token among the last --repeat-last-n; 0 = off")
      ->capture_default_str();
  app.add_option("--frequency-penalty", args.frequency_penalty,
                 "Subtract this times its count from the logit of each token among the last --repeat-last-n; 0 = off")
      ->capture_default_str();
  app.add_option("--repeat-last-n", args.repeat_last_n, "Tokens the penalties look back at")
      ->capture_default_str();
}

model::SamplerOptions sampler_options(const SamplingArgs& args, std::string_view where) {
  check(std::isfinite(args.temperature) && args.temperature >= 0.0f, where,
        "--temp: expected a number >= 0 (0 = greedy), got ", args.temperature);
  check(args.top_k >= 0, where, "--top-k: expected a whole number >= 0 (0 = all), got ", args.top_k);
  check(args.top_p > 0.0f && args.top_p <= 1.0f, where, "--top-p: expected a number in (0, 1], got ",
        args.top_p);
  check(args.min_p >= 0.0f && args.min_p <= 1.0f, where, "--min-p: expected a number in [0, 1], got ",
        args.min_p);
  check(std::isfinite(args.repeat_penalty) && args.repeat_penalty > 0.0f, where,
        "--repeat-penalty: expected a number above 0 (1 = off), got ", args.repeat_penalty);
  check(std::isfinite(args.presence_penalty) && std::abs(args.presence_penalty) <= 2.0f, where,
        "--presence-penalty: expected a number in [-2, 2] (0 = off), got ", args.presence_penalty);
  check(std::isfinite(args.frequency_penalty) && std::abs(args.frequency_penalty) <= 2.0f, where,
        "--frequency-penalty: expected a number in [-2, 2] (0 = off), got ", args.frequency_penalty);
  check(args.repeat_last_n >= 0, where, "--repeat-last-n: expected a whole number >= 0, got ",
        args.repeat_last_n);
  model::SamplerOptions options;
  options.temperature = args.temperature;
  options.top_k = args.top_k;
  options.top_p = args.top_p;
  options.min_p = args.min_p;
  options.repeat_penalty = args.repeat_penalty;
  options.presence_penalty = args.presence_penalty;
  options.frequency_penalty = args.frequency_penalty;
  options.repeat_last_n = args.repeat_last_n;
  const bool seeded = args.seed_option != nullptr && args.seed_option->count() > 0;
  options.seed = seeded ? args.seed : std::random_device{}();
  options.validate();
  return options;
}

std::string describe_sampling(const model::SamplerOptions& o) {
  std::string text = o.greedy() ? std::string("greedy")
                                : format("temperature %.2f, top-k %d, top-p %.2f, min-p %.2f, seed %llu",
                                         o.temperature, o.top_k, o.top_p, o.min_p,
                                         static_cast<unsigned long long>(o.seed));
  if (o.penalizes()) {
    text += format(", penalties over the last %d tokens: repeat %.2f, presence %.2f, frequency %.2f",
                   o.repeat_last_n, o.repeat_penalty, o.presence_penalty, o.frequency_penalty);
  }
  return text;
}

double now_seconds() {
  return static_cast<double>(now_ns()) * 1e-9;
}

CopyBandwidth measure_copy_bandwidth(const std::shared_ptr<Backend>& backend) {
  CopyBandwidth result;
  const bool cuda = backend->kind() == BackendKind::cuda;
  result.bytes = cuda ? (size_t{1} << 30) : (size_t{256} << 20);
  const BufferView src = backend->alloc(result.bytes);
  const BufferView dst = backend->alloc(result.bytes);
  src.fill(0x5A);  // never time on untouched (zero) pages
  dst.fill(0xA5);
  GraphExecutor executor(backend);
  GraphSession session = executor.begin_recorded();
  ops::copy_bytes(session, src, dst);
  CapturedGraph graph(*backend, session.take_graph());
  graph.set_timing(cuda);
  graph.run();  // warm-up
  std::vector<double> rates;
  for (int i = 0; i < 7; ++i) {
    const double start = now_seconds();
    graph.run();
    double seconds = now_seconds() - start;
    if (cuda) {
      if (const std::optional<uint64_t> ns = graph.gpu_time_ns(); ns && *ns > 0) {
        seconds = static_cast<double>(*ns) * 1e-9;
        result.device_timed = true;
      }
    }
    rates.push_back(2.0 * static_cast<double>(result.bytes) / seconds);
  }
  result.bytes_per_second = median(rates);
  return result;
}

}  // namespace onepass::cli
