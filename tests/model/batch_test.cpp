// Batched steps over the paged KV pool against each sequence decoded alone through the
// single-sequence path: several sequences with different prompts, joining and leaving
// between steps, prefill chunks mixed into decode steps, blocks reused after release, and
// a full pool.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "onepass/core/error.h"
#include "onepass/model/architecture.h"
#include "onepass/model/kv_pool.h"
#include "onepass/model/llama.h"
#include "onepass/model/loader.h"
#include "onepass/model/sampler.h"
#include "onepass/model/tokenizer.h"
#include "support/testing.h"

namespace onepass::model {
namespace {

// ---- the block allocator ----------------------------------------------------------------

std::vector<int32_t> joined_tokens(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(KvBlockPool, SequencesGrowBlockByBlockAndReleaseTheirBlocks) {
  KvBlockPool pool(5, 4, 16);
  EXPECT_EQ(pool.max_blocks(), 4);
  const int32_t a = pool.add_sequence(), b = pool.add_sequence();
  EXPECT_NE(a, b);
  pool.reserve(a, 1);
  EXPECT_EQ(pool.capacity(a), 4);
  pool.reserve(a, 4);  // within its block
  EXPECT_EQ(pool.used_blocks(), 1);
  pool.reserve(a, 5);
  EXPECT_EQ(pool.capacity(a), 8);
  pool.reserve(b, 9);
  EXPECT_EQ(pool.free_blocks(), 0);
  // Slots: block * block_size + offset, blocks in the sequence's order.
  const auto ta = pool.block_table(a);
  ASSERT_EQ(ta.size(), 2u);
  EXPECT_EQ(pool.slot(a, 0), ta[0] * 4);
  EXPECT_EQ(pool.slot(a, 6), ta[1] * 4 + 2);
  EXPECT_THROW(pool.slot(a, 8), Error);  // beyond its blocks
  // Full: KvPoolFull, and nothing allocated.
  EXPECT_THROW(pool.reserve(a, 9), KvPoolFull);
  EXPECT_EQ(pool.capacity(a), 8);
  const std::vector<int32_t> freed(ta.begin(), ta.end());
  pool.release(a);
  EXPECT_EQ(pool.free_blocks(), 2);
  EXPECT_FALSE(pool.has_sequence(a));
  EXPECT_THROW(pool.block_table(a), Error);
  // The released blocks serve the next sequence.
  const int32_t c = pool.add_sequence();
  pool.reserve(c, 8);
  std::vector<int32_t> tc(pool.block_table(c).begin(), pool.block_table(c).end());
  std::sort(tc.begin(), tc.end());
  std::vector<int32_t> want = freed;
  std::sort(want.begin(), want.end());
  EXPECT_EQ(tc, want);
  EXPECT_THROW(pool.reserve(c, 17), Error);  // past the sequence's limit
  EXPECT_THROW(KvBlockPool(0, 4, 16), Error);
  EXPECT_THROW(KvBlockPool(4, 0, 16), Error);
}

// A sequence's full blocks, committed with their tokens, are shared by a later sequence whose
// tokens start the same (the whole chain before a block must match, not only its own tokens);
// shared and committed blocks are read-only; released, they stay cached and count as free.
TEST(KvBlockPool, CommittedBlocksAreSharedByTheSamePrefix) {
  KvBlockPool pool(6, 4, 16);
  const std::vector<int32_t> t = {11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
  const int32_t a = pool.add_sequence();
  pool.reserve(a, 10);
  pool.set_length(a, 10);
  EXPECT_THROW(pool.commit(a, joined_tokens(t, {21})), Error);  // more tokens than written
  EXPECT_EQ(pool.commit(a, t), 2);  // two full blocks; the third holds 2 of its 4 positions
  EXPECT_EQ(pool.commit(a, t), 0);
  EXPECT_THROW(pool.slot(a, 3), Error);  // committed: read-only
  EXPECT_NO_THROW(pool.slot(a, 9));
  const std::vector<int32_t> ta(pool.block_table(a).begin(), pool.block_table(a).end());

  const int32_t b = pool.add_sequence();
  EXPECT_EQ(pool.share_prefix(b, std::span(t).first(9)), 8);
  EXPECT_EQ(pool.length(b), 8);
  ASSERT_EQ(pool.block_table(b).size(), 2u);
  EXPECT_EQ(pool.block_table(b)[0], ta[0]);
  EXPECT_EQ(pool.block_table(b)[1], ta[1]);
  EXPECT_EQ(pool.references(ta[0]), 2);
  EXPECT_EQ(pool.references(ta[2]), 1);
  EXPECT_EQ(pool.used_blocks(), 3);
  EXPECT_THROW(pool.slot(b, 4), Error);  // shared: read-only
  EXPECT_THROW(pool.share_prefix(b, t), Error);  // b holds blocks already
  pool.reserve(b, 9);
  EXPECT_NE(pool.block_table(b)[2], ta[2]);
  EXPECT_NO_THROW(pool.slot(b, 8));

  // Another token in the second block: the first block only. Another in the first: nothing.
  std::vector<int32_t> u = t;
  u[5] = 99;
  const int32_t c = pool.add_sequence();
  EXPECT_EQ(pool.share_prefix(c, u), 4);
  pool.release(c);
  u = t;
  u[0] = 99;
  const int32_t d = pool.add_sequence();
  EXPECT_EQ(pool.share_prefix(d, u), 0);
  pool.release(d);
  // The second block's tokens at position 0: not that block, whose keys sit at positions 4..7.
  const int32_t moved = pool.add_sequence();
  EXPECT_EQ(pool.share_prefix(moved, std::span(t).subspan(4)), 0);
  pool.release(moved);
  EXPECT_EQ(pool.references(ta[0]), 2);

  // The same content committed by another sequence: the first copy stays the shared one.
  const int32_t e = pool.add_sequence();
  pool.reserve(e, 8);
  pool.set_length(e, 8);
  EXPECT_EQ(pool.commit(e, std::span(t).first(8)), 0);
  EXPECT_NO_THROW(pool.slot(e, 0));
  pool.release(e);

  // Released: the committed blocks stay cached, free but with their content.
  pool.release(a);
  EXPECT_EQ(pool.references(ta[0]), 1);
  pool.release(b);
  EXPECT_EQ(pool.used_blocks(), 0);
  EXPECT_EQ(pool.free_blocks(), 6);
  EXPECT_EQ(pool.cached_blocks(), 2);
  const int32_t f = pool.add_sequence();
  EXPECT_EQ(pool.share_prefix(f, t), 8);
  EXPECT_EQ(pool.cached_blocks(), 0);
  EXPECT_EQ(pool.used_blocks(), 2);
  EXPECT_EQ(pool.free_blocks(), 4);
  pool.release(f);
  EXPECT_EQ(pool.cached_blocks(), 2);
}

// Empty blocks go first; then the cached block released longest ago (a sequence's last block
// before its first; a block shared and released again is recent), and an evicted block is no
// longer found.
TEST(KvBlockPool, CachedBlocksAreEvictedLeastRecentlyReleasedFirst) {
  KvBlockPool pool(3, 2, 8);
  const std::vector<int32_t> x = {1, 2, 3, 4}, y = {5, 6};
  const int32_t sx = pool.add_sequence(), sy = pool.add_sequence();
  pool.reserve(sx, 4);
  pool.set_length(sx, 4);
  EXPECT_EQ(pool.commit(sx, x), 2);
  pool.reserve(sy, 2);
  pool.set_length(sy, 2);
  EXPECT_EQ(pool.commit(sy, y), 1);
  pool.release(sx);
  pool.release(sy);
  EXPECT_EQ(pool.cached_blocks(), 3);
  EXPECT_EQ(pool.free_blocks(), 3);
  const int32_t z = pool.add_sequence();
  pool.reserve(z, 2);  // evicts x's second block
  EXPECT_EQ(pool.cached_blocks(), 2);
  int32_t probe = pool.add_sequence();
  EXPECT_EQ(pool.share_prefix(probe, x), 2);
  pool.release(probe);
  pool.reserve(z, 4);  // y's block: x's first was taken and released again since
  probe = pool.add_sequence();
  EXPECT_EQ(pool.share_prefix(probe, y), 0);
  pool.release(probe);
  probe = pool.add_sequence();
  EXPECT_EQ(pool.share_prefix(probe, x), 2);  // held now: nothing left to take
  EXPECT_THROW(pool.reserve(z, 6), KvPoolFull);
  pool.release(probe);
  pool.reserve(z, 6);
  EXPECT_EQ(pool.cached_blocks(), 0);
  pool.release(z);
  EXPECT_EQ(pool.free_blocks(), 3);
}

// ---- batched steps against sequences decoded alone ---------------------------------------

LlamaConfig small(const char* family) {
  LlamaConfig c;
  c.vocab_size = 97;
  c.hidden = 64;
  c.ffn = 96;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 16;
  c.rope_dims = 16;
  c.rope_theta = 10000.0f;
  c.norm_eps = 1e-5f;
  apply_architecture(*find_architecture(family), c);
  if (c.sliding_window_period > 0) {  // windows short enough to matter over a few tokens
    c.layers = 3;
    c.sliding_window = 3;
    c.sliding_window_period = 2;
  }
  if (c.rope_theta_local > 0) c.rope_theta = 1e6f;
  if (c.attn_softcap > 0) c.attn_softcap = 0.8f;
  if (c.final_softcap > 0) c.final_softcap = 1.5f;
  return c;
}

LlamaConfig with_experts(LlamaConfig c) {
  c.experts = 6;
  c.experts_used = 2;
  c.expert_ffn = 32;
  return c;
}

std::vector<int32_t> some_tokens(size_t n, std::mt19937& rng, int64_t vocab) {
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

// A sequence of the scenario: its prompt, the tokens fed after it (teacher forcing, so that
// both paths see the same tokens), and when it joins the batch.
struct Script {
  std::vector<int32_t> prompt;
  std::vector<int32_t> fed;
  int join_step = 0;
};

// The logits after the prompt and after each fed token, the sequence decoded alone.
std::vector<std::vector<float>> alone(LlamaModel& model, const Script& s) {
  std::vector<std::vector<float>> out;
  model.reset();
  const auto first = model.prefill(s.prompt);
  out.emplace_back(first.begin(), first.end());
  for (const int32_t t : s.fed) {
    const auto l = model.decode(t);
    out.emplace_back(l.begin(), l.end());
  }
  return out;
}

struct Running {
  const Script* script = nullptr;
  int32_t sequence = -1;
  size_t in_cache = 0;  // tokens of prompt + fed in the cache
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> argmax;
  std::vector<int32_t> blocks;  // its blocks when it finished
  bool done = false;
};

// Runs the scripts through batched steps: a sequence joins at its step, its prompt runs in
// chunks of at most `chunk` rows mixed into the others' decode rows, and it leaves (its
// blocks released) after its last fed token.
std::vector<Running> batched(LlamaModel& model, const std::vector<Script>& scripts, size_t chunk) {
  std::vector<Running> runs(scripts.size());
  KvBlockPool& pool = model.kv_pool();
  for (int step = 0;; ++step) {
    std::vector<BatchRow> rows;
    std::vector<size_t> owner;  // the run of each logits row
    bool pending = false;
    for (size_t i = 0; i < scripts.size(); ++i) {
      Running& r = runs[i];
      r.script = &scripts[i];
      if (r.done) continue;
      pending = true;
      if (step < scripts[i].join_step) continue;
      if (r.sequence < 0) r.sequence = pool.add_sequence();
      const Script& s = scripts[i];
      const size_t total = s.prompt.size() + s.fed.size();
      const size_t n = r.in_cache < s.prompt.size() ? std::min(chunk, s.prompt.size() - r.in_cache) : 1;
      for (size_t j = 0; j < n; ++j) {
        const size_t pos = r.in_cache + j;
        const int32_t token = pos < s.prompt.size() ? s.prompt[pos] : s.fed[pos - s.prompt.size()];
        const bool last = j + 1 == n && pos + 1 >= s.prompt.size();
        rows.push_back({r.sequence, token, static_cast<int32_t>(pos), last});
        if (last) owner.push_back(i);
      }
      r.in_cache += n;
      (void)total;
    }
    if (!pending) break;
    if (rows.empty()) continue;
    const BatchResult result = model.step(rows);
    const auto vocab = static_cast<size_t>(model.config().vocab_size);
    EXPECT_EQ(result.argmax.size(), owner.size());
    EXPECT_EQ(result.logits.size(), owner.size() * vocab);
    for (size_t k = 0; k < owner.size(); ++k) {
      Running& r = runs[owner[k]];
      r.logits.emplace_back(result.logits.begin() + static_cast<ptrdiff_t>(k * vocab),
                            result.logits.begin() + static_cast<ptrdiff_t>((k + 1) * vocab));
      r.argmax.push_back(result.argmax[k]);
    }
    for (Running& r : runs) {
      if (r.done || r.sequence < 0) continue;
      if (r.in_cache == r.script->prompt.size() + r.script->fed.size()) {
        const auto table = pool.block_table(r.sequence);
        r.blocks.assign(table.begin(), table.end());
        pool.release(r.sequence);
        r.done = true;
      }
    }
  }
  return runs;
}

// Every row of logits within rtol of the largest reference logit, and the argmax the
// reference's wherever its best two logits are further apart than the tolerance.
void expect_same(const std::vector<std::vector<float>>& want, const Running& got, double rtol, const std::string& what) {
  ASSERT_EQ(got.logits.size(), want.size()) << what;
  for (size_t step = 0; step < want.size(); ++step) {
    const std::vector<float>& w = want[step];
    const std::vector<float>& g = got.logits[step];
    ASSERT_EQ(g.size(), w.size());
    double scale = 0;
    for (float v : w) scale = std::max(scale, static_cast<double>(std::abs(v)));
    for (size_t i = 0; i < w.size(); ++i) {
      ASSERT_NEAR(g[i], w[i], rtol * scale) << what << ", logits " << step << ", token " << i;
    }
    std::vector<float> sorted = w;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    if (sorted[0] - sorted[1] > 4 * rtol * scale) {
      EXPECT_EQ(got.argmax[step], argmax(w)) << what << ", logits " << step;
    }
  }
}

struct Family {
  const char* name;
  LlamaConfig config;
  DType weights;
  DType kv_type;
  double rtol;
};

void PrintTo(const Family& f, std::ostream* os) { *os << f.name; }

class BatchedStep : public ::testing::TestWithParam<Family> {};

TEST_P(BatchedStep, MatchesEachSequenceDecodedAlone) {
  const Family& f = GetParam();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  auto src = make_random_source(f.config, f.weights, seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const int64_t vocab = f.config.vocab_size;
  // A and B start together; C joins while they decode (its prompt in chunks mixed into
  // their steps); A leaves early and D, joining later, takes blocks A released.
  std::vector<Script> scripts = {
      {some_tokens(5, rng, vocab), some_tokens(3, rng, vocab), 0},
      {some_tokens(11, rng, vocab), some_tokens(9, rng, vocab), 0},
      {some_tokens(9, rng, vocab), some_tokens(6, rng, vocab), 2},
      {some_tokens(7, rng, vocab), some_tokens(5, rng, vocab), 6},
  };
  LoadOptions o;
  o.kv_type = f.kv_type;
  o.context = 32;
  o.max_batch = 16;
  o.sequences = 4;
  o.kv_block_size = 4;
  o.kv_blocks = 14;  // fewer than 4 full contexts: D needs A's blocks
  auto backend = testing::cpu_backend();
  LlamaModel model(backend, *src, o);
  // On the SIMD paths a product of one row (decoding alone) rounds x to int16 per 256
  // values and a product of more rows than the matrix-vector kernels take keeps f32 x.
  const double rtol =
      backend->info().isa != "portable" && dtype_is_quantized(f.weights) ? std::max(f.rtol, 1e-3) : f.rtol;
  std::vector<std::vector<std::vector<float>>> want;
  for (const Script& s : scripts) want.push_back(alone(model, s));
  const std::vector<Running> runs = batched(model, scripts, 4);
  for (size_t i = 0; i < runs.size(); ++i) expect_same(want[i], runs[i], rtol, cat("sequence ", i));
  // D reused a block of A.
  const auto& a = runs[0].blocks;
  const auto& d = runs[3].blocks;
  EXPECT_TRUE(std::any_of(d.begin(), d.end(), [&](int32_t b) { return std::find(a.begin(), a.end(), b) != a.end(); }));
  EXPECT_EQ(model.kv_pool().used_blocks(), 0);
  EXPECT_GE(model.step_graphs(), 2u);  // several buckets, each recorded once
}

INSTANTIATE_TEST_SUITE_P(
    Families, BatchedStep,
    // The batched step runs the same arithmetic as the single-sequence path in another
    // order (unfused RoPE and cache writes, multi-row products): f32 rounding, 1e-5 of the
    // largest logit; 2e-4 with an f16 cache (as LlamaVsReference).
    ::testing::Values(Family{"llama_f32", small("llama"), DType::f32, DType::f32, 1e-5},
                      Family{"llama_q8_0_f16_cache", small("llama"), DType::q8_0, DType::f16, 2e-4},
                      Family{"qwen2_bias", small("qwen2"), DType::f32, DType::f32, 1e-5},
                      Family{"qwen3_qk_norm", small("qwen3"), DType::f32, DType::f32, 1e-5},
                      Family{"gemma3_local_global", small("gemma3"), DType::f32, DType::f32, 1e-5},
                      Family{"gemma2_softcaps", small("gemma2"), DType::f32, DType::f32, 1e-5},
                      Family{"phi3_fused_tensors", small("phi3"), DType::f32, DType::f32, 1e-5},
                      Family{"mixtral_experts", with_experts(small("llama")), DType::f32, DType::f32, 1e-5}),
    [](const auto& p) { return std::string(p.param.name); });

// The batched step on the GPU (paged attention, multi-row products, row gather) against
// each sequence decoded alone on the CPU, which the float64 reference checks; 1e-3 of the
// largest logit, as Llama.GpuFamiliesMatchCpu.
TEST(BatchedStep, GpuMatchesEachSequenceDecodedAloneOnTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device available";
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for (const char* name : {"llama", "qwen2", "qwen3", "gemma3", "gemma2", "phi3"}) {
    SCOPED_TRACE(name);
    LlamaConfig c = small(name);
    c.hidden = 256;
    c.ffn = 512;
    c.head_dim = 64;
    c.rope_dims = 64;
    auto src = make_random_source(c, DType::f16, seed);
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::vector<Script> scripts = {
        {some_tokens(5, rng, c.vocab_size), some_tokens(3, rng, c.vocab_size), 0},
        {some_tokens(11, rng, c.vocab_size), some_tokens(9, rng, c.vocab_size), 0},
        {some_tokens(9, rng, c.vocab_size), some_tokens(6, rng, c.vocab_size), 2},
        {some_tokens(7, rng, c.vocab_size), some_tokens(5, rng, c.vocab_size), 6},
    };
    LoadOptions o;
    o.context = 32;
    o.max_batch = 16;
    o.sequences = 4;
    o.kv_block_size = 4;
    o.kv_blocks = 14;
    LlamaModel cpu(testing::cpu_backend(), *src, o);
    LlamaModel gpu(make_cuda_backend(0, testing::test_options()), *src, o);
    std::vector<std::vector<std::vector<float>>> want;
    for (const Script& s : scripts) want.push_back(alone(cpu, s));
    const std::vector<Running> runs = batched(gpu, scripts, 4);
    for (size_t i = 0; i < runs.size(); ++i) expect_same(want[i], runs[i], 1e-3, cat("sequence ", i));
  }
}

// A batched step holds a row per sequence, whatever the context: 12 sequences of a context
// of 8 positions prefill and decode together (steps of 12 rows, one token of each), each as
// it decodes alone.
TEST(BatchedStep, MoreSequencesThanContextPositions) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const LlamaConfig c = small("llama");
  auto src = make_random_source(c, DType::f32, seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<Script> scripts;
  for (int i = 0; i < 12; ++i) scripts.push_back({some_tokens(3, rng, c.vocab_size), some_tokens(4, rng, c.vocab_size), 0});
  LoadOptions o;
  o.context = 8;
  o.max_batch = 16;
  o.sequences = 12;
  o.kv_block_size = 4;
  // An f32 cache: with f16, a key that the two product orders round to neighbouring f16
  // values moves the logits by ~1e-4 of their largest.
  o.kv_type = DType::f32;
  LlamaModel model(testing::cpu_backend(), *src, o);
  EXPECT_EQ(model.max_step_rows(), 12);
  std::vector<std::vector<std::vector<float>>> want;
  for (const Script& s : scripts) want.push_back(alone(model, s));
  const std::vector<Running> runs = batched(model, scripts, 1);
  // Steps of 12 rows take the matrix-matrix products, which sum K in another order than a
  // sequence's one-row steps: 1e-5 of the largest logit, as the families' batched steps.
  for (size_t i = 0; i < runs.size(); ++i) expect_same(want[i], runs[i], 1e-5, cat("sequence ", i));
}

TEST(BatchedStep, PoolFullIsAnErrorThatChangesNothing) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const LlamaConfig c = small("llama");
  auto src = make_random_source(c, DType::f32, seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  LoadOptions o;
  o.context = 32;
  o.max_batch = 16;
  o.sequences = 2;
  o.kv_block_size = 4;
  o.kv_blocks = 3;
  o.kv_type = DType::f32;  // as MoreSequencesThanContextPositions: 1e-5 needs an f32 cache
  LlamaModel model(testing::cpu_backend(), *src, o);
  KvBlockPool& pool = model.kv_pool();
  const Script first{some_tokens(8, rng, c.vocab_size), {}, 0};
  const Script second{some_tokens(6, rng, c.vocab_size), {}, 0};
  auto prompt_rows = [](int32_t sequence, const std::vector<int32_t>& prompt) {
    std::vector<BatchRow> rows;
    for (size_t i = 0; i < prompt.size(); ++i) {
      rows.push_back({sequence, prompt[i], static_cast<int32_t>(i), i + 1 == prompt.size()});
    }
    return rows;
  };
  const int32_t a = pool.add_sequence(), b = pool.add_sequence();
  model.step(prompt_rows(a, first.prompt));  // 2 of 3 blocks
  EXPECT_EQ(pool.free_blocks(), 1);
  // Both sequences in one step: b needs 2 blocks, 1 is free.
  std::vector<BatchRow> both = prompt_rows(b, second.prompt);
  both.push_back({a, 5, 8, true});
  EXPECT_THROW(model.step(both), KvPoolFull);
  EXPECT_EQ(pool.free_blocks(), 1);
  EXPECT_EQ(pool.capacity(a), 8);
  EXPECT_EQ(pool.capacity(b), 0);
  // Once a is released, b runs and its logits are its own.
  pool.release(a);
  const BatchResult r = model.step(prompt_rows(b, second.prompt));
  const std::vector<float> got(r.logits.begin(), r.logits.end());
  const std::vector<std::vector<float>> want = alone(model, second);
  Running run;
  run.logits = {got};
  run.argmax = {argmax(got)};
  expect_same(want, run, 1e-5, "after release");
}

// A sequence that shares another's committed prefix blocks and is prefilled from after them
// has the logits of its prompt prefilled in full, and so do its decode steps; also once the
// other has left (its blocks cached, not held). rtol 0: bit for bit.
void expect_shared_prefix_logits(const std::shared_ptr<Backend>& backend, DType weights, double rtol) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const LlamaConfig c = small("llama");
  auto src = make_random_source(c, weights, seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  LoadOptions o;
  o.context = 32;
  o.max_batch = 16;
  o.sequences = 3;
  o.kv_block_size = 4;
  o.kv_blocks = 24;
  LlamaModel model(backend, *src, o);
  KvBlockPool& pool = model.kv_pool();
  const std::vector<int32_t> prefix = some_tokens(10, rng, c.vocab_size);
  const std::vector<int32_t> first = joined_tokens(prefix, some_tokens(3, rng, c.vocab_size));
  std::vector<int32_t> second = joined_tokens(prefix, some_tokens(4, rng, c.vocab_size));
  second[10] = first[10] == 1 ? 2 : 1;  // the third block differs
  // The prompt from position `from` on in chunks of 4 rows, then 3 greedy decode steps: the
  // logits after the prompt and after each decoded token.
  auto run = [&](int32_t sequence, const std::vector<int32_t>& prompt, size_t from) {
    Running out;
    BatchResult r;
    for (size_t i = from; i < prompt.size(); i += 4) {
      std::vector<BatchRow> rows;
      for (size_t j = i; j < std::min(i + 4, prompt.size()); ++j) {
        rows.push_back({sequence, prompt[j], static_cast<int32_t>(j), j + 1 == prompt.size()});
      }
      r = model.step(rows);
    }
    for (int32_t position = static_cast<int32_t>(prompt.size());; ++position) {
      out.logits.emplace_back(r.logits.begin(), r.logits.end());
      out.argmax.push_back(r.argmax[0]);
      if (out.logits.size() == 4) break;
      const std::vector<BatchRow> row = {{sequence, r.argmax[0], position, true}};
      r = model.step(row);
    }
    return out;
  };
  auto expect_logits = [&](const Running& want, const Running& got, const char* what) {
    if (rtol > 0) return expect_same(want.logits, got, rtol, what);
    for (size_t i = 0; i < want.logits.size(); ++i) EXPECT_EQ(got.logits[i], want.logits[i]) << what << ", logits " << i;
  };
  const int32_t reference = pool.add_sequence();
  const Running want = run(reference, second, 0);
  pool.release(reference);
  EXPECT_EQ(pool.cached_blocks(), 0);  // nothing committed

  const int32_t a = pool.add_sequence();
  run(a, first, 0);
  EXPECT_EQ(pool.commit(a, first), 3);
  const int32_t b = pool.add_sequence();
  EXPECT_EQ(pool.share_prefix(b, std::span(second).first(second.size() - 1)), 8);
  EXPECT_EQ(pool.references(pool.block_table(a)[1]), 2);
  expect_logits(want, run(b, second, 8), "sharing a running sequence's blocks");
  pool.release(a);
  pool.release(b);
  EXPECT_EQ(pool.cached_blocks(), 3);

  const int32_t d = pool.add_sequence();
  EXPECT_EQ(pool.share_prefix(d, std::span(second).first(second.size() - 1)), 8);
  expect_logits(want, run(d, second, 8), "from cached blocks");
  pool.release(d);
  EXPECT_EQ(pool.used_blocks(), 0);
  EXPECT_EQ(pool.free_blocks(), pool.blocks());
}

// Every step has at most 8 rows, so every product is the matrix-vector kernel, whose rows do
// not depend on each other: the same bits.
TEST(BatchedStep, SharedPrefixGivesTheLogitsOfAFullPrefill) {
  expect_shared_prefix_logits(testing::cpu_backend(), DType::f32, 0);
}

TEST(BatchedStep, GpuSharedPrefixGivesTheLogitsOfAFullPrefill) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device available";
  expect_shared_prefix_logits(make_cuda_backend(0, testing::test_options()), DType::f16, 1e-3);
}

TEST(BatchedStep, BadRowsAreClearErrors) {
  auto src = make_random_source(small("llama"), DType::f32, 5);
  LoadOptions o;
  o.context = 16;
  o.max_batch = 4;
  LlamaModel single(testing::cpu_backend(), *src, o);
  EXPECT_THROW(single.kv_pool(), Error);  // no pool without LoadOptions::sequences
  o.sequences = 1;
  LlamaModel model(testing::cpu_backend(), *src, o);
  const int32_t s = model.kv_pool().add_sequence();
  const std::vector<BatchRow> unknown = {{s + 1, 1, 0, true}};
  EXPECT_THROW(model.step(unknown), Error);
  const std::vector<BatchRow> bad_token = {{s, 97, 0, true}};
  EXPECT_THROW(model.step(bad_token), Error);
  const std::vector<BatchRow> bad_position = {{s, 1, 16, true}};
  EXPECT_THROW(model.step(bad_position), Error);
  const std::vector<BatchRow> too_many(5, BatchRow{s, 1, 0, false});
  EXPECT_THROW(model.step(too_many), Error);
  const std::vector<BatchRow> two_logits = {{s, 1, 0, true}, {s, 2, 1, true}};  // sequences = 1
  EXPECT_THROW(model.step(two_logits), Error);
  const std::vector<BatchRow> gap = {{s, 1, 1, true}};  // position 0 never written
  EXPECT_THROW(model.step(gap), Error);
  const std::vector<BatchRow> twice = {{s, 1, 0, false}, {s, 2, 0, true}};
  EXPECT_THROW(model.step(twice), Error);
  EXPECT_EQ(model.kv_pool().used_blocks(), 0);
  const std::vector<BatchRow> first = {{s, 1, 0, false}, {s, 2, 1, true}};
  model.step(first);
  EXPECT_EQ(model.kv_pool().length(s), 2);
  const std::vector<BatchRow> rewrite = {{s, 3, 1, true}};  // a position again: allowed
  model.step(rewrite);
  EXPECT_EQ(model.kv_pool().length(s), 2);
}

// The default model: four prompts of different lengths decoded greedily together give the
// tokens of each decoded alone (on the CPU, and on the GPU when there is one).
TEST(BatchedStep, DefaultModelGreedyTokensMatchDecodingAlone) {
  const char* path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not installed (scripts/setup)";
  auto src = open_model(path);
  Tokenizer tok(*src->tokenizer_data());
  std::vector<std::vector<int32_t>> prompts;
  for (const char* text : {"The capital of France is", "Once upon a time",
                           "List three colours of the rainbow, one per line:", "2 + 2 ="}) {
    prompts.push_back(tok.encode(text));
  }
  std::vector<std::shared_ptr<Backend>> backends = {testing::cpu_backend(Options::defaults())};
  if (cuda_device_count() > 0) backends.push_back(make_cuda_backend(0));
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend_name(backend->kind()));
    LoadOptions o;
    o.context = 128;
    o.max_batch = 64;
    o.sequences = 4;
    LlamaModel model(backend, *src, o);
    constexpr int kSteps = 12;
    std::vector<std::vector<int32_t>> want;
    for (const auto& p : prompts) {
      model.reset();
      std::vector<int32_t> out = {argmax(model.prefill(p))};
      for (int i = 1; i < kSteps; ++i) out.push_back(model.decode_greedy(out.back()));
      want.push_back(out);
    }
    KvBlockPool& pool = model.kv_pool();
    std::vector<int32_t> seqs;
    std::vector<BatchRow> rows;
    for (size_t i = 0; i < prompts.size(); ++i) {
      seqs.push_back(pool.add_sequence());
      for (size_t j = 0; j < prompts[i].size(); ++j) {
        rows.push_back({seqs[i], prompts[i][j], static_cast<int32_t>(j), j + 1 == prompts[i].size()});
      }
    }
    std::vector<std::vector<int32_t>> got(prompts.size());
    BatchResult r = model.step(rows, false);
    EXPECT_TRUE(r.logits.empty());
    for (int step = 0;; ++step) {
      for (size_t i = 0; i < prompts.size(); ++i) got[i].push_back(r.argmax[i]);
      if (step + 1 == kSteps) break;
      rows.clear();
      for (size_t i = 0; i < prompts.size(); ++i) {
        const auto position = static_cast<int32_t>(prompts[i].size() + got[i].size() - 1);
        rows.push_back({seqs[i], got[i].back(), position, true});
      }
      r = model.step(rows, false);
    }
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i], want[i]) << "prompt " << i;
  }
}

}  // namespace
}  // namespace onepass::model
