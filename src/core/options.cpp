#include "onepass/core/options.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "onepass/core/error.h"
#include "onepass/core/thread_pool.h"

namespace onepass {
namespace {

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && value[0] != '\0') ? value : nullptr;
}

// "1", "true", "on", "yes" -> true; "0", "false", "off", "no" -> false; unset -> fallback.
bool env_flag(const char* name, bool fallback) {
  const char* value = env(name);
  if (value == nullptr) return fallback;
  const std::string_view v(value);
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  fail("options", name, "='", v, "' is not a boolean (use 1 or 0)");
}

}  // namespace

Options Options::from_env() {
  Options o;
  o.auto_barrier = env_flag("ONEPASS_AUTO_BARRIER", o.auto_barrier);
  o.unretained_refs = env_flag("ONEPASS_UNRETAINED_REFS", o.unretained_refs);
  o.force_serial = env_flag("ONEPASS_FORCE_SERIAL", o.force_serial);
  o.pdl = env_flag("ONEPASS_PDL", o.pdl);
  o.cublas = env_flag("ONEPASS_CUBLAS", o.cublas);
  if (const char* schedule = env("ONEPASS_CPU_SCHEDULE")) {
    const std::string_view v(schedule);
    if (v == "sequential") {
      o.cpu_schedule = CpuSchedule::sequential;
    } else if (v == "concurrent") {
      o.cpu_schedule = CpuSchedule::concurrent;
    } else {
      fail("options", "ONEPASS_CPU_SCHEDULE='", v, "' must be sequential or concurrent");
    }
  }
  if (const char* threads = env("ONEPASS_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(threads, &end, 10);
    check(end != threads && *end == '\0' && n >= 0 && n <= 4096, "options",
          "ONEPASS_THREADS='", threads, "' must be a thread count (0 = all)");
    o.cpu_threads = static_cast<int>(n);
    if (o.cpu_threads > ThreadPool::max_threads()) {
      std::fprintf(stderr, "[options] ONEPASS_THREADS=%d is more than %d x the %d hardware threads; using %d\n",
                   o.cpu_threads, ThreadPool::kMaxThreadsPerHardwareThread, ThreadPool::hardware_threads(),
                   ThreadPool::max_threads());
      o.cpu_threads = ThreadPool::max_threads();
    }
  }
  o.fuse = !env_flag("ONEPASS_NO_FUSE", !o.fuse);
  o.reorder = !env_flag("ONEPASS_NO_REORDER", !o.reorder);
  o.dump_graph = env_flag("ONEPASS_DUMP_GRAPH", o.dump_graph);
  o.check_annotations = env_flag("ONEPASS_CHECK_ANNOTATIONS", o.check_annotations);
  o.graph_diag = env_flag("ONEPASS_GRAPH_DIAG", o.graph_diag);
  o.profile_submissions = env_flag("ONEPASS_PROFILE_CB", o.profile_submissions);
  o.profile_dispatches = env_flag("ONEPASS_PROFILE_DISPATCH", o.profile_dispatches);
  o.profile_barriers = env_flag("ONEPASS_PROFILE_BARRIERS", o.profile_barriers);
  return o;
}

const Options& Options::defaults() {
  static const Options options = from_env();
  return options;
}

std::string Options::describe() const {
  return cat("auto_barrier=", auto_barrier, " unretained_refs=", unretained_refs,
             " force_serial=", force_serial, " cpu_schedule=",
             cpu_schedule == CpuSchedule::sequential ? "sequential" : "concurrent",
             " cpu_threads=", cpu_threads, " pdl=", pdl, " cublas=", cublas, " fuse=", fuse, " reorder=", reorder,
             " dump_graph=", dump_graph, " check_annotations=", check_annotations,
             " graph_diag=", graph_diag, " profile_cb=", profile_submissions,
             " profile_dispatch=", profile_dispatches, " profile_barriers=", profile_barriers);
}

}  // namespace onepass
