// CommandEncoder and GraphSession basics: auto-barriers, capture, counters, errors.
#include <gtest/gtest.h>

#include "onepass/exec/compute_graph.h"
#include "onepass/exec/counters.h"
#include "onepass/exec/graph_session.h"
#include "support/synthetic.h"
#include "support/testing.h"

namespace onepass {
namespace {

// A dispatch of the synthetic kernel reading `reads` and writing `writes` (one u32
// buffer per letter); only the ranges matter here.
struct Fixture {
  std::shared_ptr<Backend> backend = testing::cpu_backend();
  std::map<char, BufferView> buffers;

  BufferView buf(char name) {
    auto it = buffers.find(name);
    if (it == buffers.end()) {
      it = buffers.emplace(name, backend->alloc(256 * 4)).first;
      it->second.write(testing::random_u32(256, static_cast<uint64_t>(name)));
    }
    return it->second;
  }

  Dispatch node(std::string reads, char write, uint32_t salt = 0) {
    testing::MixArgs args{};
    BufferView out = buf(write);
    args.out = static_cast<uint32_t*>(out.data());
    args.n = 256;
    args.salt = salt;
    if (!reads.empty()) args.a = static_cast<const uint32_t*>(buf(reads[0]).data());
    if (reads.size() > 1) {
      args.b = static_cast<const uint32_t*>(buf(reads[1]).data());
      args.b_len = 256;
    }
    Dispatch d(backend->registry().get("test_mix_u32"), LaunchDims{{1, 1, 1}, {1, 1, 1}, 0}, args,
               OpKind::add, std::string(1, write));
    for (char r : reads) d.read(buf(r));
    d.write(out);
    return d;
  }
};

TEST(Encoder, AutoBarrierCountsForAKnownSequence) {
  Fixture f;
  reset_counters();
  CommandEncoder enc(*f.backend);
  // Group 1: A and B are independent.
  EXPECT_FALSE(enc.dispatch_tracked(f.node("X", 'A')));
  EXPECT_FALSE(enc.dispatch_tracked(f.node("X", 'B')));
  // C reads A: RAW -> barrier. D reads B, joins C's group.
  EXPECT_TRUE(enc.dispatch_tracked(f.node("A", 'C')));
  EXPECT_FALSE(enc.dispatch_tracked(f.node("B", 'D')));
  // Writing A while C (same group) reads it: WAR -> barrier.
  EXPECT_TRUE(enc.dispatch_tracked(f.node("Y", 'A')));
  // E reads C (written two groups ago): no barrier needed.
  EXPECT_FALSE(enc.dispatch_tracked(f.node("C", 'E')));
  // F writes E: WAW with the open group -> barrier.
  EXPECT_TRUE(enc.dispatch_tracked(f.node("Y", 'E')));
  enc.commit_and_wait();
  const Counters c = counters();
  EXPECT_EQ(c.auto_barriers, 3u);
  EXPECT_EQ(c.concurrent_dispatches, 4u);
  EXPECT_EQ(c.barriers, 3u);
  EXPECT_EQ(c.dispatches, 7u);
  EXPECT_EQ(c.submissions, 1u);
  EXPECT_EQ(c.syncs, 1u);
}

TEST(Encoder, AutoBarrierOffEmitsNone) {
  Options o = testing::test_options();
  o.auto_barrier = false;
  o.cpu_schedule = CpuSchedule::sequential;
  Fixture f;
  f.backend = testing::cpu_backend(o);
  reset_counters();
  CommandEncoder enc(*f.backend);
  enc.dispatch_tracked(f.node("X", 'A'));
  enc.dispatch_tracked(f.node("A", 'B'));
  enc.commit_and_wait();
  EXPECT_EQ(counters().barriers, 0u);
  EXPECT_EQ(counters().auto_barriers, 0u);
}

TEST(Encoder, ForceBarrierResetsTracker) {
  Fixture f;
  reset_counters();
  CommandEncoder enc(*f.backend);
  enc.dispatch_tracked(f.node("X", 'A'));
  EXPECT_GT(enc.tracked_ranges(), 0u);
  enc.force_barrier_and_reset_tracker();
  EXPECT_EQ(enc.tracked_ranges(), 0u);
  EXPECT_FALSE(enc.dispatch_tracked(f.node("A", 'B')));  // A's writer is behind the barrier
  enc.commit_and_wait();
  EXPECT_EQ(counters().barriers, 1u);
}

TEST(Encoder, CaptureRecordsTheSameRangesAndBarriersAsDirect) {
  Fixture f;
  std::vector<Dispatch> sequence = {f.node("X", 'A'), f.node("X", 'B'), f.node("A", 'C'),
                                    f.node("B", 'D'), f.node("Y", 'A'), f.node("CD", 'E')};
  GraphExecutor exec(f.backend);
  GraphSession direct = exec.begin();
  GraphSession recorded = exec.begin_recorded();
  for (const Dispatch& d : sequence) {
    direct.dispatch(d);
    recorded.dispatch(d);
  }
  EXPECT_EQ(direct.barrier_count(), recorded.barrier_count());
  EXPECT_EQ(direct.barrier_count(), 2u);
  ComputeGraph graph = recorded.take_graph();
  direct.finish();
  ASSERT_EQ(graph.dispatch_count(), sequence.size());
  EXPECT_EQ(graph.barrier_count(), 2u);
  size_t i = 0;
  std::vector<size_t> barrier_before;
  for (const Node& n : graph.nodes()) {
    if (is_barrier(n)) {
      barrier_before.push_back(i);
      continue;
    }
    const Dispatch& d = *as_dispatch(n);
    EXPECT_EQ(d.reads, sequence[i].reads) << i;
    EXPECT_EQ(d.writes, sequence[i].writes) << i;
    EXPECT_EQ(d.op_kind, OpKind::add);
    ++i;
  }
  // E reads C and D, written two groups back: no third barrier.
  EXPECT_EQ(barrier_before, (std::vector<size_t>{2, 4}));
}

TEST(Encoder, PendingAnnotationsAndOpKind) {
  Fixture f;
  CommandEncoder enc(*f.backend, EncoderMode::capture);
  Dispatch bare = f.node("X", 'A');
  bare.reads.clear();
  bare.writes.clear();
  bare.op_kind = OpKind::other;
  enc.set_op_kind(OpKind::rope);
  enc.set_pending_ranges({{1, 2}}, {{3, 4}});
  enc.dispatch(bare);
  enc.dispatch(bare);  // pending state was consumed by the first dispatch
  enc.annotate_last_dispatch_if_missing({{5, 6}}, {{7, 8}});
  auto nodes = enc.take_capture();
  ASSERT_EQ(nodes.size(), 2u);
  const Dispatch& first = *as_dispatch(nodes[0]);
  EXPECT_EQ(first.op_kind, OpKind::rope);
  EXPECT_EQ(first.reads, (std::vector<MemRange>{{1, 2}}));
  EXPECT_EQ(first.writes, (std::vector<MemRange>{{3, 4}}));
  const Dispatch& second = *as_dispatch(nodes[1]);
  EXPECT_EQ(second.op_kind, OpKind::other);
  EXPECT_EQ(second.reads, (std::vector<MemRange>{{5, 6}}));
  EXPECT_EQ(second.writes, (std::vector<MemRange>{{7, 8}}));
}

TEST(Encoder, MisuseIsAnError) {
  Fixture f;
  CommandEncoder enc(*f.backend);
  enc.dispatch(f.node("X", 'A'));
  enc.commit();
  EXPECT_THROW(enc.commit(), Error);
  EXPECT_THROW(enc.dispatch(f.node("X", 'A')), Error);
  enc.wait_until_completed();
  CommandEncoder enc2(*f.backend);
  EXPECT_THROW(enc2.dispatch_after(f.node("X", 'A'), std::vector<uint32_t>{3}), Error);
  Dispatch no_kernel;
  EXPECT_THROW(enc2.dispatch(no_kernel), Error);
}

TEST(Encoder, ArgumentSizeIsChecked) {
  Fixture f;
  const Kernel& k = f.backend->registry().get("test_mix_u32");
  struct Wrong {
    int x;
  };
  EXPECT_THROW(Dispatch(k, LaunchDims{}, Wrong{1}, OpKind::add), Error);
}

TEST(Registry, UnknownNameListsNearNames) {
  auto backend = testing::cpu_backend();
  try {
    backend->registry().get("rms_norm_f31");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no kernel named 'rms_norm_f31'"), std::string::npos) << what;
    EXPECT_NE(what.find("rms_norm_f32"), std::string::npos) << what;
  }
  KernelRegistry r;
  Kernel k;
  k.name = "a";
  k.cpu = +[](const void*, const LaunchDims&, uint64_t, uint64_t) {};
  r.add(k);
  EXPECT_THROW(r.add(k), Error);
  EXPECT_EQ(r.near_names("b").front(), "a");
}

TEST(Session, GroupStatsHistogram) {
  Fixture f;
  GraphExecutor exec(f.backend);
  GraphSession s = exec.begin();
  s.dispatch(f.node("X", 'A'));
  s.dispatch(f.node("X", 'B'));
  s.dispatch(f.node("X", 'C'));
  s.dispatch(f.node("A", 'D'));  // barrier: group of 3 closed
  s.dispatch(f.node("D", 'E'));  // barrier: group of 1 closed
  const GroupStats g = s.group_stats();
  EXPECT_EQ(g.dispatches, 5u);
  EXPECT_EQ(g.barriers, 2u);
  EXPECT_EQ(g.groups[2], 1u);  // one group of three
  EXPECT_EQ(g.groups[0], 2u);  // two groups of one (D, and the open E)
  EXPECT_EQ(g.group_count(), 3u);
  s.finish();
  EXPECT_THROW(s.finish(), Error);
}

TEST(Session, ManualBarriersWhenAutoBarrierIsOff) {
  Options o = testing::test_options();
  o.auto_barrier = false;
  Fixture f;
  f.backend = testing::cpu_backend(o);
  GraphExecutor exec(f.backend);
  GraphSession s = exec.begin();
  const auto a = f.node("X", 'A');
  const auto b = f.node("A", 'B');
  s.barrier_between(a.reads, a.writes);
  s.dispatch(a);
  s.barrier_between(b.reads, b.writes);  // conflicts: emits a barrier
  s.dispatch(b);
  EXPECT_EQ(s.barrier_count(), 1u);
  s.barrier();
  EXPECT_EQ(s.barrier_count(), 2u);
  s.finish();
}

}  // namespace
}  // namespace onepass
