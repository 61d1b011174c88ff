// Backend: a Device that can run kernels. The narrow interface every backend implements
// (allocate, kernel lookup, encode dispatch, encode barrier, submit, wait, timing).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "onepass/core/device.h"
#include "onepass/core/options.h"
#include "onepass/exec/dispatch.h"
#include "onepass/exec/fusion.h"
#include "onepass/exec/kernel.h"
#include "onepass/exec/kernel_choice.h"

namespace onepass {

/// How a submission reaches the device.
enum class SubmitMode : uint8_t {
  immediate,  // each dispatch is launched as it is appended (CUDA: on the stream)
  graph,      // dispatches and their ordering are collected and launched at commit as one
              // unit (CUDA: a CUDA graph, cached by topology)
};

/// A submission that can be launched again and again without re-encoding (a replayed
/// CUDA graph; on the CPU, the stored schedule).
class Executable {
 public:
  virtual ~Executable() = default;
  /// Starts one run.
  virtual void launch() = 0;
  /// Blocks until the last run has finished; throws Error on a device fault.
  virtual void wait() = 0;
  /// GPU time of the last run, when measured (set_timing(true) or profiling on).
  virtual std::optional<uint64_t> gpu_time_ns() const = 0;
  /// Measure the device time of each run (CUDA: an event pair per launch).
  virtual void set_timing(bool on) = 0;
  virtual size_t dispatch_count() const = 0;
};

/// One unit of submitted work (the seeds' command buffer). Dispatches are appended in
/// program order with one of two ordering disciplines, which must not be mixed:
///  - dispatch() + barrier(): a dispatch waits for everything before the last barrier;
///    dispatches between two barriers may run concurrently.
///  - dispatch_after(): a dispatch waits for exactly the listed earlier dispatches.
class Submission {
 public:
  virtual ~Submission() = default;
  virtual void dispatch(const Dispatch& d) = 0;
  /// `deps` are indices of earlier dispatches of this submission (0 = the first).
  virtual void dispatch_after(const Dispatch& d, std::span<const uint32_t> deps) = 0;
  virtual void barrier() = 0;
  /// Starts execution of everything appended. Called once.
  virtual void commit() = 0;
  /// Blocks until the committed work has finished; throws Error on a device fault.
  virtual void wait() = 0;
  /// GPU (device) time of the committed work, from `commit` to completion, when measured.
  virtual std::optional<uint64_t> gpu_time_ns() const = 0;
  /// Turns the appended work into a replayable executable instead of committing it.
  virtual std::unique_ptr<Executable> instantiate() = 0;
  virtual size_t dispatch_count() const = 0;
  /// Names the submission in profiles and traces.
  virtual void set_label(std::string_view label) = 0;
};

/// Backends run the submissions of one device in commit order (the seeds' command
/// queue): a submission committed later starts after an earlier one has finished.
/// How a backend turned graph-mode submissions into executable graphs.
struct GraphCacheStats {
  uint64_t instantiated = 0;  // built from scratch
  uint64_t updated = 0;       // same topology: an existing one updated in place
};

class Backend : public Device {
 public:
  /// Kernels this backend can run.
  virtual const KernelRegistry& registry() const = 0;
  /// The kernel and launch shape this backend runs for an op (its selector for
  /// request.op); a choice without a kernel when it has none for that op. This is the one
  /// place where a backend's kernel choice is made.
  KernelChoice choose_kernel(const KernelRequest& request) const;
  /// Selectors by op, filled when the backend is created.
  KernelSelectors& selectors() { return selectors_; }
  /// A new, empty submission. `label` names it in profiles and traces.
  virtual std::unique_ptr<Submission> new_submission(SubmitMode mode, std::string_view label) = 0;

  /// Graph instantiation statistics (backends without graphs report zeros).
  virtual GraphCacheStats graph_cache_stats() const { return {}; }

  // --- kernels added to a live backend ------------------------------------------------
  /// Registers `kernel` and prepares it as the backend's own kernels are (CUDA: its
  /// function attributes); the tests add their synthetic kernels this way. Throws Error
  /// when the name is taken. Not to be called while other threads use the backend.
  virtual void add_kernel(Kernel kernel) = 0;
  // ------------------------------------------------------------------------------------

  const Options& options() const { return options_; }
  void set_options(const Options& options) { options_ = options; }
  /// Fusion rules the graph passes may apply on this backend (filled by the ops layer
  /// when the backend is created).
  FusionRules& fusion_rules() { return fusion_rules_; }
  const FusionRules& fusion_rules() const { return fusion_rules_; }

 protected:
  explicit Backend(const Options& options) : options_(options) {}

 private:
  Options options_;
  FusionRules fusion_rules_;
  KernelSelectors selectors_;
};

}  // namespace onepass
