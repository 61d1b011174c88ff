#include "onepass/exec/profile.h"

namespace onepass {

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
