#include "onepass/exec/profile_report.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

namespace onepass {

ProfileReport make_profile_report(const std::vector<DispatchSample>& samples, ProfileGroup group,
                                  double step_ns, uint64_t steps, double copy_gbps) {
  ProfileReport report;
  report.step_us = step_ns / 1e3;
  report.steps = steps;
  report.copy_gbps = copy_gbps;
  std::map<std::string, ProfileRow> rows;
  for (const DispatchSample& s : samples) {
    std::string key;
    switch (group) {
      case ProfileGroup::op_kind: key = op_kind_name(s.op_kind); break;
      case ProfileGroup::label: key = s.label.empty() ? s.kernel : s.label; break;
      case ProfileGroup::kernel: key = s.kernel; break;
    }
    ProfileRow& r = rows[key];
    r.name = key;
    ++r.count;
    const double us = static_cast<double>(s.end_ns > s.start_ns ? s.end_ns - s.start_ns : 0) / 1e3;
    r.total_us += us;
    r.bytes += static_cast<double>(s.bytes_read + s.bytes_written);
    report.dispatch_us += us;
    ++report.dispatches;
  }
  // Busy time: the union of the dispatch intervals, per submission run.
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const DispatchSample& s : samples) spans.emplace_back(s.start_ns, std::max(s.end_ns, s.start_ns));
  std::sort(spans.begin(), spans.end());
  uint64_t busy = 0, cur_start = 0, cur_end = 0;
  bool open = false;
  for (const auto& [a, b] : spans) {
    if (!open || a > cur_end) {
      if (open) busy += cur_end - cur_start;
      cur_start = a;
      cur_end = b;
      open = true;
    } else {
      cur_end = std::max(cur_end, b);
    }
  }
  if (open) busy += cur_end - cur_start;
  report.busy_us = static_cast<double>(busy) / 1e3;
  // Several runs share relative timestamps: the union over-merges them; bound by sums.
  report.busy_us = std::min(report.busy_us * static_cast<double>(std::max<uint64_t>(steps, 1)), report.dispatch_us);
  for (auto& [key, r] : rows) {
    r.percent = report.step_us > 0 ? 100.0 * r.total_us / report.step_us : 0;
    r.gbps = r.total_us > 0 ? r.bytes / (r.total_us * 1e3) : 0;
    r.percent_bw = copy_gbps > 0 ? 100.0 * r.gbps / copy_gbps : 0;
    report.rows.push_back(r);
  }
  std::sort(report.rows.begin(), report.rows.end(),
            [](const ProfileRow& a, const ProfileRow& b) { return a.total_us > b.total_us; });
  return report;
}

std::string ProfileReport::table(const std::string& title) const {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%s: %llu dispatches over %llu step(s), step %.1f us\n", title.c_str(),
                static_cast<unsigned long long>(dispatches), static_cast<unsigned long long>(steps),
                steps ? step_us / static_cast<double>(steps) : step_us);
  out += line;
  std::snprintf(line, sizeof line, "%-22s %7s %11s %7s %9s %7s\n", "op", "count", "total us", "% step", "GB/s",
                copy_gbps > 0 ? "% copy" : "");
  out += line;
  for (const ProfileRow& r : rows) {
    if (copy_gbps > 0) {
      std::snprintf(line, sizeof line, "%-22s %7llu %11.1f %6.1f%% %9.1f %6.1f%%\n", r.name.c_str(),
                    static_cast<unsigned long long>(r.count), r.total_us, r.percent, r.gbps, r.percent_bw);
    } else {
      std::snprintf(line, sizeof line, "%-22s %7llu %11.1f %6.1f%% %9.1f\n", r.name.c_str(),
                    static_cast<unsigned long long>(r.count), r.total_us, r.percent, r.gbps);
    }
    out += line;
  }
  std::snprintf(line, sizeof line, "%-22s %7llu %11.1f %6.1f%%   (busy %.1f us, idle/gaps %.1f us)\n", "total",
                static_cast<unsigned long long>(dispatches), dispatch_us,
                step_us > 0 ? 100.0 * dispatch_us / step_us : 0.0, busy_us, std::max(0.0, step_us - busy_us));
  out += line;
  if (copy_gbps > 0) {
    std::snprintf(line, sizeof line, "copy bandwidth (read+write): %.1f GB/s\n", copy_gbps);
    out += line;
  }
  return out;
}

std::vector<uint32_t> assign_lanes(const std::vector<DispatchSample>& samples) {
  std::vector<size_t> order(samples.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (samples[a].submission != samples[b].submission) return samples[a].submission < samples[b].submission;
    return samples[a].start_ns < samples[b].start_ns;
  });
  std::vector<uint32_t> lanes(samples.size(), 0);
  std::vector<uint64_t> lane_end;
  std::string submission;
  for (size_t i : order) {
    if (samples[i].submission != submission) {
      submission = samples[i].submission;
      lane_end.clear();
    }
    uint32_t lane = 0;
    while (lane < lane_end.size() && lane_end[lane] > samples[i].start_ns) ++lane;
    if (lane == lane_end.size()) lane_end.push_back(0);
    lane_end[lane] = std::max(samples[i].end_ns, samples[i].start_ns);
    lanes[i] = lane;
  }
  return lanes;
}

std::string chrome_trace_json(const std::vector<DispatchSample>& samples, const std::string& process_name) {
  const std::vector<uint32_t> lanes = assign_lanes(samples);
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", process_name}}}});
  uint32_t max_lane = 0;
  for (uint32_t l : lanes) max_lane = std::max(max_lane, l);
  for (uint32_t l = 0; l <= max_lane && !samples.empty(); ++l) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", l},
                      {"args", {{"name", "lane " + std::to_string(l)}}}});
  }
  for (size_t i = 0; i < samples.size(); ++i) {
    const DispatchSample& s = samples[i];
    const double dur = static_cast<double>(s.end_ns > s.start_ns ? s.end_ns - s.start_ns : 0) / 1e3;
    events.push_back({{"name", s.label.empty() ? s.kernel : s.label},
                      {"cat", op_kind_name(s.op_kind)},
                      {"ph", "X"},
                      {"pid", 1},
                      {"tid", lanes[i]},
                      {"ts", static_cast<double>(s.start_ns) / 1e3},
                      {"dur", dur},
                      {"args",
                       {{"kernel", s.kernel},
                        {"op_kind", op_kind_name(s.op_kind)},
                        {"submission", s.submission},
                        {"index", s.index},
                        {"grid", {s.dims.grid.x, s.dims.grid.y, s.dims.grid.z}},
                        {"block", {s.dims.block.x, s.dims.block.y, s.dims.block.z}},
                        {"shared_bytes", s.dims.shared_bytes},
                        {"bytes_read", s.bytes_read},
                        {"bytes_written", s.bytes_written}}}});
  }
  nlohmann::json trace = {{"traceEvents", events}, {"displayTimeUnit", "ns"}};
  return trace.dump();
}

}  // namespace onepass
