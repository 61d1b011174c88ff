// Reports over profile samples: per-op tables with achieved bandwidth against the copy
// bandwidth (a roofline per op kind), and Chrome/Perfetto traces of a pass.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "onepass/exec/profile.h"

namespace onepass {

enum class ProfileGroup { op_kind, label, kernel };

struct ProfileRow {
  std::string name;
  uint64_t count = 0;
  double total_us = 0;   // sum of dispatch durations
  double percent = 0;    // of the step time
  double bytes = 0;      // declared reads + writes
  double gbps = 0;       // bytes / total time
  double percent_bw = 0;  // of the copy bandwidth (0 when unknown)
};

struct ProfileReport {
  std::vector<ProfileRow> rows;  // slowest first
  double step_us = 0;            // wall (device) time of the step(s)
  double busy_us = 0;            // time covered by at least one dispatch
  double dispatch_us = 0;        // sum of all dispatch durations
  uint64_t dispatches = 0;
  uint64_t steps = 0;
  double copy_gbps = 0;

  /// The table, one row per group, then totals (idle = step - busy).
  std::string table(const std::string& title) const;
};

/// Aggregates `samples` of `steps` runs whose device time totals `step_ns`; `copy_gbps`
/// (read+write, GB/s) gives the bandwidth percentage (0 to omit).
ProfileReport make_profile_report(const std::vector<DispatchSample>& samples, ProfileGroup group,
                                  double step_ns, uint64_t steps, double copy_gbps);

/// Lanes for a trace: dispatches that overlap in time get different lanes (greedy, by
/// start time). Returns one lane per sample, in sample order.
std::vector<uint32_t> assign_lanes(const std::vector<DispatchSample>& samples);

/// Chrome trace event format (JSON, opens in chrome://tracing and ui.perfetto.dev): one
/// complete event per dispatch with its kernel, label, op kind, launch dims and bytes,
/// one row ("thread") per concurrent lane.
std::string chrome_trace_json(const std::vector<DispatchSample>& samples, const std::string& process_name);

}  // namespace onepass
