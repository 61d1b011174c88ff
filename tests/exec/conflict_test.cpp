// The conflict rules every barrier and graph edge derives from, as a table.
#include <gtest/gtest.h>

#include "onepass/exec/conflict.h"

namespace onepass {
namespace {

struct Case {
  const char* name;
  std::vector<MemRange> earlier_reads, earlier_writes, later_reads, later_writes;
  Hazard expected;
};

// Two buffers: A at [1000, 2000), B at [5000, 6000).
const std::vector<Case> kCases = {
    {"read after write (RAW)", {}, {{1000, 2000}}, {{1000, 2000}}, {{5000, 5100}}, Hazard::raw},
    {"write after read (WAR)", {{1000, 2000}}, {{5000, 5100}}, {}, {{1000, 2000}}, Hazard::war},
    {"write after write (WAW)", {}, {{1000, 2000}}, {}, {{1000, 2000}}, Hazard::waw},
    {"read-read never conflicts", {{1000, 2000}}, {{5000, 5100}}, {{1000, 2000}}, {{5100, 5200}}, Hazard::none},
    {"disjoint slices of one buffer", {}, {{1000, 1500}}, {{1500, 2000}}, {{1500, 2000}}, Hazard::none},
    {"adjacent slices do not touch", {}, {{1000, 1064}}, {{1064, 1128}}, {}, Hazard::none},
    {"partial overlap RAW", {}, {{1000, 1500}}, {{1499, 1600}}, {{5000, 5001}}, Hazard::raw},
    {"partial overlap WAW", {}, {{1000, 1500}}, {}, {{1400, 1800}}, Hazard::waw},
    {"partial overlap WAR", {{1200, 1300}}, {{5000, 5001}}, {}, {{1250, 1260}}, Hazard::war},
    {"containment", {}, {{1000, 2000}}, {{1500, 1501}}, {}, Hazard::raw},
    {"empty read range", {}, {{1000, 2000}}, {{1500, 1500}}, {}, Hazard::none},
    {"empty write range", {{1000, 2000}}, {}, {}, {{1500, 1500}}, Hazard::none},
    {"other buffer", {{1000, 2000}}, {{1000, 2000}}, {{5000, 6000}}, {{5000, 6000}}, Hazard::none},
    {"RAW reported before WAW", {}, {{1000, 2000}}, {{1000, 2000}}, {{1000, 2000}}, Hazard::raw},
    {"WAW reported before WAR", {{1000, 2000}}, {{1000, 2000}}, {}, {{1000, 2000}}, Hazard::waw},
};

class ConflictRules : public ::testing::TestWithParam<Case> {};

TEST_P(ConflictRules, HazardBetween) {
  const Case& c = GetParam();
  EXPECT_EQ(hazard_between(c.earlier_reads, c.earlier_writes, c.later_reads, c.later_writes), c.expected)
      << c.name;
}

TEST_P(ConflictRules, TrackerAgrees) {
  const Case& c = GetParam();
  RangeTracker tracker;
  tracker.add(c.earlier_reads, c.earlier_writes);
  EXPECT_EQ(tracker.check(c.later_reads, c.later_writes), c.expected) << c.name;
  tracker.reset();
  EXPECT_EQ(tracker.check(c.later_reads, c.later_writes), Hazard::none);
}

INSTANTIATE_TEST_SUITE_P(Table, ConflictRules, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& p) {
                           std::string name = p.param.name;
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

TEST(ConflictRules, UnannotatedDispatchConflictsWithEverything) {
  Dispatch annotated;
  annotated.writes = {{1000, 2000}};
  Dispatch unannotated;
  EXPECT_EQ(hazard_between(annotated, unannotated), Hazard::raw);
  EXPECT_EQ(hazard_between(unannotated, annotated), Hazard::raw);
  RangeTracker tracker;
  tracker.add_everything();
  EXPECT_TRUE(tracker.conflicts(std::vector<MemRange>{{1, 2}}, {}));
}

// A kernel that loads weights before its programmatic-dependent-launch wait may launch
// early only after a predecessor that does not write them.
TEST(ConflictRules, EarlyReadsForbidAnEarlyLaunchAfterTheirWriter) {
  Dispatch matvec;
  matvec.reads = {{0, 100}, {1000, 5000}};  // x, w
  matvec.early_reads = {{1000, 5000}};      // w, loaded before the wait
  matvec.writes = {{6000, 6100}};
  Dispatch writes_x;
  writes_x.writes = {{0, 100}};
  Dispatch writes_w;
  writes_w.writes = {{4096, 4097}};
  Dispatch unannotated;
  EXPECT_FALSE(early_reads_conflict(writes_x, matvec));
  EXPECT_TRUE(early_reads_conflict(writes_w, matvec));
  EXPECT_TRUE(early_reads_conflict(unannotated, matvec));
  Dispatch plain = matvec;
  plain.early_reads.clear();
  EXPECT_FALSE(early_reads_conflict(writes_w, plain)) << "a kernel reading nothing early waits in-kernel";
  EXPECT_FALSE(early_reads_conflict(unannotated, plain));
}

}  // namespace
}  // namespace onepass
