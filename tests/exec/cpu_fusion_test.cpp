// The CPU's fused matrix-vector kernel (mv_fused_*: RMS norm folded into x; SiLU x up, the
// residual add or RoPE + KV-cache write in the epilogue) against the unfused sequence on the same backend. The
// fused kernel does the unfused kernels' arithmetic value for value, so the results are
// bit-identical under every instruction-set cap and thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <tuple>
#include <vector>

#include "onepass/exec/graph_session.h"
#include "onepass/ops/ops.h"
#include "onepass/ops/rope.h"
#include "onepass/ops/quant.h"
#include "support/testing.h"

namespace onepass {
namespace {

using testing::poisoned_tensor;
using testing::random_weights;

// norm -> product -> residual add; norm -> gate/up product -> SiLU x up (and GELU x up);
// product -> residual add: the fused shapes of a decode layer (seven fusions).
std::array<std::vector<float>, 4> run_sequence(int threads, bool fuse, DType type, int64_t m, int64_t k, int64_t n,
                                               uint64_t seed) {
  Options options = testing::test_options();
  options.cpu_threads = threads;
  auto backend = testing::cpu_backend(options);
  GraphExecutor exec(backend);
  auto alloc = [&](Shape shape) { return poisoned_tensor(*backend, shape); };
  TensorView x = alloc(Shape{m, k}), norm_w = alloc(Shape{1, k}), residual = alloc(Shape{m, n});
  testing::upload_floats(x, testing::random_floats(static_cast<size_t>(m * k), seed + 1, -2.0f, 2.0f));
  testing::upload_floats(norm_w, testing::random_floats(static_cast<size_t>(k), seed + 2, 0.5f, 1.5f));
  testing::upload_floats(residual, testing::random_floats(static_cast<size_t>(m * n), seed + 3));
  TensorView w1 = random_weights(*backend, type, n, k, seed + 4), w2 = random_weights(*backend, type, 2 * n, k, seed + 5);
  TensorView xn = alloc(Shape{m, k}), t1 = alloc(Shape{m, n}), out1 = alloc(Shape{m, n});
  TensorView gu = alloc(Shape{m, 2 * n}), out2 = alloc(Shape{m, n});
  TensorView t3 = alloc(Shape{m, n}), out3 = alloc(Shape{m, n});
  TensorView gu4 = alloc(Shape{m, 2 * n}), out4 = alloc(Shape{m, n});
  GraphSession s = exec.begin_recorded();
  ops::rms_norm(s, x, norm_w, xn, 1e-5f);
  ops::matmul(s, xn, w1, t1);
  ops::add(s, t1, residual, out1);
  ops::rms_norm(s, x, norm_w, xn, 1e-5f);
  ops::matmul(s, xn, w2, gu);
  const uint64_t row = static_cast<uint64_t>(2 * n) * 4;
  ops::silu_mul(s, TensorView(gu.view, DType::f32, Shape{m, n}, row),
                TensorView(gu.view.slice_from(static_cast<size_t>(n) * 4), DType::f32, Shape{m, n}, row), out2);
  ops::rms_norm(s, x, norm_w, xn, 1e-5f);
  ops::matmul(s, xn, w2, gu4);
  ops::gelu_mul(s, TensorView(gu4.view, DType::f32, Shape{m, n}, row),
                TensorView(gu4.view.slice_from(static_cast<size_t>(n) * 4), DType::f32, Shape{m, n}, row), out4);
  ops::matmul(s, x, w1, t3);  // residual only, as the attention output and down projections
  ops::add(s, t3, residual, out3);
  const FinishStats stats = s.finish({.fuse = fuse, .encoding = Encoding::dataflow});
  EXPECT_EQ(stats.fusions, fuse ? 7u : 0u);
  return {testing::download_floats(out1), testing::download_floats(out2), testing::download_floats(out3),
          testing::download_floats(out4)};
}

TEST(CpuFusion, FusedMatvecMatchesTheUnfusedSequence) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for (DType type : {DType::f16, DType::f32, DType::q4_0, DType::q4_1, DType::q8_0, DType::q4_k, DType::q6_k}) {
    for (int64_t m : {int64_t{1}, int64_t{3}}) {
      for (int64_t k : {int64_t{256}, int64_t{2048}}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(type) << " m " << m << " k " << k);
        const int64_t n = 600;  // not a multiple of the rows per block
        const auto plain = run_sequence(2, false, type, m, k, n, seed);
        for (int threads : {1, 2, 3}) {
          const auto fused = run_sequence(threads, true, type, m, k, n, seed);
          EXPECT_EQ(fused[0], plain[0]) << "norm + residual, " << threads << " threads";
          EXPECT_EQ(fused[1], plain[1]) << "norm + silu, " << threads << " threads";
          EXPECT_EQ(fused[2], plain[2]) << "residual, " << threads << " threads";
          EXPECT_EQ(fused[3], plain[3]) << "norm + gelu, " << threads << " threads";
        }
      }
    }
  }
}

// rope_kv_write folded into a one-token Q/K/V product, after its RMS norm (the decode
// step's norm -> QKV -> RoPE + KV write): the product's output (q rotated in place, k and v
// as computed), both caches and the stored (cos, sin), every byte, must be what the
// unfused sequence leaves, for every cache type, a partial rotation and a position outside
// the cache (no cache write).
TEST(CpuFusion, QkvProductWithRopeAndCacheWriteMatchesTheUnfusedSequence) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const int64_t heads = 6, kv_heads = 2, hd = 40, k = 256, ctx = 16;  // heads straddle blocks
  const int64_t n = (heads + 2 * kv_heads) * hd;
  for (DType type : {DType::q4_1, DType::q6_k, DType::f16}) {
    for (DType cache_type : {DType::f16, DType::f32, DType::bf16}) {
      for (int32_t position : {5, 15, 16}) {
        for (int32_t rotary : {0, 32}) {
          for (ops::RopeCosSin use : {ops::RopeCosSin::none, ops::RopeCosSin::store, ops::RopeCosSin::load}) {
            SCOPED_TRACE(::testing::Message() << dtype_name(type) << " cache " << dtype_name(cache_type) << " position "
                                              << position << " rotary " << rotary << " cos_sin use "
                                              << static_cast<int>(use));
            auto run = [&](bool fuse, int threads) {
              Options options = testing::test_options();
              options.cpu_threads = threads;
              auto backend = testing::cpu_backend(options);
              GraphExecutor exec(backend);
              TensorView x = poisoned_tensor(*backend, Shape{1, k}), norm_w = poisoned_tensor(*backend, Shape{1, k});
              TensorView xn = poisoned_tensor(*backend, Shape{1, k});
              testing::upload_floats(x, testing::random_floats(static_cast<size_t>(k), seed + 1, -2.0f, 2.0f));
              testing::upload_floats(norm_w, testing::random_floats(static_cast<size_t>(k), seed + 2, 0.5f, 1.5f));
              TensorView w = random_weights(*backend, type, n, k, seed + 3);
              TensorView qkv = poisoned_tensor(*backend, Shape{1, n});
              TensorView positions(backend->alloc(4), DType::i32, Shape{1}, 4);
              positions.view.write(&position, 4);
              const uint64_t cache_row = static_cast<uint64_t>(hd) * dtype_size(cache_type);
              auto cache = [&] {
                TensorView c(backend->alloc(cache_row * static_cast<uint64_t>(kv_heads * ctx)), cache_type,
                             Shape{kv_heads, ctx, hd}, cache_row);
                c.view.fill(testing::kPoisonByte);
                return c;
              };
              TensorView k_cache = cache(), v_cache = cache();
              ops::RopeParams rope;
              rope.rotary_dims = rotary;
              rope.theta = 10000.0f;
              const int64_t rotated = rotary == 0 ? hd : rotary;
              TensorView cos_sin = poisoned_tensor(*backend, Shape{1, rotated});
              if (use == ops::RopeCosSin::load) {
                testing::upload_floats(cos_sin, testing::random_floats(static_cast<size_t>(rotated), seed + 5));
              }
              if (use != ops::RopeCosSin::none) {
                rope.cos_sin = cos_sin.reshaped(Shape{rotated});
                rope.cos_sin_use = use;
              }
              auto slice = [&](int64_t from, int64_t heads_in) {
                return TensorView(qkv.view.slice(static_cast<size_t>(from) * 4, static_cast<size_t>(heads_in * hd) * 4),
                                  DType::f32, Shape{1, heads_in, hd});
              };
              GraphSession s = exec.begin_recorded();
              ops::rms_norm(s, x, norm_w, xn, 1e-5f);
              ops::matmul(s, xn, w, qkv);
              ops::rope_kv_write(s, slice(0, heads), slice(heads * hd, kv_heads),
                                 slice((heads + kv_heads) * hd, kv_heads), k_cache, v_cache, positions, rope);
              const FinishStats stats = s.finish({.fuse = fuse, .encoding = Encoding::dataflow});
              EXPECT_EQ(stats.fusions, fuse ? 2u : 0u);
              auto bytes = [](const TensorView& t) {
                std::vector<uint8_t> b(t.view.size());
                t.view.read(b.data(), b.size());
                return b;
              };
              return std::tuple{bytes(qkv), bytes(k_cache), bytes(v_cache), bytes(cos_sin)};
            };
            const auto plain = run(false, 2);
            for (int threads : {1, 2, 3}) {
              const auto fused = run(true, threads);
              EXPECT_EQ(std::get<0>(fused), std::get<0>(plain)) << "q rotated in place, k and v as computed";
              EXPECT_EQ(std::get<1>(fused), std::get<1>(plain)) << "k cache";
              EXPECT_EQ(std::get<2>(fused), std::get<2>(plain)) << "v cache";
              EXPECT_EQ(std::get<3>(fused), std::get<3>(plain)) << "the stored (cos, sin), or the loaded ones untouched";
            }
            if (position >= ctx) {
              const auto k_bytes = std::get<1>(plain);
              EXPECT_TRUE(std::all_of(k_bytes.begin(), k_bytes.end(), [](uint8_t b) { return b == testing::kPoisonByte; }))
                  << "a position outside the cache writes nothing";
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace onepass
