// Profile records: per-submission GPU times by label and per-dispatch timestamps, fed by
// the backends when Options::profile_submissions / profile_dispatches are on.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "onepass/exec/kernel.h"
#include "onepass/exec/op_kind.h"

namespace onepass {

struct SubmissionSample {
  std::string label;
  uint64_t gpu_ns = 0;
};

struct DispatchSample {
  std::string submission;  // label of the submission it ran in
  std::string kernel;
  std::string label;
  OpKind op_kind = OpKind::other;
  uint32_t index = 0;      // position in the submission
  uint32_t lane = 0;       // concurrent branch / stream it was placed on
  uint64_t start_ns = 0;   // device timestamps relative to the submission's start
  uint64_t end_ns = 0;
  uint64_t bytes_read = 0;     // declared read ranges
  uint64_t bytes_written = 0;  // declared write ranges
  LaunchDims dims;
};

struct Dispatch;

/// A sample describing `d` (kernel, label, kind, launch shape, bytes moved); the caller
/// fills in the times and the submission.
DispatchSample describe_dispatch(const Dispatch& d, uint32_t index);

/// Process-wide store of profile samples. Thread-safe.
class Profiler {
 public:
  static Profiler& global();

  void record_submission(SubmissionSample sample);
  void record_dispatch(DispatchSample sample);
  std::vector<SubmissionSample> submissions() const;
  std::vector<DispatchSample> dispatches() const;
  void clear();

 private:
  mutable std::mutex mutex_;
  std::vector<SubmissionSample> submissions_;
  std::vector<DispatchSample> dispatches_;
};

}  // namespace onepass
