// A named range on the timeline of profilers: NVTX (Nsight Systems / Compute) when built
// with CUDA, nothing otherwise. Costs a few nanoseconds when no tool is attached.
#pragma once

namespace onepass {

class TraceRange {
 public:
  explicit TraceRange(const char* name);
  ~TraceRange();
  TraceRange(const TraceRange&) = delete;
  TraceRange& operator=(const TraceRange&) = delete;
};

}  // namespace onepass
