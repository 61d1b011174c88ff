// Property tests over thousands of random graphs of the synthetic kernel: every pass and
// encoding, run with the concurrent CPU schedule, must give bit-identical results to
// sequential execution of the original graph, and leave no RAW/WAR/WAW pair unordered.
#include <gtest/gtest.h>

#include <algorithm>

#include "onepass/exec/captured_graph.h"
#include "onepass/exec/compute_graph.h"
#include "onepass/exec/conflict.h"
#include "onepass/exec/graph_session.h"
#include "support/synthetic.h"
#include "support/testing.h"

namespace onepass {
namespace {

using testing::SyntheticGraph;

constexpr int kShards = 8;
constexpr int kGraphsPerShard = 250;  // 2000 graphs in all

// Checks that a barrier-ordered node list (after passes) orders every hazard pair of the
// original program order.
void expect_barriers_order_all_hazards(const SyntheticGraph& g, const std::vector<Node>& nodes,
                                       const std::vector<Dispatch>& original) {
  const std::vector<uint32_t> barriers = plan_barriers(nodes);
  std::vector<size_t> position(original.size());
  std::vector<size_t> group_of(original.size());
  size_t pos = 0;
  size_t group = 0;
  size_t next_barrier = 0;
  for (const Node& n : nodes) {
    const Dispatch* d = as_dispatch(n);
    if (d == nullptr) continue;
    if (next_barrier < barriers.size() && barriers[next_barrier] == pos) {
      ++group;
      ++next_barrier;
    }
    const size_t id = g.node_index_of(*d);
    position[id] = pos++;
    group_of[id] = group;
  }
  ASSERT_EQ(pos, original.size());
  for (size_t j = 0; j < original.size(); ++j) {
    for (size_t i = 0; i < j; ++i) {
      const Hazard h = hazard_between(original[i], original[j]);
      if (h == Hazard::none) continue;
      ASSERT_LT(group_of[i], group_of[j]) << hazard_name(h) << " pair (" << i << ", " << j
                                          << ") left unordered";
    }
  }
}

void expect_dataflow_orders_all_hazards(const std::vector<Dispatch>& original, const DataflowPlan& plan) {
  const size_t n = original.size();
  std::vector<std::vector<bool>> reach(n, std::vector<bool>(n, false));
  for (size_t j = 0; j < n; ++j) {
    for (uint32_t i : plan.deps[j]) {
      ASSERT_LT(i, j);
      reach[j][i] = true;
      for (size_t k = 0; k < n; ++k) {
        if (reach[i][k]) reach[j][k] = true;
      }
    }
  }
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = 0; i < j; ++i) {
      const Hazard h = hazard_between(original[i], original[j]);
      if (h != Hazard::none) {
        ASSERT_TRUE(reach[j][i]) << hazard_name(h) << " pair (" << i << ", " << j << ") has no path";
      }
    }
  }
}

class RandomGraphs : public ::testing::TestWithParam<int> {};

TEST_P(RandomGraphs, EveryEncodingMatchesSequentialExecution) {
  const uint64_t base = testing::fresh_seed() + static_cast<uint64_t>(GetParam()) * 1000003u;
  auto backend = testing::cpu_backend();
  GraphExecutor exec(backend);
  for (int k = 0; k < kGraphsPerShard; ++k) {
    const uint64_t seed = base + static_cast<uint64_t>(k);
    SCOPED_TRACE(::testing::Message() << "graph seed " << seed << " (ONEPASS_TEST_SEED-independent)");
    std::mt19937_64 rng(seed);
    const int buffers = 2 + static_cast<int>(rng() % 4);
    const int nodes = 2 + static_cast<int>(rng() % 50);
    SyntheticGraph g = SyntheticGraph::random(seed, buffers, nodes, 600);
    g.upload(*backend);
    const auto expected = g.simulate();
    std::vector<Dispatch> original;
    for (size_t i = 0; i < g.nodes().size(); ++i) original.push_back(g.dispatch(*backend, i));

    auto record = [&] {
      GraphSession s = exec.begin_recorded();
      g.emit(s);
      return s.take_graph();
    };
    auto check_result = [&](const char* what) {
      ASSERT_EQ(g.download(), expected) << what;
      g.reset_contents();
    };

    {  // Direct session, auto barriers.
      GraphSession s = exec.begin();
      g.emit(s);
      s.finish();
      check_result("direct");
    }
    {  // Recorded, replayed as recorded.
      ComputeGraph graph = record();
      CommandEncoder enc(*backend, EncoderMode::direct, SubmitMode::graph);
      graph.encode_sequential(enc);
      enc.commit_and_wait();
      check_result("sequential");
      expect_barriers_order_all_hazards(g, graph.nodes(), original);
    }
    {  // Reordered, barriers recomputed.
      ComputeGraph graph = record();
      graph.reorder();
      expect_barriers_order_all_hazards(g, graph.nodes(), original);
      CommandEncoder enc(*backend, EncoderMode::direct, SubmitMode::graph);
      graph.encode_with_barriers(enc);
      enc.commit_and_wait();
      check_result("reorder + barriers");
    }
    {  // Exact dataflow DAG.
      ComputeGraph graph = record();
      expect_dataflow_orders_all_hazards(original, plan_dataflow(graph.nodes()));
      CommandEncoder enc(*backend, EncoderMode::direct, SubmitMode::graph);
      graph.encode_dataflow(enc);
      enc.commit_and_wait();
      check_result("dataflow");
    }
    {  // Dual buffer after reorder.
      ComputeGraph graph = record();
      graph.reorder();
      CommandEncoder first(*backend, EncoderMode::direct, SubmitMode::graph);
      CommandEncoder second(*backend, EncoderMode::direct, SubmitMode::graph);
      graph.encode_dual_buffer(first, second);
      second.commit_and_wait();
      check_result("dual buffer");
    }
    {  // Captured and replayed twice.
      CaptureOptions o;
      o.encoding = (k % 2) ? GraphEncoding::dataflow : GraphEncoding::barriers;
      CapturedGraph captured(*backend, record(), o);
      captured.run();
      check_result("captured replay 1");
      captured.run();
      check_result("captured replay 2");
    }
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Shards, RandomGraphs, ::testing::Range(0, kShards));

// The property test can fail: without barriers, the concurrent schedule runs a consumer
// before its producer and the result differs from sequential execution.
TEST(RandomGraphs, MissingBarrierIsDetectedByTheConcurrentSchedule) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a deliberate data race; ThreadSanitizer would (rightly) report it";
#endif
  Options o = testing::test_options();
  o.auto_barrier = false;
  auto backend = testing::cpu_backend(o);
  auto a = backend->alloc(64 * 1024 * 4);
  auto b = backend->alloc(64 * 1024 * 4);
  auto c = backend->alloc(64 * 1024 * 4);
  a.write(testing::random_u32(64 * 1024, 1));
  const auto kernel = &backend->registry().get("test_mix_u32");
  auto mix = [&](const BufferView& in, const BufferView& out, uint32_t salt) {
    testing::MixArgs args{static_cast<const uint32_t*>(in.data()), nullptr, static_cast<uint32_t*>(out.data()),
                      64 * 1024, 0, salt};
    LaunchDims dims;
    dims.grid.x = 64 * 1024 / testing::kMixBlock;
    Dispatch d(*kernel, dims, args, OpKind::add);
    d.read(in).write(out);
    return d;
  };
  // Reference: with the barrier.
  CommandEncoder ok(*backend);
  ok.dispatch(mix(a, b, 1));
  ok.memory_barrier();
  ok.dispatch(mix(b, c, 2));
  ok.commit_and_wait();
  const auto expected = c.read_as<uint32_t>();
  b.fill(0);
  c.fill(0);
  // Same work, barrier missing.
  CommandEncoder racy(*backend);
  racy.dispatch(mix(a, b, 1));
  racy.dispatch(mix(b, c, 2));
  racy.commit_and_wait();
  EXPECT_NE(c.read_as<uint32_t>(), expected);
}

}  // namespace
}  // namespace onepass
