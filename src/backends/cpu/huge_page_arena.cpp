#include "huge_page_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace onepass::cpu {
namespace {

size_t round_up(size_t bytes, size_t multiple) { return (bytes + multiple - 1) / multiple * multiple; }

// A region that takes no more allocations keeps its last huge page resident whole, used or
// not (up to 2 MiB a region): returns the unused part. Advice only.
void return_unused_tail(uint8_t* base, size_t used, size_t size) {
  static const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t from = round_up(used, page);
  if (from < size) (void)::madvise(base + from, size - from, MADV_DONTNEED);
}

}  // namespace

HugePageArena::~HugePageArena() {
  for (const Region& r : regions_) std::free(r.base);
}

void* HugePageArena::allocate(size_t bytes) {
  const size_t size = round_up(bytes, alignment_);
  if (regions_.empty() || regions_.back().size - regions_.back().used < size) {
    if (!regions_.empty())
      return_unused_tail(regions_.back().base, regions_.back().used, regions_.back().size);
    const size_t region_bytes = std::max(kRegionBytes, round_up(size, kHugePage));
    auto* base = static_cast<uint8_t*>(std::aligned_alloc(kHugePage, region_bytes));
    if (base == nullptr) return nullptr;
    // Advice only: where the kernel has no huge pages to give, the region stays in 4 KiB pages.
    (void)::madvise(base, region_bytes, MADV_HUGEPAGE);
    regions_.push_back({base, region_bytes, 0, 0});
  }
  Region& r = regions_.back();
  void* p = r.base + r.used;
  r.used += size;
  ++r.live;
  return p;
}

bool HugePageArena::release(const void* p) {
  const auto* byte = static_cast<const uint8_t*>(p);
  for (size_t i = regions_.size(); i-- > 0;) {
    Region& r = regions_[i];
    if (byte < r.base || byte >= r.base + r.used) continue;
    if (--r.live == 0) {
      if (i + 1 == regions_.size()) {
        r.used = 0;  // the newest region: keep it for the next allocations
      } else {
        std::free(r.base);
        regions_.erase(regions_.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    return true;
  }
  return false;
}

}  // namespace onepass::cpu
