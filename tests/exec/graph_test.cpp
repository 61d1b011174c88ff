// ComputeGraph passes on known graphs: replay, reorder, barriers, dataflow, dual buffer,
// fusion (counts asserted so an optimisation cannot silently stop applying).
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <cstring>

#include "onepass/ops/ops.h"
#include "onepass/backends/factory.h"
#include "onepass/exec/captured_graph.h"
#include "onepass/exec/compute_graph.h"
#include "onepass/exec/counters.h"
#include "onepass/exec/graph_session.h"
#include "support/synthetic.h"
#include "support/testing.h"

namespace onepass {
namespace {

using testing::cpu_backend;

// Chain/graph builder over named u32 buffers (as in encoder_test).
struct Builder {
  std::shared_ptr<Backend> backend = cpu_backend();
  std::map<char, BufferView> buffers;
  uint32_t next_salt = 1;

  BufferView buf(char name) {
    auto it = buffers.find(name);
    if (it == buffers.end()) {
      it = buffers.emplace(name, backend->alloc(300 * 4)).first;
      it->second.write(testing::random_u32(300, static_cast<uint64_t>(name) * 7));
    }
    return it->second;
  }
  Dispatch node(std::string reads, char write, OpKind kind = OpKind::add) {
    testing::MixArgs args{};
    args.out = static_cast<uint32_t*>(buf(write).data());
    args.n = 300;
    args.salt = next_salt++;
    args.a = static_cast<const uint32_t*>(buf(reads.empty() ? 'Q' : reads[0]).data());
    if (reads.size() > 1) {
      args.b = static_cast<const uint32_t*>(buf(reads[1]).data());
      args.b_len = 300;
    }
    LaunchDims dims;
    dims.grid.x = 2;
    Dispatch d(backend->registry().get("test_mix_u32"), dims, args, kind, std::string(1, write));
    d.read(buf(reads.empty() ? 'Q' : reads[0]));
    if (reads.size() > 1) d.read(buf(reads[1]));
    d.write(buf(write));
    return d;
  }
  std::string order(const std::vector<Node>& nodes) {
    std::string s;
    for (const Node& n : nodes) s += is_barrier(n) ? std::string("|") : as_dispatch(n)->label;
    return s;
  }
};

TEST(Reorder, PullsIndependentWorkIntoTheOpenGroup) {
  Builder b;
  std::vector<Node> nodes = {b.node("X", 'A'), Barrier{}, b.node("A", 'B'), b.node("X", 'C')};
  const uint32_t moved = reorder_pass(nodes);
  EXPECT_EQ(b.order(nodes), "ACB");  // barriers stripped, C joins A's group
  EXPECT_EQ(moved, 2u);
  EXPECT_EQ(plan_barriers(nodes), (std::vector<uint32_t>{2}));
}

TEST(Reorder, NonReorderableKindStopsTheLookahead) {
  Builder b;
  std::vector<Node> nodes = {b.node("X", 'A'), b.node("A", 'B'), b.node("Y", 'N', OpKind::attention),
                             b.node("X", 'C')};
  EXPECT_EQ(reorder_pass(nodes), 0u);
  EXPECT_EQ(b.order(nodes), "ABNC");
}

TEST(Reorder, SkippedNodesBlockDependentCandidates) {
  Builder b;
  // B conflicts with A's group; D depends on B (skipped over), so it cannot move up;
  // C is independent of everything and moves.
  std::vector<Node> nodes = {b.node("X", 'A'), b.node("A", 'B'), b.node("B", 'D'), b.node("X", 'C')};
  reorder_pass(nodes);
  EXPECT_EQ(b.order(nodes), "ACBD");
}

TEST(Reorder, UnannotatedDispatchesNeverMove) {
  Builder b;
  Dispatch u = b.node("X", 'U');
  u.reads.clear();
  u.writes.clear();
  std::vector<Node> nodes = {b.node("X", 'A'), b.node("A", 'B'), u, b.node("X", 'C')};
  reorder_pass(nodes);
  EXPECT_EQ(b.order(nodes), "ABUC");
  EXPECT_EQ(plan_barriers(nodes), (std::vector<uint32_t>{1, 2, 3}));
}

TEST(Barriers, ExplicitBarriersAreKept) {
  Builder b;
  std::vector<Node> nodes = {b.node("X", 'A'), Barrier{}, Barrier{}, b.node("Y", 'B'), b.node("Z", 'C')};
  EXPECT_EQ(plan_barriers(nodes), (std::vector<uint32_t>{1}));
}

TEST(Dataflow, DiamondAndTransitiveReduction) {
  Builder b;
  std::vector<Node> nodes = {b.node("X", 'A'), b.node("A", 'B'), b.node("A", 'C'), b.node("BC", 'D'),
                             b.node("AD", 'E'), b.node("Y", 'F')};
  const DataflowPlan plan = plan_dataflow(nodes);
  EXPECT_EQ(plan.deps[0], (std::vector<uint32_t>{}));
  EXPECT_EQ(plan.deps[1], (std::vector<uint32_t>{0}));
  EXPECT_EQ(plan.deps[2], (std::vector<uint32_t>{0}));
  EXPECT_EQ(plan.deps[3], (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(plan.deps[4], (std::vector<uint32_t>{3}));  // A is reached through D
  EXPECT_EQ(plan.deps[5], (std::vector<uint32_t>{}));   // independent branch
  EXPECT_EQ(plan.edges, 5u);
  EXPECT_EQ(plan.depth, 4u);
  const std::string dot = ComputeGraph(nodes).to_dot();
  EXPECT_NE(dot.find("n3 -> n4"), std::string::npos) << dot;
  EXPECT_EQ(dot.find("n0 -> n4"), std::string::npos) << dot;
}

TEST(Dataflow, WarAndWawOrderWriters) {
  Builder b;
  std::vector<Node> nodes = {b.node("A", 'B'), b.node("X", 'A'), b.node("Y", 'A')};
  const DataflowPlan plan = plan_dataflow(nodes);
  EXPECT_EQ(plan.deps[1], (std::vector<uint32_t>{0}));  // WAR
  EXPECT_EQ(plan.deps[2], (std::vector<uint32_t>{1}));  // WAW (and WAR via 1)
}

TEST(DualBuffer, SplitPointAndPerChunkBarriers) {
  Builder b;
  // A chain of 200 dependent dispatches: every dispatch after the first of each chunk
  // needs a barrier.
  std::vector<Node> chain;
  for (int i = 0; i < 200; ++i) chain.push_back(b.node(i % 2 ? "B" : "A", i % 2 ? 'A' : 'B'));
  EXPECT_EQ(dual_buffer_split(chain), 64u);  // max(64, 200/10)
  ComputeGraph g(chain);
  reset_counters();
  CommandEncoder first(*b.backend, EncoderMode::direct, SubmitMode::graph);
  CommandEncoder second(*b.backend, EncoderMode::direct, SubmitMode::graph);
  const DualBufferBarriers barriers = g.encode_dual_buffer(first, second);
  EXPECT_TRUE(first.committed());
  EXPECT_FALSE(second.committed());
  second.commit_and_wait();
  EXPECT_EQ(barriers.split_dispatches, 64u);
  EXPECT_EQ(barriers.first, 63u);
  EXPECT_EQ(barriers.second, 135u);
  EXPECT_EQ(counters().submissions, 2u);

  std::vector<Node> big;
  for (int i = 0; i < 1000; ++i) big.push_back(b.node("X", static_cast<char>('a' + i % 20)));
  big.insert(big.begin() + 5, Barrier{});
  EXPECT_EQ(dual_buffer_split(big), 101u);  // 100 dispatches + the barrier node
  std::vector<Node> small(big.begin(), big.begin() + 20);
  EXPECT_EQ(dual_buffer_split(small), small.size());
}

TEST(Replay, RecordedGraphMatchesDirectDispatchBitForBit) {
  Builder b;
  std::vector<Dispatch> work = {b.node("X", 'A'), b.node("XA", 'B'), b.node("B", 'C'),
                                b.node("CA", 'A'), b.node("Y", 'D'), b.node("DA", 'X')};
  auto run = [&](bool recorded) {
    for (auto& [name, view] : b.buffers) view.write(testing::random_u32(300, static_cast<uint64_t>(name) * 7));
    GraphExecutor exec(b.backend);
    GraphSession s = recorded ? exec.begin_recorded() : exec.begin();
    for (const Dispatch& d : work) s.dispatch(d);
    s.finish();
    std::vector<std::vector<uint32_t>> out;
    for (auto& [name, view] : b.buffers) out.push_back(view.read_as<uint32_t>());
    return out;
  };
  const auto direct = run(false);
  EXPECT_EQ(run(true), direct);
  // A CapturedGraph replays the same result again and again.
  for (auto& [name, view] : b.buffers) view.write(testing::random_u32(300, static_cast<uint64_t>(name) * 7));
  GraphExecutor exec(b.backend);
  GraphSession s = exec.begin_recorded();
  for (const Dispatch& d : work) s.dispatch(d);
  CapturedGraph captured(*b.backend, s.take_graph());
  EXPECT_EQ(captured.stats().dispatches, work.size());
  captured.run();
  std::vector<std::vector<uint32_t>> out;
  for (auto& [name, view] : b.buffers) out.push_back(view.read_as<uint32_t>());
  EXPECT_EQ(out, direct);
}

TEST(Dump, TextAndDotDescribeTheGraph) {
  Builder b;
  ComputeGraph g({b.node("X", 'A'), Barrier{}, b.node("A", 'B')});
  const std::string text = g.dump("test");
  EXPECT_NE(text.find("3 nodes, 2 dispatches, 1 barriers"), std::string::npos) << text;
  EXPECT_NE(text.find("test_mix_u32 'A'"), std::string::npos) << text;
  EXPECT_NE(text.find("barrier"), std::string::npos);
  EXPECT_NE(g.to_dot().find("n0 -> n1"), std::string::npos);
}

// --- fusion with the real rms_norm and mul ops -------------------------------------------

struct NormFixture {
  std::shared_ptr<Backend> backend;
  DType dtype;
  int64_t rows, cols;
  TensorView x, w, s, tmp, out;

  NormFixture(DType t, int64_t r, int64_t c) : backend(cpu_backend()), dtype(t), rows(r), cols(c) {
    x = backend->alloc_tensor(t, Shape{r, c});
    w = backend->alloc_tensor(DType::f32, Shape{c});
    s = backend->alloc_tensor(t, Shape{r, c});
    tmp = backend->alloc_tensor(t, Shape{r, c});
    out = backend->alloc_tensor(t, Shape{r, c});
    const uint64_t seed = testing::fresh_seed();
    testing::upload_floats(x, testing::random_floats(static_cast<size_t>(r * c), seed));
    testing::upload_floats(w, testing::random_floats(static_cast<size_t>(c), seed + 1, 0.5f, 1.5f));
    testing::upload_floats(s, testing::random_floats(static_cast<size_t>(r * c), seed + 2));
  }
  void norm_then_mul(GraphSession& session) {
    ops::rms_norm(session, x, w, tmp, 1e-5f);
    ops::mul(session, tmp, s, out);
  }
};

TEST(Fusion, RmsNormMulFusesExactlyWhereAllowed) {
  NormFixture f(DType::f32, 7, 333);
  GraphExecutor exec(f.backend);
  {
    GraphSession session = exec.begin_recorded();
    f.norm_then_mul(session);
    ComputeGraph g = session.take_graph();
    EXPECT_EQ(g.fuse(f.backend->fusion_rules(), *f.backend), 1u);
    EXPECT_EQ(g.dispatch_count(), 1u);
    const Dispatch& fused = *as_dispatch(g.nodes().back());
    EXPECT_EQ(fused.kernel->name, "rms_norm_mul_f32");
    EXPECT_EQ(fused.op_kind, OpKind::norm_mul);
    EXPECT_EQ(fused.writes, (std::vector<MemRange>{f.out.range()}));
    EXPECT_EQ(fused.reads.size(), 3u);  // x, weight, scale — not the intermediate
  }
  {  // Intermediate read again later: no fusion.
    GraphSession session = exec.begin_recorded();
    f.norm_then_mul(session);
    ops::add(session, f.tmp, f.s, f.x);
    ComputeGraph g = session.take_graph();
    EXPECT_EQ(g.fuse(f.backend->fusion_rules(), *f.backend), 0u);
  }
  {  // Intermediate kept as an output: no fusion.
    GraphSession session = exec.begin_recorded();
    f.norm_then_mul(session);
    session.keep(f.tmp);
    ComputeGraph g = session.take_graph();
    EXPECT_EQ(g.fuse(f.backend->fusion_rules(), *f.backend), 0u);
  }
  {  // Norm input overwritten between norm and mul: no fusion.
    GraphSession session = exec.begin_recorded();
    ops::rms_norm(session, f.x, f.w, f.tmp, 1e-5f);
    ops::scale(session, f.s, 2.0f, f.x);
    ops::mul(session, f.tmp, f.s, f.out);
    ComputeGraph g = session.take_graph();
    EXPECT_EQ(g.fuse(f.backend->fusion_rules(), *f.backend), 0u);
  }
  {  // Intermediate partly overwritten, then read: still live, no fusion.
    GraphSession session = exec.begin_recorded();
    f.norm_then_mul(session);
    ops::scale(session, f.s.rows_slice(0, 1), 2.0f, f.tmp.rows_slice(0, 1));
    ops::add(session, f.tmp, f.s, f.x);
    ComputeGraph g = session.take_graph();
    EXPECT_EQ(g.fuse(f.backend->fusion_rules(), *f.backend), 0u);
  }
  {  // Three norm+mul pairs reusing one scratch tensor (as layers do): three fusions.
    GraphSession session = exec.begin_recorded();
    TensorView t2 = f.backend->alloc_tensor(f.dtype, Shape{f.rows, f.cols});
    TensorView t3 = f.backend->alloc_tensor(f.dtype, Shape{f.rows, f.cols});
    f.norm_then_mul(session);
    ops::rms_norm(session, f.out, f.w, t2, 1e-5f);
    ops::mul(session, f.s, t2, t3);  // intermediate as the second operand
    ops::rms_norm(session, t3, f.w, t2, 1e-5f);
    ops::mul(session, t2, f.s, f.x);
    ComputeGraph g = session.take_graph();
    EXPECT_EQ(g.fuse(f.backend->fusion_rules(), *f.backend), 3u);
    EXPECT_EQ(g.dispatch_count(), 3u);
  }
}

// A consumer that writes the intermediate in place (as rope_kv_write rotates q where the
// Q/K/V product left it) fuses only under a rule whose fused kernel writes what the
// consumer leaves there (keeps_intermediate + consumer_updates_intermediate), and never
// when it also writes outside the intermediate.
TEST(Fusion, ConsumerUpdatingTheIntermediateFusesOnlyUnderARuleThatSaysSo) {
  NormFixture f(DType::f32, 7, 333);
  GraphExecutor exec(f.backend);
  FusionRules updating;
  for (const FusionRule& r : f.backend->fusion_rules().rules()) {
    if (r.name != "rms_norm+mul") continue;
    FusionRule copy = r;
    copy.keeps_intermediate = true;
    copy.consumer_updates_intermediate = true;
    updating.add(copy);
  }
  ASSERT_FALSE(updating.empty());
  auto in_place = [&](GraphSession& s) {
    ops::rms_norm(s, f.x, f.w, f.tmp, 1e-5f);
    ops::mul(s, f.tmp, f.s, f.tmp);
  };
  {  // The library's rule: the consumer writes the intermediate, no fusion.
    GraphSession session = exec.begin_recorded();
    in_place(session);
    ComputeGraph g = session.take_graph();
    EXPECT_EQ(g.fuse(f.backend->fusion_rules(), *f.backend), 0u);
  }
  {  // The updating rule: fused, and the fused dispatch writes the intermediate.
    GraphSession session = exec.begin_recorded();
    in_place(session);
    ComputeGraph g = session.take_graph();
    EXPECT_EQ(g.fuse(updating, *f.backend), 1u);
    const Dispatch& fused = *as_dispatch(g.nodes().back());
    EXPECT_TRUE(std::any_of(fused.writes.begin(), fused.writes.end(),
                            [&](const MemRange& r) { return r.contains(f.tmp.range()); }));
  }
  {  // A consumer writing partly outside the intermediate: no fusion under either rule.
    TensorView two = f.backend->alloc_tensor(DType::f32, Shape{2 * f.rows, f.cols});
    const TensorView first = two.rows_slice(0, f.rows), shifted = two.rows_slice(1, f.rows);
    GraphSession session = exec.begin_recorded();
    ops::rms_norm(session, f.x, f.w, first, 1e-5f);
    ops::mul(session, first, f.s, shifted);
    ComputeGraph g = session.take_graph();
    EXPECT_EQ(g.fuse(updating, *f.backend), 0u);
  }
}

class FusedMatchesUnfused : public ::testing::TestWithParam<DType> {};

TEST_P(FusedMatchesUnfused, WithinTolerance) {
  const DType t = GetParam();
  NormFixture f(t, 5, 1001);
  GraphExecutor exec(f.backend);
  GraphSession plain = exec.begin();
  f.norm_then_mul(plain);
  plain.finish();
  const std::vector<float> unfused = testing::download_floats(f.out);
  f.out.view.fill(testing::kPoisonByte);
  GraphSession recorded = exec.begin_recorded();
  f.norm_then_mul(recorded);
  const FinishStats stats = recorded.finish({.fuse = true});
  EXPECT_EQ(stats.fusions, 1u);
  const std::vector<float> fused = testing::download_floats(f.out);
  // The unfused path rounds the normalised value to the storage type once more.
  const double rtol = t == DType::f32 ? 1e-6 : t == DType::f16 ? 2e-3 : 1.6e-2;
  std::vector<double> expected(unfused.begin(), unfused.end());
  EXPECT_LE(testing::max_scaled_error(fused, expected, 1e-6, rtol), 1.0);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FusedMatchesUnfused, ::testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

// The end of a greedy decode step: argmax of the logits, then feed_token of its result.
// With fusion the pair is one dispatch (argmax_<T>_feed, or argmax_cluster_<T>_feed for a
// vocabulary-sized row on CUDA) that must leave every output as the pair does: the index,
// the next step's id, position and kv_length, and the history entry.
TEST(Fusion, ArgmaxThenFeedTokenIsOneDispatchWithTheSameResults) {
  std::vector<std::shared_ptr<Backend>> backends{cpu_backend()};
  if (cuda_device_count() > 0) backends.push_back(make_cuda_backend(0, testing::test_options()));
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for (const auto& backend : backends) {
    for (DType t : {DType::f32, DType::f16}) {
      for (int64_t cols : {1000, 50000}) {
        SCOPED_TRACE(::testing::Message() << backend->info().name << " " << dtype_name(t) << " cols " << cols);
        const TensorView x = backend->alloc_tensor(t, Shape{1, cols});
        std::vector<float> values = testing::random_floats(static_cast<size_t>(cols), seed + static_cast<uint64_t>(cols), -4.0f, 4.0f);
        const size_t planted = static_cast<size_t>((seed % static_cast<uint64_t>(cols - 1)) + 1);
        values[planted] = 8.0f;  // a unique largest value
        testing::upload_floats(x, values);
        const TensorView out = backend->alloc_tensor(DType::i32, Shape{1});
        const TensorView ids = backend->alloc_tensor(DType::i32, Shape{1});
        const TensorView positions = backend->alloc_tensor(DType::i32, Shape{1});
        const TensorView kv_length = backend->alloc_tensor(DType::i32, Shape{1});
        const TensorView history = backend->alloc_tensor(DType::i32, Shape{8});
        const int32_t position = 4;
        auto reset = [&] {
          for (const TensorView* v : {&out, &ids, &history}) v->view.fill(testing::kPoisonByte);
          positions.view.write(&position, 4);
          const int32_t length = position + 1;
          kv_length.view.write(&length, 4);
        };
        auto read_all = [&] {
          std::vector<int32_t> all(12);
          out.view.read(&all[0], 4);
          ids.view.read(&all[1], 4);
          positions.view.read(&all[2], 4);
          kv_length.view.read(&all[3], 4);
          history.view.read(&all[4], 32);
          return all;
        };
        auto emit = [&](GraphSession& s) {
          ops::argmax(s, x, out);
          ops::feed_token(s, out, ids, positions, kv_length, history);
        };
        GraphExecutor exec(backend);
        reset();
        GraphSession plain = exec.begin();
        emit(plain);
        plain.finish();
        const std::vector<int32_t> unfused = read_all();
        reset();
        GraphSession recorded = exec.begin_recorded();
        emit(recorded);
        EXPECT_EQ(recorded.finish({.fuse = true}).fusions, 1u);
        const std::vector<int32_t> fused = read_all();
        EXPECT_EQ(fused, unfused);
        const auto index = static_cast<int32_t>(planted);
        EXPECT_EQ(fused[0], index);
        EXPECT_EQ(fused[1], index);
        EXPECT_EQ(fused[2], position + 1);
        EXPECT_EQ(fused[3], position + 2);
        EXPECT_EQ(fused[4 + position + 1], index);
      }
    }
  }
}

TEST(Session, EveryFinishVariantComputesTheSame) {
  NormFixture f(DType::f32, 9, 257);
  GraphExecutor exec(f.backend);
  TensorView sum = f.backend->alloc_tensor(DType::f32, Shape{f.rows, f.cols});
  auto workload = [&](GraphSession& s) {
    f.norm_then_mul(s);
    ops::add(s, f.out, f.x, sum);
    ops::scale(s, sum, 0.5f, f.s);
  };
  auto snapshot = [&] {
    std::vector<std::vector<float>> v;
    for (const TensorView* t : {&f.out, &sum, &f.s}) v.push_back(testing::download_floats(*t));
    return v;
  };
  const std::vector<float> s0 = testing::download_floats(f.s);
  auto reset = [&] {
    testing::upload_floats(f.s, s0);
    for (const TensorView* t : {&f.out, &sum}) t->view.fill(testing::kPoisonByte);
  };
  GraphSession direct = exec.begin();
  workload(direct);
  direct.finish();
  const auto expected = snapshot();
  using Finish = std::function<void(GraphSession&)>;
  const std::vector<std::pair<std::string, Finish>> variants = {
      {"finish", [](GraphSession& s) { s.finish(); }},
      {"commit", [](GraphSession& s) { s.commit().wait_until_completed(); }},
      {"timing", [](GraphSession& s) { s.finish({.measure = true}); }},
      {"gpu_time", [](GraphSession& s) { s.finish({.measure = true}).gpu_ns; }},
      {"fusion", [](GraphSession& s) { EXPECT_EQ(s.finish({.fuse = true}).fusions, s.is_recording() ? 1u : 0u); }},
      {"fusion_timing", [](GraphSession& s) { s.finish({.fuse = true, .measure = true}); }},
      {"fusion_reorder", [](GraphSession& s) { s.finish({.fuse = true, .reorder = true, .encoding = Encoding::with_barriers}); }},
      {"fusion_reorder_timing", [](GraphSession& s) { s.finish({.fuse = true, .reorder = true, .encoding = Encoding::with_barriers, .measure = true}); }},
      {"optimized", [](GraphSession& s) { s.finish_optimized(); }},
      {"optimized_timing", [](GraphSession& s) { s.finish({.fuse = true, .reorder = true, .encoding = Encoding::dual_buffer, .measure = true}); }},
      {"dataflow", [](GraphSession& s) { s.finish({.fuse = true, .encoding = Encoding::dataflow, .measure = true}); }},
  };
  for (const auto& [name, finish] : variants) {
    SCOPED_TRACE(name);
    for (bool recorded : {false, true}) {
      reset();
      GraphSession s = recorded ? exec.begin_recorded() : exec.begin();
      workload(s);
      finish(s);
      const auto got = snapshot();
      for (size_t i = 0; i < got.size(); ++i) {
        std::vector<double> e(expected[i].begin(), expected[i].end());
        EXPECT_LE(testing::max_scaled_error(got[i], e, 1e-6, 1e-6), 1.0) << "tensor " << i;
      }
    }
  }
}

}  // namespace
}  // namespace onepass
