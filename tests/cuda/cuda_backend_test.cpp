// The CUDA backend on a real GPU: memory, errors, direct launches, CUDA graphs (cache,
// update in place, replay), every encoding against sequential execution. Skipped
// without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <tuple>

#include "onepass/ops/ops.h"
#include "onepass/exec/captured_graph.h"
#include "onepass/exec/compute_graph.h"
#include "onepass/exec/counters.h"
#include "onepass/exec/graph_session.h"
#include "onepass/ops/attention.h"
#include "onepass/ops/rope.h"
#include "onepass/exec/profile.h"
#include "onepass/core/half.h"
#include "onepass/ops/quant.h"
#include "cuda/test_kernels.h"
#include "support/synthetic.h"
#include "support/testing.h"

namespace onepass {
namespace {

// A CUDA backend on device 0 with the test kernels added (test_kernels.cu).
std::shared_ptr<Backend> make_test_backend(const Options& options) {
  std::shared_ptr<Backend> backend = make_cuda_backend(0, options);
#if ONEPASS_HAVE_CUDA
  testing::add_cuda_test_kernels(*backend);
#endif
  return backend;
}

std::shared_ptr<Backend> gpu() {
  static std::shared_ptr<Backend> backend =
      cuda_device_count() > 0 ? make_test_backend(testing::test_options()) : nullptr;
  return backend;
}

#define REQUIRE_GPU()                                        \
  auto backend = gpu();                                      \
  if (!backend) GTEST_SKIP() << "no CUDA device available"

using testing::poisoned_tensor;
using testing::random_weights;

TEST(CudaBackend, DescribesTheDevice) {
  REQUIRE_GPU();
  const DeviceInfo& info = backend->info();
  EXPECT_EQ(info.kind, BackendKind::cuda);
  EXPECT_GT(info.multiprocessors, 0);
  EXPECT_GT(info.l2_bytes, 0u);
  EXPECT_GT(info.total_memory, 1u << 30);
  EXPECT_GE(info.shared_per_block_optin, info.shared_per_block);
  std::printf("[gpu] %s: %d SMs, sm_%d%d, %.1f GiB, L2 %.1f MiB\n", info.name.c_str(), info.multiprocessors,
              info.compute_major, info.compute_minor, info.total_memory / 1073741824.0, info.l2_bytes / 1048576.0);
}

TEST(CudaBackend, CopiesSmallAndLargeBuffers) {
  REQUIRE_GPU();
  for (size_t n : {size_t{1}, size_t{4096}, size_t{3} << 20, (size_t{17} << 20) + 12}) {
    BufferView v = backend->alloc(n * 4);
    const auto in = testing::random_u32(n, n);
    v.write(in);
    EXPECT_EQ(v.read_as<uint32_t>(), in) << n;
    if (n < 3) continue;
    v.slice(4, 8).fill(0xcd);
    const auto out = v.read_as<uint32_t>();
    EXPECT_EQ(out[0], in[0]);
    EXPECT_EQ(out[1], 0xcdcdcdcdu);
    EXPECT_EQ(out[3], in[3]);
  }
}

TEST(CudaBackend, OutOfMemoryIsAClearError) {
  REQUIRE_GPU();
  try {
    backend->alloc(size_t{1} << 50);
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("out of memory"), std::string::npos) << what;
    EXPECT_NE(what.find("1125899906842624 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("free"), std::string::npos) << what;
  }
  // The backend is still usable afterwards.
  BufferView v = backend->alloc(64);
  v.write(std::vector<uint32_t>(16, 7));
  EXPECT_EQ(v.read_as<uint32_t>()[15], 7u);
}

TEST(CudaBackend, HostVisibleMemoryIsReadByKernels) {
  REQUIRE_GPU();
  BufferView host = backend->alloc_host_visible(256 * 4);
  BufferView out = backend->alloc(256 * 4);
  auto* p = static_cast<uint32_t*>(host.data());
  for (uint32_t i = 0; i < 256; ++i) p[i] = i * 3;  // plain host stores
  testing::MixArgs args{static_cast<const uint32_t*>(host.data()), nullptr, static_cast<uint32_t*>(out.data()), 256, 0, 9};
  Dispatch d(backend->registry().get("test_mix_u32"), LaunchDims{{2, 1, 1}, {128, 1, 1}, 0}, args, OpKind::copy);
  d.read(host).write(out);
  CommandEncoder enc(*backend);
  enc.dispatch(d);
  enc.commit_and_wait();
  const auto got = out.read_as<uint32_t>();
  for (uint32_t i = 0; i < 256; ++i) ASSERT_EQ(got[i], testing::mix_u32(i * 3, 0, 9)) << i;
}

TEST(CudaBackend, BadLaunchShapeIsAnError) {
  REQUIRE_GPU();
  BufferView out = backend->alloc(64);
  testing::MixArgs args{static_cast<const uint32_t*>(out.data()), nullptr, static_cast<uint32_t*>(out.data()), 16, 0, 1};
  Dispatch d(backend->registry().get("test_mix_u32"), LaunchDims{{1, 1, 1}, {2048, 1, 1}, 0}, args, OpKind::copy);
  d.write(out);
  CommandEncoder enc(*backend);
  EXPECT_THROW(enc.dispatch(d), Error);
}

TEST(CudaBackend, ClusterLaunchLargerThanAClusterIsAnError) {
  REQUIRE_GPU();
  // flash_decode_cluster runs each grid row as one cluster: more chunks than a cluster
  // holds must be refused before the launch, naming the kernel.
  const Kernel& kernel = backend->registry().get("flash_decode_cluster_f16");
  ASSERT_TRUE(kernel.cluster_rows);
  BufferView out = backend->alloc(64);
  ops::FlashDecodeArgs args{};
  LaunchDims dims{{kMaxClusterBlocks + 1, 1, 1}, {128, 1, 1}, 0};
  Dispatch d(kernel, dims, args, OpKind::attention);
  d.write(out);
  CommandEncoder enc(*backend);
  try {
    enc.dispatch(d);
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("flash_decode_cluster_f16"), std::string::npos) << e.what();
  }
}

// A device fault poisons the CUDA context, so it runs in a child process (gtest
// re-executes the binary for "threadsafe" death tests).
[[noreturn]] void fault_in_child() {
  auto b = make_test_backend(testing::test_options());
  testing::MixArgs args{nullptr, nullptr, nullptr, 1, 0, 0};
  Dispatch d(b->registry().get("test_fault"), LaunchDims{{1, 1, 1}, {32, 1, 1}, 0}, args, OpKind::other);
  d.writes.push_back({0, 4});
  CommandEncoder enc(*b);
  enc.dispatch(d);
  try {
    enc.commit_and_wait();
  } catch (const Error& e) {
    std::fprintf(stderr, "caught: %s\n", e.what());
    std::exit(std::string(e.what()).find("failed on the device") != std::string::npos ? 0 : 3);
  }
  std::exit(2);
}

TEST(CudaBackendDeathTest, KernelFaultBecomesAnError) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device available";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(fault_in_child(), ::testing::ExitedWithCode(0), "caught: \\[cuda\\]");
}

// Every encoding of random graphs gives the sequential result, bit for bit.
TEST(CudaGraphs, EveryEncodingMatchesSequentialExecution) {
  REQUIRE_GPU();
  GraphExecutor exec(backend);
  const uint64_t base = testing::fresh_seed();
  for (int k = 0; k < 60; ++k) {
    const uint64_t seed = base + static_cast<uint64_t>(k);
    SCOPED_TRACE(::testing::Message() << "graph seed " << seed);
    testing::SyntheticGraph g = testing::SyntheticGraph::random(seed, 2 + k % 4, 5 + k % 60, 50000);
    g.upload(*backend);
    const auto expected = g.simulate();
    auto record = [&] {
      GraphSession s = exec.begin_recorded();
      g.emit(s);
      return s.take_graph();
    };
    auto check_result = [&](const char* what) {
      ASSERT_EQ(g.download(), expected) << what;
      g.reset_contents();
    };
    {
      GraphSession s = exec.begin();
      g.emit(s);
      s.finish();
      check_result("direct");
    }
    {
      GraphSession s = exec.begin_recorded();
      g.emit(s);
      s.finish();
      check_result("recorded");
    }
    {
      GraphSession s = exec.begin_recorded();
      g.emit(s);
      s.finish({.fuse = true, .reorder = true, .encoding = Encoding::with_barriers});
      check_result("reordered");
    }
    {
      GraphSession s = exec.begin_recorded();
      g.emit(s);
      s.finish({.fuse = true, .encoding = Encoding::dataflow, .measure = true});
      check_result("dataflow");
    }
    {
      GraphSession s = exec.begin_recorded();
      g.emit(s);
      s.finish_optimized();
      check_result("dual buffer");
    }
    for (GraphEncoding encoding : {GraphEncoding::sequential, GraphEncoding::barriers, GraphEncoding::dataflow}) {
      CaptureOptions o;
      o.encoding = encoding;
      CapturedGraph captured(*backend, record(), o);
      captured.run();
      check_result(graph_encoding_name(encoding));
      captured.run();
      check_result("second replay");
    }
    if (HasFatalFailure()) return;
  }
}

TEST(CudaGraphs, SameTopologyIsUpdatedInPlaceNotRebuilt) {
  REQUIRE_GPU();
  auto* cuda_backend = backend.get();
  testing::SyntheticGraph g = testing::SyntheticGraph::random(testing::fresh_seed(), 3, 20, 4000);
  g.upload(*backend);
  const auto expected = g.simulate();
  GraphExecutor exec(backend);
  auto run_once = [&] {
    GraphSession s = exec.begin_recorded();
    g.emit(s);
    s.finish();
    EXPECT_EQ(g.download(), expected);
    g.reset_contents();
  };
  run_once();
  const GraphCacheStats before = cuda_backend->graph_cache_stats();
  for (int i = 0; i < 5; ++i) run_once();
  const GraphCacheStats after = cuda_backend->graph_cache_stats();
  EXPECT_EQ(after.instantiated, before.instantiated);
  EXPECT_EQ(after.updated - before.updated, 5u);
  // Other arguments (another graph of the same shape on other buffers): updated too.
  g.upload(*backend);
  run_once();
  EXPECT_EQ(cuda_backend->graph_cache_stats().instantiated, before.instantiated);
}

TEST(CudaGraphs, ReplayReadsStepInputsFromBuffers) {
  REQUIRE_GPU();
  // A replayed graph must see new buffer contents (the per-step inputs), giving the same
  // result as a fresh recording would.
  BufferView step = backend->alloc_host_visible(512 * 4);
  BufferView mid = backend->alloc(512 * 4);
  BufferView out = backend->alloc(512 * 4);
  const Kernel& k = backend->registry().get("test_mix_u32");
  auto pass = [&](GraphSession& s) {
    testing::MixArgs a{static_cast<const uint32_t*>(step.data()), nullptr, static_cast<uint32_t*>(mid.data()), 512, 0, 1};
    Dispatch d1(k, LaunchDims{{4, 1, 1}, {128, 1, 1}, 0}, a, OpKind::copy);
    d1.read(step).write(mid);
    s.dispatch(d1);
    testing::MixArgs b{static_cast<const uint32_t*>(mid.data()), static_cast<const uint32_t*>(step.data()),
                   static_cast<uint32_t*>(out.data()), 512, 512, 2};
    Dispatch d2(k, LaunchDims{{4, 1, 1}, {128, 1, 1}, 0}, b, OpKind::add);
    d2.read(mid).read(step).write(out);
    s.dispatch(d2);
  };
  GraphExecutor exec(backend);
  GraphSession rec = exec.begin_recorded();
  pass(rec);
  CapturedGraph replay(*backend, rec.take_graph());
  for (uint32_t stepno = 0; stepno < 4; ++stepno) {
    auto* p = static_cast<uint32_t*>(step.data());
    for (uint32_t i = 0; i < 512; ++i) p[i] = i * 7 + stepno * 1000;
    replay.run();
    const auto replayed = out.read_as<uint32_t>();
    GraphSession fresh = exec.begin_recorded();
    pass(fresh);
    fresh.finish();
    EXPECT_EQ(out.read_as<uint32_t>(), replayed) << "step " << stepno;
    EXPECT_EQ(replayed[5], testing::mix_u32(testing::mix_u32(5 * 7 + stepno * 1000, 0, 1), 5 * 7 + stepno * 1000, 2));
  }
}

TEST(CudaProfiling, DirectLaunchesAreTimedPerDispatch) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device available";
  Options o = testing::test_options();
  o.profile_dispatches = true;
  auto b = make_test_backend(o);
  testing::SyntheticGraph g = testing::SyntheticGraph::random(7, 3, 12, 100000);
  g.upload(*b);
  Profiler::global().clear();
  GraphExecutor exec(b);
  GraphSession s = exec.begin();
  g.emit(s);
  s.encoder().commit_and_wait_labeled("profiled");
  const auto samples = Profiler::global().dispatches();
  ASSERT_EQ(samples.size(), 12u);
  uint64_t last_end = 0;
  for (const DispatchSample& d : samples) {
    EXPECT_EQ(d.submission, "profiled");
    EXPECT_EQ(d.kernel, "test_mix_u32");
    EXPECT_LE(d.start_ns, d.end_ns);
    EXPECT_GE(d.start_ns + 1000, last_end);  // one stream: in order (1 us slack for event resolution)
    last_end = d.end_ns;
  }
  EXPECT_EQ(g.download(), g.simulate());
}

TEST(CudaProfiling, GraphReplaysAreTimedPerDispatch) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device available";
  Options o = testing::test_options();
  o.profile_dispatches = true;
  auto b = make_test_backend(o);
  testing::SyntheticGraph g = testing::SyntheticGraph::random(11, 4, 30, 200000);
  g.upload(*b);
  GraphExecutor exec(b);
  GraphSession s = exec.begin_recorded();
  g.emit(s);
  CapturedGraph graph(*b, s.take_graph());
  Profiler::global().clear();
  graph.run();
  const uint64_t step = graph.gpu_time_ns().value_or(0);
  const auto samples = Profiler::global().dispatches();
  ASSERT_EQ(samples.size(), 30u);
  ASSERT_GT(step, 0u);
  for (const DispatchSample& d : samples) {
    EXPECT_LE(d.start_ns, d.end_ns);
    EXPECT_LE(d.end_ns, step + 2000);
  }
  EXPECT_EQ(g.download(), g.simulate());
  graph.run();  // samples again for the second replay
  EXPECT_EQ(Profiler::global().dispatches().size(), 60u);
}

// The fused matrix-vector kernels (RMS-norm folded into x staging, residual add and SiLU x
// up or GELU x up in the epilogue) against the unfused sequence on the same GPU. Both quantize x to
// int8 the same way, so they agree to rounding; a wrong row pairing, scale or race does not.
// K = 8192 stages x in several register batches (K <= 2048 in one).
TEST(CudaFusion, FusedMatvecMatchesTheUnfusedSequence) {
  REQUIRE_GPU();
  GraphExecutor exec(backend);
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for (DType type : {DType::f16, DType::f32, DType::q4_0, DType::q4_1, DType::q8_0, DType::q4_k, DType::q6_k}) {
    for (int64_t m : {int64_t{1}, int64_t{3}}) {
      for (int64_t k : {int64_t{512}, int64_t{2048}, int64_t{8192}}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(type) << " m " << m << " k " << k);
        // Gate and up rows: 2 n. One row of x, K = 512 and n = 8200: the one-unit formats'
        // short-row kernels (cuda::cuda_mv1_short_rows, at least 8192 rows) for all three.
        const int64_t n = m == 1 && k == 512 ? 8200 : 600;
        auto alloc = [&](Shape shape) { return poisoned_tensor(*backend, shape); };
        auto weights = [&](int64_t rows, uint64_t s) { return random_weights(*backend, type, rows, k, s); };
        TensorView x = alloc(Shape{m, k}), norm_w = alloc(Shape{1, k}), residual = alloc(Shape{m, n});
        testing::upload_floats(x, testing::random_floats(static_cast<size_t>(m * k), seed + 1, -2.0f, 2.0f));
        testing::upload_floats(norm_w, testing::random_floats(static_cast<size_t>(k), seed + 2, 0.5f, 1.5f));
        testing::upload_floats(residual, testing::random_floats(static_cast<size_t>(m * n), seed + 3));
        TensorView w1 = weights(n, seed + 4), w2 = weights(2 * n, seed + 5);
        TensorView xn = alloc(Shape{m, k}), t1 = alloc(Shape{m, n}), out1 = alloc(Shape{m, n});
        TensorView gu = alloc(Shape{m, 2 * n}), out2 = alloc(Shape{m, n});
        TensorView t3 = alloc(Shape{m, n}), out3 = alloc(Shape{m, n});
        TensorView gu4 = alloc(Shape{m, 2 * n}), out4 = alloc(Shape{m, n});
        auto run = [&](bool fuse) {
          out4.view.fill(testing::kPoisonByte);
          out1.view.fill(testing::kPoisonByte);
          out2.view.fill(testing::kPoisonByte);
          out3.view.fill(testing::kPoisonByte);
          GraphSession s = exec.begin_recorded();
          ops::rms_norm(s, x, norm_w, xn, 1e-5f);
          ops::matmul(s, xn, w1, t1);
          ops::add(s, t1, residual, out1);
          ops::rms_norm(s, x, norm_w, xn, 1e-5f);
          ops::matmul(s, xn, w2, gu);
          const uint64_t row = static_cast<uint64_t>(2 * n) * 4;
          ops::silu_mul(s, TensorView(gu.view, DType::f32, Shape{m, n}, row),
                     TensorView(gu.view.slice_from(static_cast<size_t>(n) * 4), DType::f32, Shape{m, n}, row), out2);
          ops::matmul(s, x, w1, t3);  // residual only, as the attention output and down projections
          ops::add(s, t3, residual, out3);
          ops::rms_norm(s, x, norm_w, xn, 1e-5f);
          ops::matmul(s, xn, w2, gu4);
          ops::gelu_mul(s, TensorView(gu4.view, DType::f32, Shape{m, n}, row),
                        TensorView(gu4.view.slice_from(static_cast<size_t>(n) * 4), DType::f32, Shape{m, n}, row),
                        out4);
          const FinishStats stats = fuse ? s.finish({.fuse = true}) : (s.finish(), FinishStats{});
          if (fuse) {
            EXPECT_EQ(stats.fusions, 7u);
          }
          return std::array{testing::download_floats(out1), testing::download_floats(out2),
                            testing::download_floats(out3), testing::download_floats(out4)};
        };
        const auto plain = run(false);
        const auto fused = run(true);
        const auto again = run(true);
        EXPECT_EQ(fused, again) << "fused results are reproducible";
        for (int which = 0; which < 4; ++which) {
          const auto& got = fused[which];
          const auto& want = plain[which];
          double scale = 0;
          for (float v : want) scale = std::max(scale, static_cast<double>(std::abs(v)));
          std::vector<double> expected(want.begin(), want.end());
          size_t worst = 0;
          const double err = testing::max_scaled_error(got, expected, 2e-3 * scale, 0.0, &worst);
          const char* names[] = {"norm + residual", "norm + silu", "residual", "norm + gelu"};
          EXPECT_LE(err, 1.0) << names[which] << " at "
                              << worst << ": "
                              << got[worst] << " vs " << want[worst] << " (scale " << scale << ")";
        }
      }
    }
  }
}

// rope_kv_write folded into a one-token Q/K/V product (the decode step's QKV -> RoPE + KV
// write; without the norm, whose fusion rounds differently): the product's output (q rotated in place, k and v as computed) and
// both caches, every byte of them, must be what the unfused sequence leaves, for every
// cache type, a partial rotation and a position outside the cache (no cache write).
TEST(CudaFusion, QkvProductWithRopeAndCacheWriteMatchesTheUnfusedSequence) {
  REQUIRE_GPU();
  GraphExecutor exec(backend);
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const int64_t heads = 8, kv_heads = 2, hd = 64, k = 512, ctx = 16;
  const int64_t n = (heads + 2 * kv_heads) * hd;
  // One type per one-row body: the unit-per-lane block body, q6_k's half-block body, dense.
  for (DType type : {DType::q4_0, DType::q6_k, DType::f16}) {
    for (DType cache_type : {DType::f16, DType::f32, DType::bf16}) {
      for (int32_t position : {5, 15, 16}) {
        for (int32_t rotary : {0, 32}) {
          for (ops::RopeCosSin use : {ops::RopeCosSin::none, ops::RopeCosSin::store, ops::RopeCosSin::load}) {
            SCOPED_TRACE(::testing::Message() << dtype_name(type) << " cache " << dtype_name(cache_type) << " position "
                                              << position << " rotary " << rotary << " cos_sin use "
                                              << static_cast<int>(use));
            TensorView x = poisoned_tensor(*backend, Shape{1, k});
            testing::upload_floats(x, testing::random_floats(static_cast<size_t>(k), seed + 1, -2.0f, 2.0f));
            TensorView w = random_weights(*backend, type, n, k, seed + 3);
            TensorView qkv = poisoned_tensor(*backend, Shape{1, n});
            TensorView positions(backend->alloc(4), DType::i32, Shape{1}, 4);
            positions.view.write(&position, 4);
            const uint64_t cache_row = static_cast<uint64_t>(hd) * dtype_size(cache_type);
            auto cache = [&] {
              return TensorView(backend->alloc(cache_row * static_cast<uint64_t>(kv_heads * ctx)), cache_type,
                                Shape{kv_heads, ctx, hd}, cache_row);
            };
            TensorView k_cache = cache(), v_cache = cache();
            ops::RopeParams rope;
            rope.rotary_dims = rotary;
            rope.theta = 10000.0f;
            // The token's (cos, sin) per pair: stored by the op, or loaded (arbitrary values).
            const int64_t rotated = rotary == 0 ? hd : rotary;
            TensorView cos_sin = poisoned_tensor(*backend, Shape{1, rotated});
            const auto given = testing::random_floats(static_cast<size_t>(rotated), seed + 5, -1.0f, 1.0f);
            if (use != ops::RopeCosSin::none) {
              rope.cos_sin = cos_sin.reshaped(Shape{rotated});
              rope.cos_sin_use = use;
            }
            auto slice = [&](int64_t from, int64_t heads_in) {
              return TensorView(qkv.view.slice(static_cast<size_t>(from) * 4, static_cast<size_t>(heads_in * hd) * 4),
                                DType::f32, Shape{1, heads_in, hd});
            };
            auto run = [&](bool fuse) {
              for (const TensorView* t : {&qkv, &k_cache, &v_cache, &cos_sin}) t->view.fill(testing::kPoisonByte);
              if (use == ops::RopeCosSin::load) testing::upload_floats(cos_sin, given);
              GraphSession s = exec.begin_recorded();
              ops::matmul(s, x, w, qkv);
              ops::rope_kv_write(s, slice(0, heads), slice(heads * hd, kv_heads), slice((heads + kv_heads) * hd, kv_heads),
                              k_cache, v_cache, positions, rope);
              const FinishStats stats = fuse ? s.finish({.fuse = true}) : (s.finish(), FinishStats{});
              if (fuse) {
                EXPECT_EQ(stats.fusions, 1u);
              }
              std::vector<uint8_t> kc(k_cache.view.size()), vc(v_cache.view.size());
              k_cache.view.read(kc.data(), kc.size());
              v_cache.view.read(vc.data(), vc.size());
              std::vector<uint8_t> cs(cos_sin.view.size());
              cos_sin.view.read(cs.data(), cs.size());
              return std::tuple{testing::download_floats(qkv), kc, vc, cs};
            };
            const auto [plain_qkv, plain_k, plain_v, plain_cs] = run(false);
            const auto [fused_qkv, fused_k, fused_v, fused_cs] = run(true);
            EXPECT_EQ(fused_qkv, plain_qkv) << "q rotated in place, k and v as computed";
            EXPECT_EQ(fused_k, plain_k) << "k cache";
            EXPECT_EQ(fused_v, plain_v) << "v cache";
            EXPECT_EQ(fused_cs, plain_cs) << "the stored (cos, sin), or the loaded ones untouched";
            if (use == ops::RopeCosSin::store) {
              std::vector<float> stored(fused_cs.size() / 4);  // poison reads as NaN
              std::memcpy(stored.data(), fused_cs.data(), fused_cs.size());
              EXPECT_TRUE(std::all_of(stored.begin(), stored.end(), [](float v) { return std::isfinite(v); }))
                  << "every pair's (cos, sin) stored";
            }
            if (position >= ctx) {
              const auto poisoned = [](uint8_t b) { return b == testing::kPoisonByte; };
              EXPECT_TRUE(std::all_of(fused_k.begin(), fused_k.end(), poisoned))
                  << "a position outside the cache writes nothing";
            }
          }
        }
      }
    }
  }
}

// What the fused kernels read before their PDL wait must be declared (early_reads), so
// that the backend never launches them early after a dispatch writing it: the residual of
// a product fused with its add, and rope_kv_write's loaded angles and position.
TEST(CudaFusion, ResidualAndLoadedAnglesAreEarlyReads) {
  REQUIRE_GPU();
  GraphExecutor exec(backend);
  const int64_t n = 64, k = 256, hd = 16;
  TensorView x = poisoned_tensor(*backend, Shape{1, k});
  TensorView w = random_weights(*backend, DType::q4_1, n, k, 7);
  TensorView tmp = poisoned_tensor(*backend, Shape{1, n});
  TensorView residual = poisoned_tensor(*backend, Shape{1, n});
  auto contains = [](const std::vector<MemRange>& ranges, const MemRange& r) {
    return std::any_of(ranges.begin(), ranges.end(), [&](const MemRange& e) { return e.contains(r); });
  };
  {
    GraphSession s = exec.begin_recorded();
    ops::matmul(s, x, w, tmp);
    ops::add(s, tmp, residual, residual);
    ComputeGraph g = s.take_graph();
    ASSERT_EQ(g.fuse(backend->fusion_rules(), *backend), 1u);
    const Dispatch& fused = *as_dispatch(g.nodes().back());
    EXPECT_TRUE(contains(fused.early_reads, residual.range())) << "the residual";
    EXPECT_FALSE(contains(fused.early_reads, x.range())) << "x is the predecessor's: after the wait";
  }
  {
    TensorView q = poisoned_tensor(*backend, Shape{1, 2, hd}), kv = poisoned_tensor(*backend, Shape{1, 1, hd});
    TensorView cache = poisoned_tensor(*backend, Shape{1, 8, hd}), v_cache = poisoned_tensor(*backend, Shape{1, 8, hd});
    TensorView positions(backend->alloc(4), DType::i32, Shape{1}, 4);
    TensorView cos_sin = poisoned_tensor(*backend, Shape{1, hd});
    ops::RopeParams rope;
    rope.cos_sin = cos_sin.reshaped(Shape{hd});
    rope.cos_sin_use = ops::RopeCosSin::load;
    GraphSession s = exec.begin_recorded();
    ops::rope_kv_write(s, q, kv, kv, cache, v_cache, positions, rope);
    ComputeGraph g = s.take_graph();
    const Dispatch& d = *as_dispatch(g.nodes().back());
    EXPECT_TRUE(contains(d.early_reads, cos_sin.range())) << "the loaded angles";
    EXPECT_TRUE(contains(d.early_reads, positions.range())) << "the position";
  }
}

// A decode step's Q/K/V product (rope_kv_write folded in) and then flash_decode, replayed
// as one graph with PDL for a growing cache: with ops::CacheWrites::token_row_only the
// attention copies the rows below kv_length - 1 before its PDL wait, while the product
// still runs, and the token's own row, which the product writes, after it. Each replay's
// new row is poisoned until the product writes it, so a copy issued too early shows as a
// different output. Bit for bit against KvHistory::after_wait (the same arithmetic), and
// both against a float64 reference over the caches the product left.
TEST(CudaAttention, HistoryCopiedBeforeTheWaitAndTheTokensRowAfterIt) {
  REQUIRE_GPU();
  GraphExecutor exec(backend);
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const int32_t heads = 9, kv_heads = 3, hd = 64;
  const int64_t k = 576, ctx = 600;
  const int64_t n = (heads + 2 * kv_heads) * hd;
  TensorView x = poisoned_tensor(*backend, Shape{1, k});
  testing::upload_floats(x, testing::random_floats(static_cast<size_t>(k), seed + 1, -2.0f, 2.0f));
  TensorView w = random_weights(*backend, DType::q4_1, n, k, seed + 2);
  TensorView qkv = poisoned_tensor(*backend, Shape{1, n});
  TensorView attn = poisoned_tensor(*backend, Shape{heads, hd});
  TensorView step(backend->alloc(8), DType::i32, Shape{2}, 8);  // kv_length, position
  const TensorView kv_length(step.view.slice(0, 4), DType::i32, Shape{1});
  const TensorView positions(step.view.slice(4, 4), DType::i32, Shape{1});
  const uint64_t cache_row = static_cast<uint64_t>(hd) * 2;
  auto cache = [&] {
    return TensorView(backend->alloc(cache_row * static_cast<uint64_t>(kv_heads * ctx)), DType::f16,
                      Shape{kv_heads, ctx, hd}, cache_row);
  };
  TensorView k_cache = cache(), v_cache = cache();
  BufferView scratch = backend->alloc(ops::flash_decode_scratch_bytes(heads, ctx, hd));
  ops::RopeParams rope;
  rope.theta = 10000.0f;
  ops::AttentionParams attention;
  attention.n_head = heads;
  attention.n_kv_head = kv_heads;
  attention.head_dim = hd;
  attention.scale = 0.125f;
  auto slice = [&](int64_t from, int64_t heads_in) {
    return TensorView(qkv.view.slice(static_cast<size_t>(from) * 4, static_cast<size_t>(heads_in * hd) * 4),
                      DType::f32, Shape{1, heads_in, hd});
  };
  auto graph = [&](ops::CacheWrites history) {
    GraphSession s = exec.begin_recorded();
    ops::matmul(s, x, w, qkv);
    ops::rope_kv_write(s, slice(0, heads), slice(heads * hd, kv_heads), slice((heads + kv_heads) * hd, kv_heads), k_cache,
                    v_cache, positions, rope);
    ops::flash_decode(s, slice(0, heads).reshaped(Shape{heads, hd}), k_cache, v_cache, kv_length, attn, scratch, attention,
                   {}, history);
    return std::make_unique<CapturedGraph>(*backend, s.take_graph());
  };
  const auto early = graph(ops::CacheWrites::token_row_only);
  const auto late = graph(ops::CacheWrites::any_row);
  EXPECT_EQ(early->stats().fusions, 1u) << "the product and rope_kv_write as one kernel";
  // Positions that take one chunk, several, a stage boundary and more stages than a ring.
  const std::vector<int32_t> steps = {40, 41, 63, 64, 65, 127, 128, 129, 200, 330};
  // The history: random rows, but the rows the steps write stay poisoned until then.
  auto reset_caches = [&] {
    for (const TensorView* c : {&k_cache, &v_cache}) {
      const auto values = testing::random_floats(static_cast<size_t>(kv_heads * ctx * hd), seed + 3, -1.0f, 1.0f);
      std::vector<uint16_t> halves(values.size());
      for (size_t i = 0; i < values.size(); ++i) halves[i] = f32_to_f16(values[i]);
      c->view.write(halves.data(), halves.size() * 2);
      for (int64_t h = 0; h < kv_heads; ++h) {
        for (int32_t position : steps) {
          c->view.slice(static_cast<size_t>(h * ctx + position) * cache_row, cache_row).fill(testing::kPoisonByte);
        }
      }
    }
  };
  auto replay = [&](CapturedGraph& g, int32_t position) {
    const int32_t values[2] = {position + 1, position};
    step.view.write(values, sizeof values);
    attn.view.fill(testing::kPoisonByte);
    g.run();
    return testing::download_floats(attn);
  };
  std::vector<std::vector<float>> late_out;
  reset_caches();
  for (int32_t position : steps) late_out.push_back(replay(*late, position));
  reset_caches();
  for (size_t i = 0; i < steps.size(); ++i) {
    const int32_t position = steps[i];
    SCOPED_TRACE(::testing::Message() << "position " << position);
    const std::vector<float> got = replay(*early, position);
    EXPECT_EQ(got, late_out[i]) << "the history copied before the wait changes nothing";
    // Float64 reference over the caches as they are now (only rows <= position are read).
    const std::vector<float> q = testing::download_floats(slice(0, heads));
    auto download_cache = [&](const TensorView& c) {
      std::vector<uint16_t> halves(static_cast<size_t>(kv_heads * ctx * hd));
      c.view.read(halves.data(), halves.size() * 2);
      return halves;
    };
    const std::vector<uint16_t> kc = download_cache(k_cache), vc = download_cache(v_cache);
    std::vector<double> want(static_cast<size_t>(heads * hd));
    for (int32_t h = 0; h < heads; ++h) {
      const int32_t g = h / (heads / kv_heads);
      std::vector<double> score(static_cast<size_t>(position + 1));
      double top = -INFINITY;
      for (int32_t t = 0; t <= position; ++t) {
        double dot = 0;
        for (int32_t d = 0; d < hd; ++d) {
          dot += static_cast<double>(q[static_cast<size_t>(h * hd + d)]) *
                 f16_to_f32(kc[static_cast<size_t>((g * ctx + t) * hd + d)]);
        }
        score[static_cast<size_t>(t)] = dot * attention.scale;
        top = std::max(top, score[static_cast<size_t>(t)]);
      }
      double total = 0;
      for (double& e : score) total += (e = std::exp(e - top));
      for (int32_t d = 0; d < hd; ++d) {
        double sum = 0;
        for (int32_t t = 0; t <= position; ++t) {
          sum += score[static_cast<size_t>(t)] * f16_to_f32(vc[static_cast<size_t>((g * ctx + t) * hd + d)]);
        }
        want[static_cast<size_t>(h * hd + d)] = sum / total;
      }
    }
    size_t worst = 0;
    EXPECT_LE(testing::max_scaled_error(got, want, 1e-5, 1e-4, &worst), 1.0)
        << "value " << worst << ": " << got[worst] << " vs " << want[worst];
  }
}

// Products of many rows run as cuBLAS host entry points (gemm_*, captured into child
// graphs). Two independent products, one that consumes the first, and a kernel after it:
// every encoding (direct, recorded, dataflow, replayed) must give the direct launches'
// results bit for bit, and they must agree with onepass's own tensor-core kernels
// (Options::cublas off), which round the operands the same way.
TEST(CudaBackend, CublasProductsInEveryEncodingMatchDirectLaunches) {
  REQUIRE_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const int64_t m = 200, k = 512, n1 = 384, n2 = 96;
  auto alloc = [&](Shape shape) { return poisoned_tensor(*backend, shape); };
  auto weights = [&](DType type, int64_t rows, int64_t cols, uint64_t s) {
    return random_weights(*backend, type, rows, cols, s);
  };
  TensorView x = alloc(Shape{m, k});
  testing::upload_floats(x, testing::random_floats(static_cast<size_t>(m * k), seed, -2.0f, 2.0f));
  TensorView wa = weights(DType::q4_0, n1, k, seed + 1), wb = weights(DType::f16, n1, k, seed + 2);
  TensorView wc = weights(DType::q8_0, n2, n1, seed + 3);
  TensorView a = alloc(Shape{m, n1}), b = alloc(Shape{m, n1}), c = alloc(Shape{m, n2}), d = alloc(Shape{m, n1});
  auto emit = [&](GraphSession& s) {
    ops::matmul(s, x, wa, a);  // gemm_q4_0_f32
    ops::matmul(s, x, wb, b);  // gemm_f16_f32, independent of the first
    ops::matmul(s, a, wc, c);  // gemm_q8_0_f32 on the first's output
    ops::add(s, a, b, d);      // a kernel after host entry points
  };
  auto results = [&] {
    auto r = std::vector{testing::download_floats(a), testing::download_floats(b), testing::download_floats(c),
                         testing::download_floats(d)};
    for (TensorView* t : {&a, &b, &c, &d}) t->view.fill(testing::kPoisonByte);
    return r;
  };
  GraphExecutor exec(backend);
  {
    GraphSession s = exec.begin();
    emit(s);
    s.finish();
  }
  const auto direct = results();
  auto record = [&] {
    GraphSession s = exec.begin_recorded();
    emit(s);
    return s.take_graph();
  };
  {
    GraphSession s = exec.begin_recorded();
    emit(s);
    s.finish();
    EXPECT_EQ(results(), direct) << "recorded";
  }
  {
    GraphSession s = exec.begin_recorded();
    emit(s);
    s.finish({.fuse = true, .encoding = Encoding::dataflow, .measure = true});
    EXPECT_EQ(results(), direct) << "dataflow";
  }
  for (GraphEncoding encoding : {GraphEncoding::sequential, GraphEncoding::barriers, GraphEncoding::dataflow}) {
    CaptureOptions o;
    o.encoding = encoding;
    CapturedGraph captured(*backend, record(), o);
    for (int rep = 0; rep < 2; ++rep) {
      captured.run();
      EXPECT_EQ(results(), direct) << graph_encoding_name(encoding) << " replay " << rep;
    }
  }
  // onepass's tensor-core kernels on the same inputs.
  Options own_options = testing::test_options();
  own_options.cublas = false;
  auto own_backend = make_cuda_backend(0, own_options);
  GraphExecutor own(own_backend);
  {
    GraphSession s = own.begin();
    emit(s);
    s.finish();
  }
  const auto tc = results();
  for (size_t i = 0; i < direct.size(); ++i) {
    double scale = 0;
    for (float v : tc[i]) scale = std::max(scale, static_cast<double>(std::abs(v)));
    ASSERT_GT(scale, 0.0);
    const std::vector<double> expected(tc[i].begin(), tc[i].end());
    size_t worst = 0;
    const double err = testing::max_scaled_error(direct[i], expected, 1e-4 * scale, 0.0, &worst);
    EXPECT_LE(err, 1.0) << "output " << i << " at " << worst << ": cuBLAS " << direct[i][worst]
                        << ", tensor-core kernel " << tc[i][worst] << " (scale " << scale << ")";
  }
}

// The matrix-vector kernels load weights before their PDL wait (Dispatch::early_reads), so
// one whose weights the previous kernel writes must not be launched early: here a copy
// converts new values into w right before the product, and w still holds the previous
// run's values, which an early launch would read.
TEST(CudaBackend, MatvecAfterTheKernelWritingItsWeightsReadsTheNewWeights) {
  REQUIRE_GPU();
  GraphExecutor exec(backend);
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const int64_t n = 4096, k = 1024;
  TensorView x(backend->alloc(k * 4), DType::f32, Shape{1, k});
  TensorView w32(backend->alloc(n * k * 4), DType::f32, Shape{n, k});
  TensorView w16(backend->alloc(n * k * 2), DType::f16, Shape{n, k});
  TensorView out(backend->alloc(n * 4), DType::f32, Shape{1, n});
  const auto xs = testing::random_floats(static_cast<size_t>(k), seed, -1.0f, 1.0f);
  testing::upload_floats(x, xs);
  for (int run = 0; run < 3; ++run) {
    const auto ws = testing::random_floats(static_cast<size_t>(n * k), seed + 1 + run, -1.0f, 1.0f);
    testing::upload_floats(w32, ws);
    out.view.fill(testing::kPoisonByte);
    GraphSession s = run == 2 ? exec.begin() : exec.begin_recorded();
    ops::copy(s, w32, w16);
    ops::matmul(s, x, w16, out);
    s.finish();
    const auto got = testing::download_floats(out);
    std::vector<double> want(static_cast<size_t>(n), 0.0);
    double scale = 0;
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < k; ++i) {
        want[static_cast<size_t>(j)] += static_cast<double>(f16_to_f32(f32_to_f16(ws[static_cast<size_t>(j * k + i)]))) *
                                        xs[static_cast<size_t>(i)];
      }
      scale = std::max(scale, std::abs(want[static_cast<size_t>(j)]));
    }
    size_t worst = 0;
    EXPECT_LE(testing::max_scaled_error(got, want, 1e-4 * scale, 0.0, &worst), 1.0)
        << "run " << run << " output " << worst << ": " << got[worst] << " vs " << want[worst];
  }
}

}  // namespace
}  // namespace onepass
