// Profiling: per-dispatch samples, per-op tables, Chrome traces and DOT dumps of a pass.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "onepass/exec/captured_graph.h"
#include "onepass/exec/counters.h"
#include "onepass/exec/graph_session.h"
#include "onepass/exec/profile.h"
#include "onepass/exec/profile_report.h"
#include "support/synthetic.h"
#include "support/testing.h"

namespace onepass {
namespace {

std::shared_ptr<Backend> profiling_backend(bool on) {
  Options o = testing::test_options();
  o.profile_dispatches = on;
  o.profile_submissions = on;
  return testing::cpu_backend(o);
}

TEST(Profile, EveryDispatchOfAReplayIsTimedInOrder) {
  auto backend = profiling_backend(true);
  testing::SyntheticGraph g = testing::SyntheticGraph::random(testing::fresh_seed(), 4, 40, 20000);
  g.upload(*backend);
  GraphExecutor exec(backend);
  GraphSession s = exec.begin_recorded();
  g.emit(s);
  CapturedGraph graph(*backend, s.take_graph());
  Profiler::global().clear();
  graph.run();
  const auto samples = Profiler::global().dispatches();
  ASSERT_EQ(samples.size(), 40u);
  const uint64_t step_ns = graph.gpu_time_ns().value_or(0);
  ASSERT_GT(step_ns, 0u);
  uint64_t sum = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    EXPECT_LE(samples[i].start_ns, samples[i].end_ns);
    EXPECT_LE(samples[i].end_ns, step_ns);
    if (i > 0) {
      EXPECT_GE(samples[i].start_ns, samples[i - 1].end_ns) << "one at a time while profiling";
    }
    EXPECT_EQ(samples[i].kernel, "test_mix_u32");
    EXPECT_GT(samples[i].bytes_written, 0u);
    sum += samples[i].end_ns - samples[i].start_ns;
  }
  // Sequential dispatches: their durations cover most of the step (the rest is scheduling).
  EXPECT_LE(sum, step_ns);
  EXPECT_GE(static_cast<double>(sum), 0.5 * static_cast<double>(step_ns));
  const ProfileReport report = make_profile_report(samples, ProfileGroup::op_kind, static_cast<double>(step_ns), 1, 10.0);
  double total = 0;
  for (const ProfileRow& r : report.rows) total += r.total_us;
  EXPECT_NEAR(total, report.dispatch_us, 1e-6);
  EXPECT_NEAR(report.dispatch_us, static_cast<double>(sum) / 1e3, 1e-3);
  const std::string table = report.table("test");
  EXPECT_NE(table.find("% step"), std::string::npos) << table;
  EXPECT_EQ(g.download(), g.simulate());
}

TEST(Profile, ChromeTraceHasOneEventPerDispatch) {
  std::vector<DispatchSample> samples(5);
  for (int i = 0; i < 5; ++i) {
    samples[i].kernel = cat("k", i);
    samples[i].op_kind = OpKind::matmul;
    samples[i].submission = "step";
    samples[i].start_ns = static_cast<uint64_t>(i) * 1000;
    samples[i].end_ns = samples[i].start_ns + (i == 1 ? 2500 : 800);  // 1 overlaps 2 and 3
    samples[i].dims.grid.x = 4;
  }
  const auto lanes = assign_lanes(samples);
  EXPECT_EQ(lanes, (std::vector<uint32_t>{0, 0, 1, 1, 0}));
  const auto trace = nlohmann::json::parse(chrome_trace_json(samples, "onepass"));
  int complete = 0;
  double last_ts = -1;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ++complete;
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    EXPECT_GE(e["ts"].get<double>(), last_ts);
    last_ts = e["ts"].get<double>();
    EXPECT_EQ(e["args"]["op_kind"], "matmul");
    EXPECT_EQ(e["args"]["grid"][0], 4);
  }
  EXPECT_EQ(complete, 5);
}

TEST(Profile, OffRecordsNothing) {
  auto backend = profiling_backend(false);
  testing::SyntheticGraph g = testing::SyntheticGraph::random(testing::fresh_seed(), 3, 20, 4000);
  g.upload(*backend);
  GraphExecutor exec(backend);
  GraphSession s = exec.begin_recorded();
  g.emit(s);
  CapturedGraph graph(*backend, s.take_graph());
  Profiler::global().clear();
  reset_counters();
  graph.run();
  EXPECT_TRUE(Profiler::global().dispatches().empty());
  EXPECT_TRUE(Profiler::global().submissions().empty());
  // Counters mean the same with profiling off: one submission, one sync, 20 dispatches.
  const Counters c = counters();
  EXPECT_EQ(c.submissions, 1u);
  EXPECT_EQ(c.syncs, 1u);
  EXPECT_EQ(c.dispatches, 20u);
}

TEST(Profile, LabelledSubmissionsAreTimed) {
  auto backend = profiling_backend(true);
  testing::SyntheticGraph g = testing::SyntheticGraph::random(testing::fresh_seed(), 3, 10, 4000);
  g.upload(*backend);
  Profiler::global().clear();
  GraphExecutor exec(backend);
  for (const char* label : {"layer.attn", "layer.ffn"}) {
    GraphSession s = exec.begin();
    g.emit(s);
    s.encoder().commit_and_wait_labeled(label);
  }
  const auto subs = Profiler::global().submissions();
  ASSERT_EQ(subs.size(), 2u);
  EXPECT_EQ(subs[0].label, "layer.attn");
  EXPECT_EQ(subs[1].label, "layer.ffn");
}

TEST(Profile, DotDumpParsesWithGraphviz) {
  auto backend = testing::cpu_backend();
  testing::SyntheticGraph g = testing::SyntheticGraph::random(testing::fresh_seed(), 3, 15, 4000);
  g.upload(*backend);
  GraphExecutor exec(backend);
  GraphSession s = exec.begin_recorded();
  g.emit(s);
  const std::string dot = s.take_graph().to_dot("test");
  EXPECT_NE(dot.find("digraph"), std::string::npos);
  if (std::system("command -v dot > /dev/null 2>&1") != 0) GTEST_SKIP() << "graphviz not installed";
  const std::string path = ::testing::TempDir() + "/onepass_test.dot";
  std::ofstream(path) << dot;
  EXPECT_EQ(std::system(("dot -Tsvg " + path + " -o " + path + ".svg").c_str()), 0);
}

}  // namespace
}  // namespace onepass
