// Range-based hazard detection: the rules every barrier and graph edge is derived from.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "onepass/core/buffer.h"
#include "onepass/exec/dispatch.h"

namespace onepass {

/// What ordering a later access needs relative to an earlier one.
enum class Hazard : uint8_t {
  none,  // read-read, disjoint ranges, or empty ranges
  raw,   // later reads what earlier wrote
  war,   // later writes what earlier read
  waw,   // later writes what earlier wrote
};

const char* hazard_name(Hazard hazard);

/// Hazard of `later` (reads, writes) after `earlier` (reads, writes). RAW is reported
/// before WAW before WAR when several apply.
Hazard hazard_between(std::span<const MemRange> earlier_reads,
                      std::span<const MemRange> earlier_writes,
                      std::span<const MemRange> later_reads,
                      std::span<const MemRange> later_writes);

/// Hazard between two dispatches in program order. Unannotated dispatches (no declared
/// writes) conflict with everything.
Hazard hazard_between(const Dispatch& earlier, const Dispatch& later);

/// Whether `later` may not start before `predecessor` has finished although it waits for
/// it in-kernel (programmatic dependent launch): it reads something early that the
/// predecessor writes, or the predecessor is unannotated and may write anything.
bool early_reads_conflict(const Dispatch& predecessor, const Dispatch& later);
/// The same from the predecessor's declared writes (none: unannotated).
bool early_reads_conflict(std::span<const MemRange> predecessor_writes, const Dispatch& later);

/// The ranges touched by the current concurrent group (the seeds' ConflictTracker /
/// llama.cpp's mem_ranges): a new dispatch may join the group only if it has no hazard
/// with any of them.
class RangeTracker {
 public:
  Hazard check(std::span<const MemRange> reads, std::span<const MemRange> writes) const;
  bool conflicts(std::span<const MemRange> reads, std::span<const MemRange> writes) const {
    return check(reads, writes) != Hazard::none;
  }
  void add(std::span<const MemRange> reads, std::span<const MemRange> writes);
  /// Marks the group as touching all memory (an unannotated dispatch joined it).
  void add_everything() { everything_ = true; }
  void reset() {
    ranges_.clear();
    everything_ = false;
  }
  size_t size() const { return ranges_.size(); }
  bool empty() const { return ranges_.empty() && !everything_; }

 private:
  struct Entry {
    MemRange range;
    bool write;
  };
  std::vector<Entry> ranges_;
  bool everything_ = false;
};

}  // namespace onepass
