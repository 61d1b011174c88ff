// Host memory for the CPU backend's large allocations (weights, KV caches, activations),
// carved from 2 MiB-aligned regions marked for transparent huge pages. A decode step
// streams every weight once: through 4 KiB pages that costs a TLB miss per page and stops
// the hardware prefetcher at every page boundary, which on a 2-core Zen 4 VM made a
// matrix-vector product ~10% slower (median over DRAM-resident copies) than with 2 MiB
// pages. Most weight tensors are well under 2 MiB, so each alone could never fill a huge
// page: the arena packs them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace onepass::cpu {

/// Not thread-safe: the caller serialises calls.
class HugePageArena {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;
  /// Bytes of a region (larger allocations get a region of their own, rounded up to
  /// kHugePage).
  static constexpr size_t kRegionBytes = size_t{32} << 20;
  /// Smaller allocations are left to malloc: they would not fill a huge page anyway.
  static constexpr size_t kMinBytes = size_t{128} << 10;

  explicit HugePageArena(size_t alignment) : alignment_(alignment) {}
  ~HugePageArena();
  HugePageArena(const HugePageArena&) = delete;
  HugePageArena& operator=(const HugePageArena&) = delete;

  /// `bytes` (at least kMinBytes) at a multiple of the alignment; nullptr when the system
  /// has no memory for a new region.
  void* allocate(size_t bytes);
  /// Releases an allocation of this arena; false (and nothing done) when p is not one.
  /// A region is reused once all its allocations are released (the newest one), or given
  /// back to the system (older ones).
  bool release(const void* p);

 private:
  struct Region {
    uint8_t* base;
    size_t size;
    size_t used;  // bytes handed out from base
    size_t live;  // allocations not yet released
  };
  size_t alignment_;
  std::vector<Region> regions_;  // the last one takes new allocations
};

}  // namespace onepass::cpu
