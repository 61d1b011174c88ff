// Op cases: kv_write (every source/cache type pair, permuted positions, out-of-range
// positions skipped, strided source rows).
#include <algorithm>
#include <iterator>
#include <numeric>

#include "support/op_harness.h"

namespace onepass::testing {
namespace {

struct KvCase {
  int64_t tokens;
  int64_t heads;
  int64_t head_dim;
  int64_t ctx;
  int64_t src_pad;  // elements between source rows (a slice of a fused QKV row)
};

void run_kv_write(OpContext& c, DType src_type, DType cache_type, const KvCase& k) {
  // Distinct positions in random order; up to four tokens point outside the cache (just
  // below, just past, far below, far past) and must be skipped.
  std::vector<int32_t> order(static_cast<size_t>(k.ctx));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), c.rng());
  std::vector<int32_t> pos(order.begin(), order.begin() + k.tokens);
  const auto ctx = static_cast<int32_t>(k.ctx);
  const int32_t outside[] = {-1, ctx, -1000000, ctx + 1000};
  for (size_t i = 0; i < std::size(outside) && i < pos.size(); ++i) {
    pos[pos.size() - 1 - i] = outside[i];
  }
  std::shuffle(pos.begin(), pos.end(), c.rng());

  TensorView src =
      c.random_input_strided(src_type, {k.tokens, k.heads, k.head_dim}, k.src_pad, -4.0f, 4.0f);
  // The cache starts with known values: rows not written must keep them.
  TensorView cache = c.random_input(cache_type, {k.heads, k.ctx, k.head_dim}, -4.0f, 4.0f);
  TensorView positions = c.input_i32({k.tokens}, pos);
  std::vector<double> expected = c.host(cache);
  ops::kv_write(c.session(), src, cache, positions);
  c.run();
  const std::vector<double> converted = rounded(cache_type, c.host(src));
  for (int64_t t = 0; t < k.tokens; ++t) {
    const int64_t p = pos[static_cast<size_t>(t)];
    if (p < 0 || p >= k.ctx) continue;
    for (int64_t h = 0; h < k.heads; ++h) {
      std::copy_n(converted.begin() + (t * k.heads + h) * k.head_dim, k.head_dim,
                  expected.begin() + (h * k.ctx + p) * k.head_dim);
    }
  }
  // A conversion rounds to nearest even, exactly as the reference does.
  c.expect_near(cache, expected, Tolerance{0.0, 0.0}, "cache");
}

}  // namespace

ONEPASS_OP_CASES(kv_cache) {
  for (DType s : kFloatTypes) {
    for (DType d : kFloatTypes) {
      cases.push_back({cat("kv_write/", dtype_name(s), "_", dtype_name(d), "/7x3x80_ctx37"),
                       [=](OpContext& c) { run_kv_write(c, s, d, {7, 3, 80, 37, 0}); }});
    }
  }
  cases.push_back({"kv_write/f32_f16/2x1x64_ctx5", [](OpContext& c) {
    run_kv_write(c, DType::f32, DType::f16, {2, 1, 64, 5, 0});  // only out-of-range tokens
  }});
  cases.push_back({"kv_write/f32_f16/33x8x128_ctx4100", [](OpContext& c) {
    run_kv_write(c, DType::f32, DType::f16, {33, 8, 128, 4100, 0});
  }});
  cases.push_back({"kv_write/f32_f16/strided_5x2x64_ctx19", [](OpContext& c) {
    run_kv_write(c, DType::f32, DType::f16, {5, 2, 64, 19, 24});
  }});
  cases.push_back({"kv_write/bf16_bf16/strided_6x4x80_ctx50", [](OpContext& c) {
    run_kv_write(c, DType::bf16, DType::bf16, {6, 4, 80, 50, 7});
  }});
}

TEST(KvWriteValidation, RejectsBadArguments) {
  expect_op_error("kv_write", [](GraphSession& s, Backend& b) {  // head count differs
    ops::kv_write(s, b.alloc_tensor(DType::f32, {2, 4, 64}), b.alloc_tensor(DType::f16, {2, 32, 64}),
               b.alloc_tensor(DType::i32, {2}));
  });
  expect_op_error("kv_write", [](GraphSession& s, Backend& b) {  // positions must be i32
    ops::kv_write(s, b.alloc_tensor(DType::f32, {2, 4, 64}), b.alloc_tensor(DType::f16, {4, 32, 64}),
               b.alloc_tensor(DType::f32, {2}));
  });
  expect_op_error("kv_write", [](GraphSession& s, Backend& b) {  // one position per token
    ops::kv_write(s, b.alloc_tensor(DType::f32, {2, 4, 64}), b.alloc_tensor(DType::f16, {4, 32, 64}),
               b.alloc_tensor(DType::i32, {3}));
  });
  expect_op_error("kv_write", [](GraphSession& s, Backend& b) {  // cache is a float type
    ops::kv_write(s, b.alloc_tensor(DType::f32, {2, 4, 64}), b.alloc_tensor(DType::i32, {4, 32, 64}),
               b.alloc_tensor(DType::i32, {2}));
  });
}

}  // namespace onepass::testing
