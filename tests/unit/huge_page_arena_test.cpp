// The CPU backend's huge-page arena: aligned, disjoint allocations; regions reused or given
// back once empty; foreign pointers refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "../../src/backends/cpu/huge_page_arena.h"

namespace onepass {
namespace {

using cpu::HugePageArena;

TEST(HugePageArena, AllocationsAreAlignedDisjointAndReused) {
  constexpr size_t kAlign = 256;
  HugePageArena arena(kAlign);
  // Sizes of a small model's weights: several share a region.
  const std::vector<size_t> sizes = {345600, 207360, 1105920, 552960, 200000, 3 << 20};
  std::vector<uint8_t*> blocks;
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto* p = static_cast<uint8_t*>(arena.allocate(sizes[i]));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kAlign, 0u) << "allocation " << i;
    std::memset(p, static_cast<int>(i + 1), sizes[i]);
    blocks.push_back(p);
  }
  // Every allocation still holds its own byte: none overlaps another.
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(blocks[i][0], i + 1) << "allocation " << i;
    EXPECT_EQ(blocks[i][sizes[i] - 1], i + 1) << "allocation " << i;
  }
  // The first region starts on a huge page.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(blocks[0]) % HugePageArena::kHugePage, 0u);

  int foreign = 0;
  EXPECT_FALSE(arena.release(&foreign));
  for (uint8_t* p : blocks) EXPECT_TRUE(arena.release(p));
  // All released: the newest region is reused from its start.
  void* again = arena.allocate(sizes[0]);
  EXPECT_TRUE(again == blocks[0] || reinterpret_cast<uintptr_t>(again) % HugePageArena::kHugePage == 0);
  EXPECT_TRUE(arena.release(again));
}

TEST(HugePageArena, ARegionLargerThanTheDefaultHoldsOneBigAllocation) {
  HugePageArena arena(256);
  const size_t big = HugePageArena::kRegionBytes + 12345;
  auto* p = static_cast<uint8_t*>(arena.allocate(big));
  ASSERT_NE(p, nullptr);
  p[0] = 1;
  p[big - 1] = 2;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % HugePageArena::kHugePage, 0u);
  auto* q = static_cast<uint8_t*>(arena.allocate(HugePageArena::kMinBytes));
  ASSERT_NE(q, nullptr);
  EXPECT_TRUE(q + HugePageArena::kMinBytes <= p || q >= p + big);
  EXPECT_TRUE(arena.release(p));
  EXPECT_TRUE(arena.release(q));
  EXPECT_FALSE(arena.release(q));  // released twice: no longer the arena's (regions emptied)
}

}  // namespace
}  // namespace onepass
