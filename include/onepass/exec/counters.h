// Process-wide counters of the execution core (the seeds' SYNC_COUNT, DISPATCH_COUNT, ...).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace onepass {

struct Counters {
  uint64_t syncs = 0;                  // waits for submitted work (commit_and_wait, wait)
  uint64_t dispatches = 0;             // kernel launches handed to a backend (replays too)
  uint64_t submissions = 0;            // commits and replay launches
  uint64_t barriers = 0;               // barriers handed to a backend
  uint64_t auto_barriers = 0;          // barriers emitted by tracked dispatch
  uint64_t concurrent_dispatches = 0;  // tracked dispatches that joined the open group
  uint64_t barrier_ns = 0;             // host time in memory_barrier (profile_barriers on)

  std::string describe() const;
};

/// A snapshot of the counters.
Counters counters();
void reset_counters();

namespace detail {
struct AtomicCounters {
  std::atomic<uint64_t> syncs{0};
  std::atomic<uint64_t> dispatches{0};
  std::atomic<uint64_t> submissions{0};
  std::atomic<uint64_t> barriers{0};
  std::atomic<uint64_t> auto_barriers{0};
  std::atomic<uint64_t> concurrent_dispatches{0};
  std::atomic<uint64_t> barrier_ns{0};
};
AtomicCounters& global_counters();
inline void bump(std::atomic<uint64_t>& c, uint64_t n = 1) {
  c.fetch_add(n, std::memory_order_relaxed);
}
}  // namespace detail

}  // namespace onepass
