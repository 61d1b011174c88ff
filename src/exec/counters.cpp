#include "onepass/exec/counters.h"

#include "onepass/core/error.h"

namespace onepass {

namespace detail {
AtomicCounters& global_counters() {
  static AtomicCounters counters;
  return counters;
}
}  // namespace detail

Counters counters() {
  const auto& c = detail::global_counters();
  Counters out;
  out.syncs = c.syncs.load(std::memory_order_relaxed);
  out.dispatches = c.dispatches.load(std::memory_order_relaxed);
  out.submissions = c.submissions.load(std::memory_order_relaxed);
  out.barriers = c.barriers.load(std::memory_order_relaxed);
  out.auto_barriers = c.auto_barriers.load(std::memory_order_relaxed);
  out.concurrent_dispatches = c.concurrent_dispatches.load(std::memory_order_relaxed);
  out.barrier_ns = c.barrier_ns.load(std::memory_order_relaxed);
  return out;
}

void reset_counters() {
  auto& c = detail::global_counters();
  for (auto* counter : {&c.syncs, &c.dispatches, &c.submissions, &c.barriers, &c.auto_barriers,
                        &c.concurrent_dispatches, &c.barrier_ns}) {
    counter->store(0, std::memory_order_relaxed);
  }
}

std::string Counters::describe() const {
  return cat("syncs=", syncs, " dispatches=", dispatches, " submissions=", submissions,
             " barriers=", barriers, " auto_barriers=", auto_barriers,
             " concurrent=", concurrent_dispatches, " barrier_ns=", barrier_ns);
}

}  // namespace onepass
