#include "onepass/exec/conflict.h"

namespace onepass {
namespace {

bool any_overlap(std::span<const MemRange> a, std::span<const MemRange> b) {
  for (const MemRange& x : a) {
    for (const MemRange& y : b) {
      if (x.overlaps(y)) return true;
    }
  }
  return false;
}

}  // namespace

const char* hazard_name(Hazard hazard) {
  switch (hazard) {
    case Hazard::none: return "none";
    case Hazard::raw: return "RAW";
    case Hazard::war: return "WAR";
    case Hazard::waw: return "WAW";
  }
  return "?";
}

Hazard hazard_between(std::span<const MemRange> earlier_reads,
                      std::span<const MemRange> earlier_writes,
                      std::span<const MemRange> later_reads,
                      std::span<const MemRange> later_writes) {
  if (any_overlap(later_reads, earlier_writes)) return Hazard::raw;
  if (any_overlap(later_writes, earlier_writes)) return Hazard::waw;
  if (any_overlap(later_writes, earlier_reads)) return Hazard::war;
  return Hazard::none;
}

bool early_reads_conflict(std::span<const MemRange> predecessor_writes, const Dispatch& later) {
  if (later.early_reads.empty()) return false;
  return predecessor_writes.empty() || any_overlap(later.early_reads, predecessor_writes);
}

bool early_reads_conflict(const Dispatch& predecessor, const Dispatch& later) {
  return early_reads_conflict(predecessor.writes, later);
}

Hazard hazard_between(const Dispatch& earlier, const Dispatch& later) {
  // An unannotated dispatch may touch anything: order it against everything.
  if (!earlier.annotated() || !later.annotated()) return Hazard::raw;
  return hazard_between(earlier.reads, earlier.writes, later.reads, later.writes);
}

Hazard RangeTracker::check(std::span<const MemRange> reads,
                           std::span<const MemRange> writes) const {
  if (everything_) return Hazard::raw;
  Hazard found = Hazard::none;
  for (const Entry& e : ranges_) {
    if (e.write) {
      for (const MemRange& r : reads) {
        if (r.overlaps(e.range)) return Hazard::raw;
      }
      for (const MemRange& w : writes) {
        if (w.overlaps(e.range)) found = Hazard::waw;
      }
    } else if (found == Hazard::none) {
      for (const MemRange& w : writes) {
        if (w.overlaps(e.range)) {
          found = Hazard::war;
          break;
        }
      }
    }
  }
  return found;
}

void RangeTracker::add(std::span<const MemRange> reads, std::span<const MemRange> writes) {
  for (const MemRange& r : reads) {
    if (!r.empty()) ranges_.push_back({r, false});
  }
  for (const MemRange& w : writes) {
    if (!w.empty()) ranges_.push_back({w, true});
  }
}

}  // namespace onepass
