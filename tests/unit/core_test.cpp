#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "onepass/core/buffer_pool.h"
#include "onepass/core/thread_pool.h"
#include "support/testing.h"

namespace onepass {
namespace {

TEST(DType, BlockSizesMatchGguf) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_block_elems(DType::q4_0), 32u);
  EXPECT_EQ(dtype_size(DType::q4_0), 18u);
  EXPECT_EQ(dtype_size(DType::q4_1), 20u);
  EXPECT_EQ(dtype_size(DType::q8_0), 34u);
  EXPECT_EQ(dtype_block_elems(DType::q4_k), 256u);
  EXPECT_EQ(dtype_size(DType::q4_k), 144u);
  EXPECT_EQ(dtype_size(DType::q5_k), 176u);
  EXPECT_EQ(dtype_size(DType::q6_k), 210u);
  EXPECT_EQ(dtype_bytes(DType::q4_0, 64), 36u);
  EXPECT_THROW(dtype_bytes(DType::q4_0, 33), Error);
}

TEST(DType, ParseAndGgmlIds) {
  EXPECT_EQ(parse_dtype("q4_k"), DType::q4_k);
  EXPECT_EQ(parse_dtype("Q6_K"), DType::q6_k);
  EXPECT_EQ(parse_dtype("nope"), std::nullopt);
  EXPECT_EQ(dtype_from_ggml(2), DType::q4_0);
  EXPECT_EQ(dtype_from_ggml(30), DType::bf16);
  EXPECT_EQ(dtype_from_ggml(6), DType::q5_0);
  EXPECT_EQ(dtype_from_ggml(7), DType::q5_1);
  EXPECT_EQ(dtype_from_ggml(10), DType::q2_k);
  EXPECT_EQ(dtype_from_ggml(11), DType::q3_k);
  EXPECT_EQ(dtype_from_ggml(20), DType::iq4_nl);
  EXPECT_EQ(dtype_from_ggml(23), DType::iq4_xs);
  EXPECT_EQ(dtype_from_ggml(16), std::nullopt);  // iq2_xxs is not supported
}

TEST(Half, KnownValuesRoundTrip) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);           // overflow to inf
  EXPECT_EQ(f32_to_f16(5.9604645e-8f), 0x0001);  // smallest subnormal
  EXPECT_FLOAT_EQ(f16_to_f32(0x0001), 5.9604645e-8f);
  EXPECT_FLOAT_EQ(f16_to_f32(0x3555), 0.33325195f);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::nanf("")))));
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  // Every f16 value survives f16 -> f32 -> f16.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), h) << "h=" << h;
  }
}

TEST(Half, RoundsToNearestEven) {
  // 1 + 2^-11 lies exactly between two f16 values: ties to even (1.0).
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f + 0x1p-16f), 0x3f81);
}

TEST(Buffer, SliceIsBoundsChecked) {
  auto backend = testing::cpu_backend();
  BufferView v = backend->alloc(100);
  EXPECT_EQ(v.size(), 100u);
  BufferView s = v.slice(10, 20);
  EXPECT_EQ(s.address(), v.address() + 10);
  EXPECT_EQ(s.range(), (MemRange{v.address() + 10, v.address() + 30}));
  EXPECT_EQ(s.slice(5, 15).address(), v.address() + 15);
  EXPECT_THROW(v.slice(90, 11), Error);
  EXPECT_THROW(s.slice(0, 21), Error);
  EXPECT_THROW(v.slice(101, 0), Error);
  try {
    v.slice(90, 20);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "BufferView::slice");
    EXPECT_NE(std::string(e.what()).find("exceeds view of 100 bytes"), std::string::npos);
  }
}

TEST(Buffer, HostReadWrite) {
  auto backend = testing::cpu_backend();
  BufferView v = backend->alloc(16);
  const std::vector<uint32_t> in = {1, 2, 3, 4};
  v.write(in);
  EXPECT_EQ(v.read_as<uint32_t>(), in);
  v.slice(4, 8).write(std::vector<uint32_t>{7, 8});
  EXPECT_EQ(v.read_as<uint32_t>(), (std::vector<uint32_t>{1, 7, 8, 4}));
  EXPECT_THROW(v.write(in.data(), 16, 4), Error);
  v.fill(0xab);
  EXPECT_EQ(v.read_as<uint32_t>()[0], 0xababababu);
}

TEST(Buffer, ViewsKeepBufferAlive) {
  BufferView inner;
  {
    auto backend = testing::cpu_backend();
    BufferView v = backend->alloc(64);
    inner = v.slice(8, 8);
  }
  inner.write(std::vector<uint64_t>{42});  // backend and buffer still alive through the view
  EXPECT_EQ(inner.read_as<uint64_t>()[0], 42u);
}

TEST(BufferPool, BumpsAlignsResetsAndFailsClearly) {
  auto backend = testing::cpu_backend();
  BufferPool pool(*backend, 1024, 256);
  BufferView a = pool.alloc(10);
  BufferView b = pool.alloc(300);
  EXPECT_EQ(a.address() % 256, 0u);
  EXPECT_EQ(b.address() - a.address(), 256u);
  EXPECT_EQ(pool.used(), 556u);
  EXPECT_THROW(pool.alloc(500), Error);
  try {
    pool.alloc(1000);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("asked for 1000 bytes"), std::string::npos) << e.what();
  }
  pool.reset();
  EXPECT_EQ(pool.used(), 0u);
  EXPECT_EQ(pool.alloc(1024).address(), a.address());
  EXPECT_EQ(pool.high_water(), 1024u);
}

TEST(TensorView, ShapesStridesAndRanges) {
  auto backend = testing::cpu_backend();
  BufferView v = backend->alloc(4 * 100);
  TensorView t(v, DType::f32, Shape{3, 4, 5});
  EXPECT_EQ(t.rows(), 12);
  EXPECT_EQ(t.cols(), 5);
  EXPECT_EQ(t.row_bytes(), 20u);
  EXPECT_TRUE(t.contiguous());
  EXPECT_EQ(t.range().size(), 240u);
  TensorView padded(v, DType::f32, Shape{4, 5}, 32);
  EXPECT_FALSE(padded.contiguous());
  EXPECT_EQ(padded.span_bytes(), 3u * 32 + 20);
  TensorView r = padded.rows_slice(1, 2);
  EXPECT_EQ(r.view.address(), v.address() + 32);
  EXPECT_EQ(r.span_bytes(), 32u + 20);
  EXPECT_THROW(TensorView(v, DType::f32, Shape{101}), Error);
  EXPECT_THROW(TensorView(v, DType::f32, Shape{4, 5}, 8), Error);
  EXPECT_THROW(t.reshaped(Shape{7, 9}), Error);
  EXPECT_EQ(t.reshaped(Shape{60}).cols(), 60);
  TensorView q(backend->alloc(18 * 4), DType::q4_0, Shape{2, 64});
  EXPECT_EQ(q.row_bytes(), 36u);
}

TEST(Shape, ElementCountsThatOverflowAreAnError) {
  const int64_t big = int64_t{1} << 32;
  EXPECT_EQ((Shape{big, big / 4}).numel(), int64_t{1} << 62);
  EXPECT_THROW((Shape{big, big}).numel(), Error);
  EXPECT_THROW((Shape{big, big, 2}).rows(), Error);
  EXPECT_THROW((Shape{3, INT64_MAX}).numel(), Error);
  EXPECT_EQ((Shape{0, INT64_MAX}).numel(), 0);
}

TEST(ThreadPool, RunsEveryIndexOnceAndPropagatesErrors) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(1000);
  pool.parallel_for(hits.size(), [&](size_t i) { hits[i].fetch_add(1); });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  EXPECT_THROW(pool.parallel_for(10, [](size_t i) {
    if (i == 7) throw Error("test", "boom");
  }),
               Error);
  std::atomic<int> n{0};
  pool.parallel_for(5, [&](size_t) { n++; });  // still usable after an error
  EXPECT_EQ(n.load(), 5);
}

// Workers that sleep between jobs and workers that spin (woken or not, late or not) run
// every index of every job exactly once, also when jobs follow each other within
// microseconds or after the spin time has run out.
TEST(ThreadPool, SpinningAndSleepingWorkersRunEveryJobOnce) {
  for (auto spin : {std::chrono::nanoseconds(0), std::chrono::nanoseconds(std::chrono::microseconds(200))}) {
    ThreadPool pool(3, spin);
    std::vector<std::atomic<int>> hits(64);
    for (int job = 0; job < 3000; ++job) {
      const size_t count = 2 + static_cast<size_t>(job) % 63;
      pool.parallel_for(count, [&](size_t i) { hits[i].fetch_add(1, std::memory_order_relaxed); });
      for (size_t i = 0; i < hits.size(); ++i) {
        ASSERT_EQ(hits[i].exchange(0), i < count ? 1 : 0) << "job " << job << " index " << i;
      }
      if (job % 500 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // past the spin
    }
    EXPECT_THROW(pool.parallel_for(10, [](size_t i) {
      if (i == 3) throw Error("test", "boom");
    }),
                 Error);
    std::atomic<int> n{0};
    pool.parallel_for(7, [&](size_t) { n++; });
    EXPECT_EQ(n.load(), 7);
  }
}

TEST(Options, EnvironmentFillsDefaults) {
  ::setenv("ONEPASS_AUTO_BARRIER", "0", 1);
  ::setenv("ONEPASS_CPU_SCHEDULE", "sequential", 1);
  ::setenv("ONEPASS_THREADS", "3", 1);
  Options o = Options::from_env();
  EXPECT_FALSE(o.auto_barrier);
  EXPECT_EQ(o.cpu_schedule, CpuSchedule::sequential);
  EXPECT_EQ(o.cpu_threads, 3);
  // Far more threads than the hardware runs: capped, with one warning line.
  ::setenv("ONEPASS_THREADS", "4096", 1);
  ::testing::internal::CaptureStderr();
  o = Options::from_env();
  const std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(o.cpu_threads, std::min(4096, ThreadPool::max_threads()));
  if (ThreadPool::max_threads() < 4096) {
    EXPECT_NE(warning.find("[options] ONEPASS_THREADS=4096 is more than 4 x the"), std::string::npos)
        << warning;
    EXPECT_EQ(std::count(warning.begin(), warning.end(), '\n'), 1) << warning;
  }
  EXPECT_EQ(ThreadPool(100000).size(), ThreadPool::max_threads());
  ::setenv("ONEPASS_THREADS", "many", 1);
  EXPECT_THROW(Options::from_env(), Error);
  ::setenv("ONEPASS_AUTO_BARRIER", "maybe", 1);
  ::unsetenv("ONEPASS_THREADS");
  EXPECT_THROW(Options::from_env(), Error);
  ::unsetenv("ONEPASS_AUTO_BARRIER");
  ::unsetenv("ONEPASS_CPU_SCHEDULE");
  EXPECT_TRUE(Options::from_env().auto_barrier);
}

}  // namespace
}  // namespace onepass
