// Op cases: sdpa (causal grouped-query prefill over a KV cache) and flash_decode (one
// query token, split over the KV range and merged). Plus a replay test: a recorded
// flash_decode graph follows kv_length as it changes.
#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "onepass/ops/ops.h"
#include "onepass/exec/captured_graph.h"
#include "onepass/ops/attention.h"
#include "support/op_harness.h"

namespace onepass::testing {
namespace {

struct HeadConfig {
  int32_t n_head;
  int32_t n_kv_head;  // ratios 1, 3 and 8
  const char* name;
};
constexpr HeadConfig kHeadConfigs[] = {{4, 4, "4h4kv"}, {6, 2, "6h2kv"}, {8, 1, "8h1kv"}};
constexpr int32_t kHeadDims[] = {64, 128, 80};

ops::AttentionParams attention_params(const HeadConfig& h, int32_t head_dim, int32_t window = 0,
                                      float softcap = 0.0f) {
  ops::AttentionParams p;
  p.window = window;
  p.softcap = softcap;
  p.n_head = h.n_head;
  p.n_kv_head = h.n_kv_head;
  p.head_dim = head_dim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  return p;
}

// A cache [n_kv_head, ctx, head_dim] whose positions from `valid` on (and below
// `first_valid`) hold NaN: no kernel may let a key or value it should not see into the result.
TensorView make_cache(OpContext& c, DType t, int64_t n_kv_head, int64_t ctx, int64_t head_dim,
                      int64_t valid, int64_t first_valid = 0) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(n_kv_head * ctx * head_dim));
  for (int64_t h = 0; h < n_kv_head; ++h) {
    for (int64_t p = 0; p < ctx; ++p) {
      for (int64_t d = 0; d < head_dim; ++d) {
        values[static_cast<size_t>((h * ctx + p) * head_dim + d)] =
            p < valid && p >= first_valid ? dist(c.rng()) : std::numeric_limits<float>::quiet_NaN();
      }
    }
  }
  return c.input_from(t, {n_kv_head, ctx, head_dim}, values);
}

// out for one query row q (head_dim values) of head `head` over keys [first, count);
// scores capped by softcap * tanh(s / softcap) when softcap > 0.
void attend_reference(const double* q, const std::vector<double>& k, const std::vector<double>& v,
                      int64_t ctx, int64_t head_dim, int64_t kv_head, int64_t first, int64_t count,
                      double scale, double softcap, double* out) {
  std::fill(out, out + head_dim, 0.0);
  if (count <= first) return;
  std::vector<double> s(static_cast<size_t>(count - first));
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t j = first; j < count; ++j) {
    const double* key = &k[static_cast<size_t>((kv_head * ctx + j) * head_dim)];
    double dot = 0;
    for (int64_t d = 0; d < head_dim; ++d) dot += q[d] * key[d];
    double score = dot * scale;
    if (softcap > 0) score = softcap * std::tanh(score / softcap);
    s[static_cast<size_t>(j - first)] = score;
    max = std::max(max, score);
  }
  double sum = 0;
  for (double& x : s) sum += (x = std::exp(x - max));
  for (int64_t j = first; j < count; ++j) {
    const double* value = &v[static_cast<size_t>((kv_head * ctx + j) * head_dim)];
    for (int64_t d = 0; d < head_dim; ++d) out[d] += s[static_cast<size_t>(j - first)] / sum * value[d];
  }
}

// f32 scores, softmax and weighted sums; the caches hold exactly the values the reference
// reads. A worst-case bound (n * 2^-24 for a sum of n terms) would be ~1e-4 at 4097 keys,
// as large as the effect of dropping one key, so the bound is statistical instead: the
// dominant error is the f32 dot product behind each score (head_dim terms of random sign,
// |q_i k_i| <= 3: ~sqrt(head_dim) * 3 * 2^-24 before the 1/sqrt(head_dim) scale, under
// 3e-7 in the weights); the weighted sums of values in [-1, 1] add less (the weights sum
// to 1). Measured errors stay below 3e-7 at every length; atol 2e-6 leaves ~10x margin
// for other summation orders (GPU trees, online rescaling) and sits ~50x below the change
// one missing key makes at 4097 keys.
Tolerance attention_tolerance() { return {2e-6, 1e-5}; }

struct SdpaCase {
  HeadConfig heads;
  int32_t head_dim;
  int64_t tokens;
  int64_t ctx;
  std::vector<int32_t> positions;
  DType cache_type;
  int32_t window = 0;
  float softcap = 0.0f;
};

void run_sdpa(OpContext& c, const SdpaCase& sc) {
  const ops::AttentionParams p = attention_params(sc.heads, sc.head_dim, sc.window, sc.softcap);
  const int64_t hd = sc.head_dim;
  const int32_t max_pos = *std::max_element(sc.positions.begin(), sc.positions.end());
  const int64_t valid = std::min<int64_t>(sc.ctx, max_pos + 1);
  TensorView q = c.random_input(DType::f32, {sc.tokens, p.n_head, hd}, -3.0f, 3.0f);
  TensorView k = make_cache(c, sc.cache_type, p.n_kv_head, sc.ctx, hd, valid);
  TensorView v = make_cache(c, sc.cache_type, p.n_kv_head, sc.ctx, hd, valid);
  TensorView positions = c.input_i32({sc.tokens}, sc.positions);
  TensorView out = c.output(DType::f32, {sc.tokens, p.n_head, hd});
  ops::sdpa(c.session(), q, k, v, positions, out, p);
  c.run();
  std::vector<double> ref(static_cast<size_t>(sc.tokens * p.n_head * hd));
  const int64_t group = p.n_head / p.n_kv_head;
  for (int64_t t = 0; t < sc.tokens; ++t) {
    const int64_t pos = sc.positions[static_cast<size_t>(t)];
    const int64_t count = pos < 0 ? 0 : std::min(pos, sc.ctx - 1) + 1;
    const int64_t first = sc.window > 0 && pos >= 0 ? std::max<int64_t>(0, pos - sc.window + 1) : 0;
    for (int64_t h = 0; h < p.n_head; ++h) {
      const size_t row = static_cast<size_t>((t * p.n_head + h) * hd);
      attend_reference(&c.host(q)[row], c.host(k), c.host(v), sc.ctx, hd, h / group, first, count, p.scale,
                       p.softcap, &ref[row]);
    }
  }
  c.expect_near(out, ref, attention_tolerance());
}

// Fills `ref` with the expected flash_decode output for kv_length `length`.
std::vector<double> flash_reference(const std::vector<double>& q, const std::vector<double>& k,
                                    const std::vector<double>& v, const ops::AttentionParams& p,
                                    int64_t ctx, int64_t length) {
  const int64_t hd = p.head_dim;
  const int64_t count = std::clamp<int64_t>(length, 0, ctx);
  const int64_t first = p.window > 0 ? std::max<int64_t>(0, count - p.window) : 0;
  std::vector<double> ref(static_cast<size_t>(p.n_head * hd));
  for (int64_t h = 0; h < p.n_head; ++h) {
    attend_reference(&q[static_cast<size_t>(h * hd)], k, v, ctx, hd, h / (p.n_head / p.n_kv_head),
                     first, count, p.scale, p.softcap, &ref[static_cast<size_t>(h * hd)]);
  }
  return ref;
}

void run_flash_decode(OpContext& c, const HeadConfig& heads, int32_t head_dim, int64_t ctx,
                      int32_t kv_length, DType cache_type, size_t prefetch_bytes = 0,
                      ops::CacheWrites history = ops::CacheWrites::any_row, int32_t window = 0,
                      float softcap = 0.0f) {
  const ops::AttentionParams p = attention_params(heads, head_dim, window, softcap);
  const int64_t valid = std::clamp<int64_t>(kv_length, 0, ctx);
  // Keys before the window hold NaN: a kernel that reads them fails.
  const int64_t first_valid = window > 0 ? std::max<int64_t>(0, valid - window) : 0;
  TensorView q = c.random_input(DType::f32, {p.n_head, head_dim}, -3.0f, 3.0f);
  TensorView k = make_cache(c, cache_type, p.n_kv_head, ctx, head_dim, valid, first_valid);
  TensorView v = make_cache(c, cache_type, p.n_kv_head, ctx, head_dim, valid, first_valid);
  TensorView length = c.input_i32({1}, {kv_length});
  TensorView out = c.output(DType::f32, {p.n_head, head_dim});
  // Poisoned scratch: empty partials must never be read.
  BufferView scratch = c.scratch(ops::flash_decode_scratch_bytes(p.n_head, ctx, head_dim));
  // An L2 prefetch range (read-only data of later dispatches) changes nothing.
  const BufferView prefetch = prefetch_bytes > 0 ? c.scratch(prefetch_bytes) : BufferView{};
  ops::flash_decode(c.session(), q, k, v, length, out, scratch, p, prefetch, history);
  c.run();
  c.expect_near(out, flash_reference(c.host(q), c.host(k), c.host(v), p, ctx, kv_length),
                attention_tolerance());
}

}  // namespace

ONEPASS_OP_CASES(attention) {
  for (DType cache_type : {DType::f16, DType::f32}) {
    const std::string ct(dtype_name(cache_type));
    for (const HeadConfig& heads : kHeadConfigs) {
      for (int32_t hd : kHeadDims) {
        // The valid keys are shared among the chunks (flash_decode_chunks: 1 for ctx 5, 5
        // for ctx 300, 17 or more for ctx 4100): one chunk; 3 keys over 5 chunks (two of
        // them empty); 7 keys; a full cache of 4097 keys. CUDA hands out at least
        // kCudaFlashDecodeChunkKeys (64) keys per chunk: 64 keys in one block, 65 in two,
        // 200 in four of the cluster's five.
        for (auto [kv_length, ctx] : {std::pair{1, 5}, std::pair{3, 300}, std::pair{7, 300}, std::pair{64, 300},
                                      std::pair{65, 300}, std::pair{200, 300}, std::pair{4097, 4100}}) {
          cases.push_back(
              {cat("flash_decode/", ct, "/", heads.name, "_hd", hd, "/kv", kv_length, "_ctx", ctx),
               [=](OpContext& c) { run_flash_decode(c, heads, hd, ctx, kv_length, cache_type); }});
          // The history (keys below kv_length - 1) copied before the CUDA kernel's PDL
          // wait: alone in its pass, no dispatch before it writes the cache.
          if (cache_type == DType::f16) {
            cases.push_back({cat("flash_decode/", ct, "/", heads.name, "_hd", hd, "/kv", kv_length, "_ctx", ctx,
                                 "_history_early"),
                             [=](OpContext& c) {
                               run_flash_decode(c, heads, hd, ctx, kv_length, cache_type, 0,
                                                ops::CacheWrites::token_row_only);
                             }});
          }
        }
      }
      // Prefill: T queries at positions p0..p0+T-1, for every head configuration with one
      // head size each (all three sizes are covered across the configurations).
      const int32_t hd = kHeadDims[&heads - kHeadConfigs];
      for (int64_t tokens : {1, 5, 33}) {
        for (int32_t p0 : {0, 17}) {
          std::vector<int32_t> positions(static_cast<size_t>(tokens));
          for (int64_t t = 0; t < tokens; ++t) {
            positions[static_cast<size_t>(t)] = p0 + static_cast<int32_t>(t);
          }
          const int64_t ctx = p0 + tokens + 3;  // a few unwritten (NaN) positions after
          const SdpaCase sc{heads, hd, tokens, ctx, positions, cache_type};
          cases.push_back({cat("sdpa/", ct, "/", heads.name, "_hd", hd, "/T", tokens, "_p", p0),
                           [=](OpContext& c) { run_sdpa(c, sc); }});
        }
      }
    }
  }
  // Edge cases: other head sizes for prefill, bf16 caches, clamping and empty ranges.
  for (int32_t hd : kHeadDims) {
    std::vector<int32_t> positions(5);
    for (int32_t t = 0; t < 5; ++t) positions[static_cast<size_t>(t)] = 17 + t;
    const SdpaCase sc{kHeadConfigs[1], hd, 5, 25, positions, DType::f16};
    cases.push_back(
        {cat("sdpa/f16/6h2kv_hd", hd, "/T5_p17_ctx25"), [=](OpContext& c) { run_sdpa(c, sc); }});
  }
  cases.push_back({"sdpa/bf16/6h2kv_hd64/T5_p17", [](OpContext& c) {
    run_sdpa(c, {kHeadConfigs[1], 64, 5, 25, {17, 18, 19, 20, 21}, DType::bf16});
  }});
  // Long prefixes: several 256-key tiles of the online softmax, counts ending exactly at
  // and just past a tile boundary.
  cases.push_back({"sdpa/f16/6h2kv_hd128/T5_p600", [](OpContext& c) {
    run_sdpa(c, {kHeadConfigs[1], 128, 5, 700, {600, 601, 602, 603, 604}, DType::f16});
  }});
  cases.push_back({"sdpa/f32/8h1kv_hd80/tile_edges", [](OpContext& c) {
    run_sdpa(c, {kHeadConfigs[2], 80, 4, 1100, {1000, 255, 511, 256}, DType::f32});
  }});
  // The CUDA tensor-core kernel (f16, head_dim 64/128): several 64-token tiles, the last
  // partial, several 64-key tiles each ending mid-tile, and tokens of one tile whose key
  // ranges end in different key tiles.
  cases.push_back({"sdpa/f16/6h2kv_hd64/T150_p100", [](OpContext& c) {
    std::vector<int32_t> positions(150);
    for (int32_t t = 0; t < 150; ++t) positions[static_cast<size_t>(t)] = 100 + t;
    run_sdpa(c, {kHeadConfigs[1], 64, 150, 253, positions, DType::f16});
  }});
  cases.push_back({"sdpa/f16/8h1kv_hd128/T70_p0", [](OpContext& c) {
    std::vector<int32_t> positions(70);
    for (int32_t t = 0; t < 70; ++t) positions[static_cast<size_t>(t)] = t;
    run_sdpa(c, {kHeadConfigs[2], 128, 70, 75, positions, DType::f16});
  }});
  // Positions past the cache clamp to ctx - 1; a negative one sees nothing (zeros);
  // positions need not be sorted.
  cases.push_back({"sdpa/f16/4h4kv_hd64/clamp_and_negative", [](OpContext& c) {
    run_sdpa(c, {kHeadConfigs[0], 64, 4, 20, {19, 500, -3, 6}, DType::f16});
  }});
  cases.push_back({"flash_decode/bf16/6h2kv_hd80/kv300_ctx513", [](OpContext& c) {
    run_flash_decode(c, kHeadConfigs[1], 80, 513, 300, DType::bf16);
  }});
  cases.push_back({"flash_decode/bf16/6h2kv_hd64/kv300_ctx513", [](OpContext& c) {
    run_flash_decode(c, kHeadConfigs[1], 64, 513, 300, DType::bf16);  // the GQA kernel with bf16
  }});
  // With an L2 prefetch of 1 MiB and 40 bytes (the CUDA kernel requests the whole 16-byte
  // pieces, spread over its blocks) and of less than one piece (nothing requested).
  cases.push_back({"flash_decode/f16/6h2kv_hd64/kv300_ctx513_prefetch", [](OpContext& c) {
    run_flash_decode(c, kHeadConfigs[1], 64, 513, 300, DType::f16, (size_t{1} << 20) + 40);
  }});
  cases.push_back({"flash_decode/f32/4h4kv_hd80/kv7_ctx40_prefetch_tiny", [](OpContext& c) {
    run_flash_decode(c, kHeadConfigs[0], 80, 40, 7, DType::f32, 8);
  }});
  cases.push_back({"flash_decode/f16/6h2kv_hd64/kv256_ctx512", [](OpContext& c) {
    run_flash_decode(c, kHeadConfigs[1], 64, 512, 256, DType::f16);  // 8 chunks of 32 keys
  }});
  cases.push_back({"flash_decode/f16/8h1kv_hd64/kv0", [](OpContext& c) {
    run_flash_decode(c, kHeadConfigs[2], 64, 300, 0, DType::f16);  // no key: zeros
  }});
  cases.push_back({"flash_decode/f16/8h1kv_hd64/kv_negative", [](OpContext& c) {
    run_flash_decode(c, kHeadConfigs[2], 64, 300, -5, DType::f16);  // clamps to 0
  }});
  cases.push_back({"flash_decode/f32/4h4kv_hd80/kv_past_ctx", [](OpContext& c) {
    run_flash_decode(c, kHeadConfigs[0], 80, 600, 100000, DType::f32);  // clamps to ctx
  }});
  // Sliding windows (Gemma's local layers) and score softcaps (Gemma 2): a window shorter
  // than the valid keys, one longer, one of a single key; a window over several chunks
  // with the history read early; softcaps that bite (|scores| up to ~8 against a cap of 2).
  for (auto [kv_length, ctx, window] : {std::tuple{300, 513, 64}, std::tuple{40, 513, 64}, std::tuple{200, 300, 1},
                                        std::tuple{4097, 4100, 512}}) {
    for (DType cache_type : {DType::f16, DType::f32}) {
      cases.push_back({cat("flash_decode/", dtype_name(cache_type), "/6h2kv_hd64/kv", kv_length, "_ctx", ctx,
                           "_window", window),
                       [=](OpContext& c) {
                         run_flash_decode(c, kHeadConfigs[1], 64, ctx, kv_length, cache_type,
                                          0, ops::CacheWrites::token_row_only, window);
                       }});
    }
  }
  cases.push_back({"flash_decode/f16/8h1kv_hd128/kv700_ctx1024_window256_softcap2", [](OpContext& c) {
    run_flash_decode(c, kHeadConfigs[2], 128, 1024, 700, DType::f16, 0, ops::CacheWrites::any_row, 256, 2.0f);
  }});
  cases.push_back({"flash_decode/f32/4h4kv_hd64/kv300_ctx300_softcap2", [](OpContext& c) {
    run_flash_decode(c, kHeadConfigs[0], 64, 300, 300, DType::f32, 0, ops::CacheWrites::any_row, 0, 2.0f);
  }});
  for (DType cache_type : {DType::f16, DType::f32}) {
    for (int32_t window : {1, 7, 64}) {
      for (float softcap : {0.0f, 2.0f}) {
        std::vector<int32_t> positions(70);
        for (int32_t t = 0; t < 70; ++t) positions[static_cast<size_t>(t)] = 30 + t;
        const SdpaCase sc{kHeadConfigs[1], 64, 70, 103, positions, cache_type, window, softcap};
        cases.push_back({cat("sdpa/", dtype_name(cache_type), "/6h2kv_hd64/T70_p30_window", window,
                             softcap > 0 ? "_softcap2" : ""),
                         [=](OpContext& c) { run_sdpa(c, sc); }});
      }
    }
  }
  cases.push_back({"sdpa/f16/8h1kv_hd128/T70_p0_window16", [](OpContext& c) {
    std::vector<int32_t> positions(70);
    for (int32_t t = 0; t < 70; ++t) positions[static_cast<size_t>(t)] = t;
    run_sdpa(c, {kHeadConfigs[2], 128, 70, 75, positions, DType::f16, 16});
  }});
}

// A recorded flash_decode graph reads kv_length at run time: replaying it after the
// length grows (and shrinks) gives the new answer without re-recording.
TEST(FlashDecode, ReplayFollowsKvLength) {
  auto backend = cpu_backend();
  const ops::AttentionParams p = attention_params(kHeadConfigs[1], 64);
  constexpr int64_t kCtx = 700;
  const int64_t hd = p.head_dim;
  auto upload = [&](DType t, Shape shape, uint64_t seed) {
    TensorView view = backend->alloc_tensor(t, shape);
    std::vector<float> values =
        random_floats(static_cast<size_t>(shape.numel()), seed, -1.0f, 1.0f);
    upload_floats(view, values);
    std::vector<double> host(values.size());
    for (size_t i = 0; i < values.size(); ++i) host[i] = round_to(t, values[i]);
    return std::pair{view, host};
  };
  const auto [q, q_host] = upload(DType::f32, {p.n_head, hd}, 1);
  const auto [k, k_host] = upload(DType::f16, {p.n_kv_head, kCtx, hd}, 2);
  const auto [v, v_host] = upload(DType::f16, {p.n_kv_head, kCtx, hd}, 3);
  TensorView length = backend->alloc_tensor(DType::i32, {1});
  TensorView out = backend->alloc_tensor(DType::f32, {p.n_head, hd});
  BufferView scratch = backend->alloc(ops::flash_decode_scratch_bytes(p.n_head, kCtx, hd));

  GraphExecutor executor(backend);
  GraphSession session = executor.begin_recorded();
  ops::flash_decode(session, q, k, v, length, out, scratch, p);
  CapturedGraph graph(*backend, session.take_graph());
  for (int32_t kv_length : {5, 300, 700, 1}) {
    length.view.write(std::vector<int32_t>{kv_length});
    graph.run();
    const std::vector<float> actual = download_floats(out);
    const std::vector<double> expected =
        flash_reference(q_host, k_host, v_host, p, kCtx, kv_length);
    const Tolerance tol = attention_tolerance();
    EXPECT_LE(max_scaled_error(actual, expected, tol.atol, tol.rtol), 1.0)
        << "kv_length " << kv_length;
  }
}

TEST(AttentionValidation, RejectsBadArguments) {
  // A valid flash_decode call with one thing changed at a time.
  struct Setup {
    DType q_type = DType::f32;
    DType v_type = DType::f16;
    int32_t n_kv_head = 2;
    int64_t kv_length_values = 1;
    float scale = 0.125f;
    size_t scratch_less = 0;
    int32_t head_dim = 64;
    size_t prefetch_offset = 0;  // into a 4 KB buffer given as prefetch_l2 when nonzero
    int32_t window = 0;
    float softcap = 0.0f;
  };
  auto flash = [](Setup u) {
    return [=](GraphSession& s, Backend& b) {
      ops::AttentionParams p;
      p.n_head = 6;
      p.n_kv_head = u.n_kv_head;
      p.head_dim = u.head_dim;
      p.scale = u.scale;
      p.window = u.window;
      p.softcap = u.softcap;
      const size_t scratch = ops::flash_decode_scratch_bytes(6, 300, 64) - u.scratch_less;
      ops::flash_decode(s, b.alloc_tensor(u.q_type, {6, 64}), b.alloc_tensor(DType::f16, {2, 300, 64}),
                     b.alloc_tensor(u.v_type, {2, 300, 64}),
                     b.alloc_tensor(DType::i32, {u.kv_length_values}),
                     b.alloc_tensor(DType::f32, {6, 64}), b.alloc(scratch), p,
                     u.prefetch_offset ? b.alloc(4096).slice_from(u.prefetch_offset) : BufferView{});
    };
  };
  expect_op_error("flash_decode", flash({.n_kv_head = 4}));         // 6 % 4 != 0
  expect_op_error("flash_decode", flash({.n_kv_head = 3}));         // cache has 2 heads
  expect_op_error("flash_decode", flash({.q_type = DType::f16}));   // q is f32
  expect_op_error("flash_decode", flash({.v_type = DType::f32}));   // k, v types differ
  expect_op_error("flash_decode", flash({.kv_length_values = 2}));  // one length
  expect_op_error("flash_decode", flash({.scale = 0.0f}));          // scale unset
  expect_op_error("flash_decode", flash({.scratch_less = 4}));      // scratch too small
  expect_op_error("flash_decode", flash({.head_dim = 80}));         // shapes say 64
  expect_op_error("flash_decode", flash({.prefetch_offset = 8}));   // prefetch_l2 not 16-byte aligned
  expect_op_error("flash_decode", flash({.window = -1}));           // window >= 0
  expect_op_error("flash_decode", flash({.softcap = -1.0f}));       // softcap >= 0
  expect_op_error("sdpa", [](GraphSession& s, Backend& b) {         // positions per token
    ops::AttentionParams p{0.125f, 4, 4, 64};
    ops::sdpa(s, b.alloc_tensor(DType::f32, {5, 4, 64}), b.alloc_tensor(DType::f16, {4, 40, 64}),
           b.alloc_tensor(DType::f16, {4, 40, 64}), b.alloc_tensor(DType::i32, {4}),
           b.alloc_tensor(DType::f32, {5, 4, 64}), p);
  });
  expect_op_error("sdpa", [](GraphSession& s, Backend& b) {         // q heads
    ops::AttentionParams p{0.125f, 4, 4, 64};
    ops::sdpa(s, b.alloc_tensor(DType::f32, {5, 8, 64}), b.alloc_tensor(DType::f16, {4, 40, 64}),
           b.alloc_tensor(DType::f16, {4, 40, 64}), b.alloc_tensor(DType::i32, {5}),
           b.alloc_tensor(DType::f32, {5, 8, 64}), p);
  });
}

TEST(FlashDecodeChunks, ShareTheValidKeysWithinTheLimits) {
  for (int64_t n_head : {1, 9, 32, 64, 600}) {
    for (int64_t ctx : {1, 5, 64, 145, 256, 257, 641, 4096, 4100, 131072}) {
      const int64_t chunks = ops::flash_decode_chunks(n_head, ctx);
      ASSERT_GE(chunks, 1) << n_head << " heads, ctx " << ctx;
      // Never coarser than kFlashDecodeChunk keys, never finer than kFlashDecodeMinChunk
      // unless the cache needs it, and within one wave unless the cache needs more.
      EXPECT_GE(chunks * ops::kFlashDecodeChunk, ctx);
      const int64_t fewest = (ctx + ops::kFlashDecodeChunk - 1) / ops::kFlashDecodeChunk;
      EXPECT_LE(chunks, std::max(fewest, (ctx + ops::kFlashDecodeMinChunk - 1) / ops::kFlashDecodeMinChunk));
      EXPECT_LE(chunks, std::max(fewest, ops::kFlashDecodeWave / n_head));
      for (int64_t length : {int64_t{0}, int64_t{1}, ctx / 3, ctx - 1, ctx}) {
        if (length < 0) continue;
        EXPECT_EQ(ops::flash_decode_chunk_begin(0, length, chunks), 0);
        EXPECT_EQ(ops::flash_decode_chunk_begin(chunks, length, chunks), length);
        for (int64_t c = 0; c < chunks; ++c) {
          const int64_t keys = ops::flash_decode_chunk_begin(c + 1, length, chunks) -
                               ops::flash_decode_chunk_begin(c, length, chunks);
          ASSERT_GE(keys, 0);
          ASSERT_LE(keys, ops::kFlashDecodeChunk) << n_head << " heads, ctx " << ctx << ", length " << length;
        }
      }
    }
  }
}

}  // namespace onepass::testing
