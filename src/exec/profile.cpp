#include "onepass/exec/profile.h"

#include "onepass/exec/dispatch.h"

namespace onepass {

DispatchSample describe_dispatch(const Dispatch& d, uint32_t index) {
  DispatchSample s;
  s.kernel = d.name();
  s.label = d.label;
  s.op_kind = d.op_kind;
  s.index = index;
  s.dims = d.dims;
  if (d.moved_bytes > 0) {
    s.bytes_read = d.moved_bytes;
  } else {
    for (const MemRange& r : d.reads) s.bytes_read += r.size();
    for (const MemRange& r : d.writes) s.bytes_written += r.size();
  }
  return s;
}

Profiler& Profiler::global() {
  static Profiler profiler;
  return profiler;
}

void Profiler::record_submission(SubmissionSample sample) {
  std::lock_guard<std::mutex> lock(mutex_);
  submissions_.push_back(std::move(sample));
}

void Profiler::record_dispatch(DispatchSample sample) {
  std::lock_guard<std::mutex> lock(mutex_);
  dispatches_.push_back(std::move(sample));
}

std::vector<SubmissionSample> Profiler::submissions() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return submissions_;
}

std::vector<DispatchSample> Profiler::dispatches() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dispatches_;
}

void Profiler::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  submissions_.clear();
  dispatches_.clear();
}

}  // namespace onepass
