#include "common.h"
#include "onepass/ops/ops.h"
#include "onepass/exec/graph_session.h"
#include "onepass/exec/captured_graph.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
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
