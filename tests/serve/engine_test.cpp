// serve::Engine on a small random model: the text a request streams equals the model's own
// generation, requests queue and cancel, the queue refuses beyond its limit, shutdown drains
// or cancels; serve::StopMatcher holds back text that may become a stop string.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "onepass/backends/factory.h"
#include "onepass/model/llama.h"
#include "onepass/model/model_source.h"
#include "onepass/serve/engine.h"

namespace onepass::serve {
namespace {

using model::LlamaConfig;

TEST(StopMatcher, CutsAtTheFirstStopStringAcrossPieces) {
  StopMatcher m({"\n\nUser:", "END"});
  std::string out = m.push("Hello");
  out += m.push(" world\n");
  EXPECT_EQ(out, "Hello world");  // "\n" could start "\n\nUser:"
  out += m.push("\nUs");
  EXPECT_EQ(out, "Hello world");
  EXPECT_FALSE(m.stopped());
  out += m.push("er: more");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, "Hello world");
  EXPECT_EQ(m.push("ignored"), "");
}

TEST(StopMatcher, ReleasesHeldTextThatStopsMatching) {
  StopMatcher m({"ENDING"});
  EXPECT_EQ(m.push("abEN"), "ab");
  EXPECT_EQ(m.push("Dx"), "ENDx");
  EXPECT_EQ(m.push("END"), "");
  EXPECT_EQ(m.flush(), "END");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  StopMatcher m({"cd", "b"});
  EXPECT_EQ(m.push("abcd"), "a");
  EXPECT_TRUE(m.stopped());
  StopMatcher none({});
  EXPECT_EQ(none.push("text"), "text");
  StopMatcher empty_string({""});
  EXPECT_EQ(empty_string.push("text"), "text");  // an empty stop string never matches
}

LlamaConfig tiny_config() {
  LlamaConfig c;
  c.vocab_size = 300;
  c.hidden = 64;
  c.ffn = 96;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 16;
  c.rope_dims = 16;
  return c;
}

// One random model and a byte-level vocabulary of the same size.
struct TinyModel {
  std::shared_ptr<Backend> backend = make_cpu_backend();
  std::unique_ptr<model::ModelSource> source = model::make_random_source(tiny_config(), DType::f32, 7);
  model::Tokenizer tokenizer{model::synthesize_bpe_vocab(300, "gpt2", 1)};
  model::LlamaModel llama;
  explicit TinyModel(int64_t context = 64, int64_t sequences = 0, int64_t kv_blocks = 0, int64_t sample_penalties = 64)
      : llama(backend, *source,
              model::LoadOptions{.context = context,
                                 .max_batch = 16,
                                 .sequences = sequences,
                                 .kv_blocks = kv_blocks,
                                 .sample_penalties = sample_penalties}) {}
};

// Collects a request's updates.
struct Collector {
  std::mutex mutex;
  std::condition_variable cv;
  std::string text;
  std::vector<Update> updates;
  bool done = false;
  UpdateCallback callback(bool keep_going = true) {
    return [this, keep_going](const Update& u) {
      std::lock_guard lock(mutex);
      text += u.text;
      updates.push_back(u);
      done = u.done;
      cv.notify_all();
      return keep_going;
    };
  }
  Update wait() {
    std::unique_lock lock(mutex);
    EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return done; }));
    return updates.empty() ? Update{} : updates.back();
  }
};

// The model's greedy continuation of `prompt` by hand: argmax of prefill, then decode.
std::vector<int32_t> greedy_by_hand(model::LlamaModel& llama, const model::Tokenizer& tok,
                                    const std::vector<int32_t>& prompt, int64_t n) {
  llama.reset();
  std::vector<int32_t> out;
  int32_t next = model::argmax(llama.prefill(prompt));
  while (static_cast<int64_t>(out.size()) < n && !tok.is_end_of_generation(next)) {
    out.push_back(next);
    if (static_cast<int64_t>(out.size()) == n) break;
    next = model::argmax(llama.decode(next));
  }
  return out;
}

TEST(Engine, GreedyTextEqualsTheModelsOwnGeneration) {
  TinyModel m;
  const std::vector<int32_t> prompt = {5, 17, 42, 99, 3};
  const std::vector<int32_t> want_ids = greedy_by_hand(m.llama, m.tokenizer, prompt, 20);
  ASSERT_FALSE(want_ids.empty());
  const std::string want =
      m.tokenizer.decode(want_ids, {.render_special = false, .strip_space_prefix = false});

  Engine engine(m.llama, m.tokenizer);
  Collector c;
  engine.submit(Request{.prompt = prompt, .max_tokens = 20}, c.callback());
  const Update last = c.wait();
  EXPECT_EQ(c.text, want);
  EXPECT_EQ(last.completion_tokens, static_cast<int64_t>(want_ids.size()));
  EXPECT_EQ(last.prompt_tokens, 5);
  EXPECT_EQ(last.finish, want_ids.size() == 20 ? FinishReason::length : FinishReason::stop);
  // The same request again gives the same text (the cache is reset between requests).
  Collector again;
  engine.submit(Request{.prompt = prompt, .max_tokens = 20}, again.callback());
  again.wait();
  EXPECT_EQ(again.text, want);
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.requests_submitted, 2u);
  EXPECT_EQ(s.requests_finished, 2u);
  EXPECT_EQ(s.completion_tokens, 2 * want_ids.size());
  EXPECT_EQ(s.prompt_tokens, 10u);
}

TEST(Engine, SampledRequestsAreReproducibleBySeed) {
  TinyModel m;
  Engine engine(m.llama, m.tokenizer);
  auto run = [&](uint64_t seed) {
    Collector c;
    Request r{.prompt = {1, 2, 3}, .max_tokens = 12};
    r.sampling.temperature = 1.5f;
    r.sampling.seed = seed;
    engine.submit(r, c.callback());
    c.wait();
    return c.text;
  };
  const std::string a = run(11);
  EXPECT_EQ(run(11), a);
  bool differs = false;
  for (uint64_t seed = 12; seed < 20 && !differs; ++seed) differs = run(seed) != a;
  EXPECT_TRUE(differs) << "eight other seeds all gave the same sampled text";
}

TEST(Engine, MaxTokensAndTheContextBoundTheAnswer) {
  TinyModel m(/*context=*/12);
  Engine engine(m.llama, m.tokenizer);
  Collector c;
  engine.submit(Request{.prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, .max_tokens = 100}, c.callback());
  const Update last = c.wait();
  // 10 prompt tokens in a context of 12: the prefill's token and two decoded ones.
  if (last.finish == FinishReason::length) {
    EXPECT_EQ(last.completion_tokens, 3);
  }
  EXPECT_LE(last.completion_tokens, 3);
  Collector one;
  engine.submit(Request{.prompt = {1, 2}, .max_tokens = 1}, one.callback());
  EXPECT_LE(one.wait().completion_tokens, 1);
}

TEST(Engine, RejectsBadRequestsNamingTheProblem) {
  TinyModel m(16);
  Engine engine(m.llama, m.tokenizer);
  auto expect_error = [&](Request r, const std::string& needle) {
    try {
      engine.submit(std::move(r), [](const Update&) { return true; });
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(Request{.prompt = {}}, "no tokens");
  expect_error(Request{.prompt = {1, 300}}, "token id 300");
  expect_error(Request{.prompt = {1, -1}}, "token id -1");
  expect_error(Request{.prompt = std::vector<int32_t>(17, 1)}, "more than the context of 16");
  expect_error(Request{.prompt = {1}, .max_tokens = 0}, "max_tokens");
  Request bad_sampling{.prompt = {1}};
  bad_sampling.sampling.top_p = 1.5f;
  expect_error(bad_sampling, "top");
  EXPECT_EQ(engine.stats().requests_submitted, 0u);
}

// A request whose callback blocks until released holds the model; the others queue.
TEST(Engine, QueueLimitCancelAndCallbackCancel) {
  TinyModel m;
  Engine engine(m.llama, m.tokenizer, EngineOptions{.queue_limit = 2});
  std::mutex gate_mutex;
  std::condition_variable gate_cv;
  bool open = false;
  std::atomic<bool> first_started{false};
  Collector blocker;
  auto blocking = blocker.callback();
  engine.submit(Request{.prompt = {1, 2}, .max_tokens = 5}, [&](const Update& u) {
    first_started = true;
    std::unique_lock lock(gate_mutex);
    gate_cv.wait(lock, [&] { return open; });
    return blocking(u);
  });
  while (!first_started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  Collector queued_a, queued_b;
  const uint64_t a = engine.submit(Request{.prompt = {3}, .max_tokens = 4}, queued_a.callback());
  engine.submit(Request{.prompt = {4}, .max_tokens = 4}, queued_b.callback(/*keep_going=*/false));
  EXPECT_THROW(engine.submit(Request{.prompt = {5}}, [](const Update&) { return true; }), Unavailable);
  EngineStats s = engine.stats();
  EXPECT_EQ(s.queued, 2);
  EXPECT_EQ(s.running, 1);
  EXPECT_EQ(s.requests_rejected, 1u);

  engine.cancel(a);  // still queued: its callback hears at once
  EXPECT_EQ(queued_a.wait().finish, FinishReason::cancelled);
  EXPECT_TRUE(queued_a.text.empty());
  {
    std::lock_guard lock(gate_mutex);
    open = true;
  }
  gate_cv.notify_all();
  blocker.wait();
  // b's callback answers false to its first text: cancelled after one token.
  const Update b_last = queued_b.wait();
  EXPECT_EQ(b_last.finish, FinishReason::cancelled);
  s = engine.stats();
  EXPECT_EQ(s.requests_cancelled, 2u);
  EXPECT_EQ(s.queued, 0);
}

TEST(Engine, ShutdownDrainsOrCancels) {
  TinyModel m;
  {
    Engine engine(m.llama, m.tokenizer);
    Collector a, b;
    engine.submit(Request{.prompt = {1}, .max_tokens = 6}, a.callback());
    engine.submit(Request{.prompt = {2}, .max_tokens = 6}, b.callback());
    engine.shutdown(/*drain=*/true);
    EXPECT_NE(a.wait().finish, FinishReason::cancelled);
    EXPECT_NE(b.wait().finish, FinishReason::cancelled);
    EXPECT_THROW(engine.submit(Request{.prompt = {1}}, [](const Update&) { return true; }), Unavailable);
  }
  {
    Engine engine(m.llama, m.tokenizer);
    std::atomic<bool> started{false};
    std::atomic<bool> release{false};
    Collector a, b;
    auto a_cb = a.callback();
    engine.submit(Request{.prompt = {1}, .max_tokens = 50}, [&](const Update& u) {
      started = true;
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return a_cb(u);
    });
    engine.submit(Request{.prompt = {2}, .max_tokens = 6}, b.callback());
    while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::thread stopper([&] { engine.shutdown(/*drain=*/false); });
    EXPECT_EQ(b.wait().finish, FinishReason::cancelled);  // queued: cancelled at once
    release = true;
    stopper.join();
    const Update a_last = a.wait();
    EXPECT_EQ(a_last.finish, FinishReason::cancelled);
    EXPECT_LT(a_last.completion_tokens, 50);
  }
}

TEST(Engine, ManyThreadsSubmittingAllFinishWithTheirOwnText) {
  TinyModel m;
  const std::vector<int32_t> prompt = {7, 8, 9};
  const std::string want = m.tokenizer.decode(greedy_by_hand(m.llama, m.tokenizer, prompt, 8),
                                              {.render_special = false, .strip_space_prefix = false});
  Engine engine(m.llama, m.tokenizer, EngineOptions{.queue_limit = 64});
  std::vector<std::unique_ptr<Collector>> collectors;
  for (int i = 0; i < 8; ++i) collectors.push_back(std::make_unique<Collector>());
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] { engine.submit(Request{.prompt = prompt, .max_tokens = 8}, collectors[i]->callback()); });
  }
  for (std::thread& t : threads) t.join();
  for (auto& c : collectors) {
    c->wait();
    EXPECT_EQ(c->text, want);
  }
  EXPECT_EQ(engine.stats().requests_finished, 8u);
}

// ---- continuous batching (parallel > 1) -------------------------------------------------

std::string greedy_text(TinyModel& m, const std::vector<int32_t>& prompt, int64_t n) {
  return m.tokenizer.decode(greedy_by_hand(m.llama, m.tokenizer, prompt, n),
                            {.render_special = false, .strip_space_prefix = false});
}

std::vector<int32_t> prompt_of(int i) {
  std::vector<int32_t> p;
  for (int j = 0; j <= i % 7; ++j) p.push_back(static_cast<int32_t>(1 + (i * 37 + j * 11) % 290));
  return p;
}

// 16 concurrent requests of different prompts, 4 at a time: each gets the text the model
// gives its prompt alone; a greedy request alone in the engine gets the same text as in
// the full batch.
TEST(EngineParallel, SixteenRequestsFourAtATimeAllGetTheirOwnText) {
  TinyModel m(64, 4);
  std::vector<std::string> want;
  for (int i = 0; i < 16; ++i) want.push_back(greedy_text(m, prompt_of(i), 12));
  Engine engine(m.llama, m.tokenizer, EngineOptions{.parallel = 4, .prefill_chunk = 3});
  Collector alone;
  engine.submit(Request{.prompt = prompt_of(5), .max_tokens = 12}, alone.callback());
  alone.wait();
  EXPECT_EQ(alone.text, want[5]);
  std::vector<std::unique_ptr<Collector>> collectors;
  for (int i = 0; i < 16; ++i) collectors.push_back(std::make_unique<Collector>());
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      engine.submit(Request{.prompt = prompt_of(i), .max_tokens = 12}, collectors[static_cast<size_t>(i)]->callback());
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 16; ++i) {
    collectors[static_cast<size_t>(i)]->wait();
    EXPECT_EQ(collectors[static_cast<size_t>(i)]->text, want[static_cast<size_t>(i)]) << "request " << i;
  }
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.requests_finished, 17u);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.kv_blocks_total, 4 * 4);  // 4 sequences x 64 positions / 16
  EXPECT_GT(s.batch_rows, 0);
  EXPECT_EQ(s.running, 0);
}

// A pool of fewer blocks than the running requests need: the newest gives its blocks up and
// is recomputed later, and every request still gets its own text.
TEST(EngineParallel, SmallPoolPreemptsAndRecomputes) {
  TinyModel m(64, 4, /*kv_blocks=*/5);
  std::vector<std::string> want;
  for (int i = 0; i < 6; ++i) want.push_back(greedy_text(m, prompt_of(i), 40));
  Engine engine(m.llama, m.tokenizer, EngineOptions{.parallel = 4});
  std::vector<std::unique_ptr<Collector>> collectors;
  for (int i = 0; i < 6; ++i) {
    collectors.push_back(std::make_unique<Collector>());
    engine.submit(Request{.prompt = prompt_of(i), .max_tokens = 40}, collectors.back()->callback());
  }
  for (int i = 0; i < 6; ++i) {
    collectors[static_cast<size_t>(i)]->wait();
    EXPECT_EQ(collectors[static_cast<size_t>(i)]->text, want[static_cast<size_t>(i)]) << "request " << i;
  }
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.requests_finished, 6u);
  EXPECT_GT(s.preemptions, 0u);
  EXPECT_EQ(s.kv_blocks_used, 0);
}

TEST(EngineParallel, CancelFreesTheBlocksAndOthersContinue) {
  TinyModel m(64, 2);
  const std::string want = greedy_text(m, {9, 8, 7}, 20);
  Engine engine(m.llama, m.tokenizer, EngineOptions{.parallel = 2});
  std::atomic<bool> started{false};
  std::atomic<bool> release{false};
  Collector a, b;
  auto a_cb = a.callback();
  const uint64_t id = engine.submit(Request{.prompt = {1, 2, 3}, .max_tokens = 50}, [&](const Update& u) {
    started = true;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return a_cb(u);
  });
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(engine.stats().running, 1);
  EXPECT_GT(engine.stats().kv_blocks_used, 0);
  engine.cancel(id);
  release = true;
  EXPECT_EQ(a.wait().finish, FinishReason::cancelled);
  EXPECT_LT(a.updates.back().completion_tokens, 50);
  engine.submit(Request{.prompt = {9, 8, 7}, .max_tokens = 20}, b.callback());
  b.wait();
  EXPECT_EQ(b.text, want);
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.requests_cancelled, 1u);
}

// A seeded sampled request (temperature, top-k, top-p, min-p, penalties) draws on the device
// in the batched engine. Its draws depend only on its own logits and (seed, token index), so
// it gives the same text alone and inside a batch of other requests (greedy and sampled,
// prefilled in chunks around it) as long as its logits are the same: here every step has at
// most 8 rows, so every product is the matrix-vector kernel, whose rows do not depend on
// each other. The one-at-a-time engine's host Sampler draws the same text.
TEST(EngineParallel, SeededSampledRequestGivesTheSameTextAloneAndInABatch) {
  TinyModel m(64, 2);
  auto sampled = [](int i, uint64_t seed) {
    Request r{.prompt = prompt_of(i), .max_tokens = 16};
    r.sampling.temperature = 0.9f;
    r.sampling.top_k = 40;
    r.sampling.top_p = 0.95f;
    r.sampling.min_p = 0.02f;
    r.sampling.repeat_penalty = 1.2f;
    r.sampling.presence_penalty = 0.3f;
    r.sampling.frequency_penalty = 0.1f;
    r.sampling.seed = seed;
    return r;
  };
  auto run_alone = [&](Engine& engine, const Request& r) {
    Collector c;
    engine.submit(r, c.callback());
    c.wait();
    return c.text;
  };
  std::string alone, other_seed, one_at_a_time;
  {
    Engine engine(m.llama, m.tokenizer, EngineOptions{.parallel = 2, .prefill_chunk = 3});
    alone = run_alone(engine, sampled(3, 4242));
    other_seed = run_alone(engine, sampled(3, 4243));
    // The same request among five others: sampled ones with other seeds and greedy ones.
    std::vector<std::unique_ptr<Collector>> collectors;
    std::vector<Request> requests;
    for (int i = 0; i < 6; ++i) {
      Request r = i == 3 ? sampled(3, 4242) : sampled(i + 6, 100 + static_cast<uint64_t>(i));
      if (i % 3 == 1) r.sampling.temperature = 0.0f;
      requests.push_back(r);
      collectors.push_back(std::make_unique<Collector>());
    }
    for (int i = 0; i < 6; ++i) engine.submit(requests[static_cast<size_t>(i)], collectors[static_cast<size_t>(i)]->callback());
    for (auto& c : collectors) c->wait();
    EXPECT_EQ(collectors[3]->text, alone);
    // Other sampled requests of the batch, run alone afterwards.
    EXPECT_EQ(run_alone(engine, requests[0]), collectors[0]->text);
    EXPECT_EQ(run_alone(engine, requests[5]), collectors[5]->text);
  }
  {
    Engine engine(m.llama, m.tokenizer);
    one_at_a_time = run_alone(engine, sampled(3, 4242));
  }
  EXPECT_FALSE(alone.empty());
  EXPECT_NE(other_seed, alone) << "another seed gave the same sampled text";
  EXPECT_EQ(one_at_a_time, alone);
}

// A request whose penalty window holds more distinct tokens than a sampled step carries is
// sampled on the host from downloaded logits: the same text as the device draws.
TEST(EngineParallel, PenaltyWindowsBeyondTheDeviceListSampleOnTheHost) {
  Request r{.prompt = prompt_of(4), .max_tokens = 16};
  r.sampling.temperature = 1.1f;
  r.sampling.top_p = 0.9f;
  r.sampling.frequency_penalty = 0.5f;
  r.sampling.repeat_last_n = 32;
  r.sampling.seed = 77;
  auto text_of = [&](int64_t sample_penalties) {
    TinyModel m(64, 2, 0, sample_penalties);
    Engine engine(m.llama, m.tokenizer, EngineOptions{.parallel = 2, .prefill_chunk = 3});
    Collector c;
    engine.submit(r, c.callback());
    c.wait();
    return c.text;
  };
  const std::string on_device = text_of(64);
  EXPECT_FALSE(on_device.empty());
  EXPECT_EQ(text_of(2), on_device);  // from the third distinct token on: host sampling
}

// ---- prefix caching ----------------------------------------------------------------------
//
// Every step of these engines has at most 8 rows (parallel x prefill_chunk plus decode rows),
// so every product is the matrix-vector kernel, whose rows do not depend on each other: a
// position's keys and values are the same bits whichever step computed them, and sharing
// must give exactly the text of computing everything.

std::vector<int32_t> tokens_of(int seed, size_t n) {
  std::vector<int32_t> t;
  for (size_t j = 0; j < n; ++j) t.push_back(static_cast<int32_t>(1 + (seed * 131 + j * 17 + j * j * 7) % 290));
  return t;
}

std::vector<int32_t> joined(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct Answer {
  std::string text;
  int64_t completion_tokens = 0;
  bool operator==(const Answer&) const = default;
};

void PrintTo(const Answer& a, std::ostream* os) { *os << a.completion_tokens << " tokens: \"" << a.text << "\""; }

Answer answer_of(Collector& c) {
  const Update last = c.wait();
  return {c.text, last.completion_tokens};
}

Answer run_one(Engine& engine, const std::vector<int32_t>& prompt, int64_t max_tokens) {
  Collector c;
  engine.submit(Request{.prompt = prompt, .max_tokens = max_tokens}, c.callback());
  return answer_of(c);
}

EngineOptions sharing(bool on, int64_t parallel = 2) {
  return EngineOptions{.parallel = parallel, .prefill_chunk = 3, .prefix_cache = on};
}

// Two prompts with a 40-token prefix (two full blocks of 16): the second, and both run
// together, take the prefix from the first one's cached blocks and answer as without sharing.
TEST(EnginePrefixCache, SharedPrefixGivesTheTextOfComputingEverything) {
  TinyModel m(128, 2);
  const std::vector<int32_t> prefix = tokens_of(1, 40);
  const std::vector<int32_t> a = joined(prefix, tokens_of(2, 5)), b = joined(prefix, tokens_of(3, 7));
  Answer want_a, want_b;
  {
    Engine off(m.llama, m.tokenizer, sharing(false));
    want_a = run_one(off, a, 12);
    want_b = run_one(off, b, 12);
    EXPECT_EQ(off.stats().prompt_tokens_cached, 0u);
    EXPECT_EQ(off.stats().kv_blocks_cached, 0);
  }
  ASSERT_GE(want_a.completion_tokens, 4);
  ASSERT_GE(want_b.completion_tokens, 4);
  ASSERT_NE(want_a, want_b);
  Engine on(m.llama, m.tokenizer, sharing(true));
  EXPECT_EQ(run_one(on, a, 12), want_a);
  EXPECT_EQ(on.stats().prompt_tokens_cached, 0u);
  EXPECT_GT(on.stats().kv_blocks_cached, 0);
  EXPECT_EQ(run_one(on, b, 12), want_b);
  EXPECT_EQ(on.stats().prompt_tokens_cached, 32u);
  // Together: both hold the same two cached blocks.
  Collector ca, cb;
  on.submit(Request{.prompt = b, .max_tokens = 12}, cb.callback());
  on.submit(Request{.prompt = a, .max_tokens = 12}, ca.callback());
  EXPECT_EQ(answer_of(ca), want_a);
  EXPECT_EQ(answer_of(cb), want_b);
  const EngineStats s = on.stats();
  EXPECT_EQ(s.prompt_tokens_cached, 32u + 32u + 32u);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.prompt_tokens, 4 * 45u + 2 * 2u);
}

// A prompt run again is computed from its last full block on: one token when it ends one
// position after a block, a whole block when it ends on a block's end (the last prompt
// token's row writes into its block, which must be private), nothing shared within one block.
TEST(EnginePrefixCache, APromptRunAgainComputesOnlyItsLastBlock) {
  TinyModel m(128, 2);
  const std::vector<std::vector<int32_t>> prompts = {tokens_of(4, 17), tokens_of(5, 32), tokens_of(6, 15)};
  std::vector<Answer> want;
  {
    Engine off(m.llama, m.tokenizer, sharing(false));
    for (const auto& p : prompts) want.push_back(run_one(off, p, 10));
  }
  Engine on(m.llama, m.tokenizer, sharing(true));
  const uint64_t reused[] = {16, 16, 0};
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << prompts[i].size() << " prompt tokens");
    ASSERT_GE(want[i].completion_tokens, 3);
    EXPECT_EQ(run_one(on, prompts[i], 10), want[i]);
    const uint64_t before = on.stats().prompt_tokens_cached;
    EXPECT_EQ(run_one(on, prompts[i], 10), want[i]);
    EXPECT_EQ(on.stats().prompt_tokens_cached - before, reused[i]);
  }
}

// Twenty requests (ten prompts, each again two requests later) through a pool of 6 blocks,
// far fewer than their prompts fill: cached blocks are evicted for new ones, every answer is
// the one computed without sharing, and at the end no block is held.
TEST(EnginePrefixCache, EvictionInASmallPoolKeepsTheAnswersAndLeaksNothing) {
  TinyModel m(64, 2, /*kv_blocks=*/6);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 10; ++i) {
    std::vector<int32_t> p = tokens_of(10 + i, i % 2 == 0 ? 34 + static_cast<size_t>(i % 4) * 3 : 18);
    // Odd ones start with the previous one's second block: the same tokens at other positions.
    if (i % 2 == 1) p = joined(std::vector<int32_t>(prompts.back().begin() + 16, prompts.back().begin() + 32), p);
    prompts.push_back(p);
  }
  std::vector<Answer> want;
  {
    Engine off(m.llama, m.tokenizer, sharing(false));
    for (const auto& p : prompts) want.push_back(run_one(off, p, 10));
  }
  std::vector<size_t> order = {0};  // 0, 1, 0, 2, 1, 3, 2, ..., 9, 8, 9
  for (size_t i = 1; i < prompts.size(); ++i) order.insert(order.end(), {i, i - 1});
  order.push_back(prompts.size() - 1);
  {
    Engine on(m.llama, m.tokenizer, sharing(true));
    std::vector<std::unique_ptr<Collector>> collectors;
    for (const size_t i : order) {
      collectors.push_back(std::make_unique<Collector>());
      on.submit(Request{.prompt = prompts[i], .max_tokens = 10}, collectors.back()->callback());
    }
    for (size_t k = 0; k < order.size(); ++k) EXPECT_EQ(answer_of(*collectors[k]), want[order[k]]) << "request " << k;
    const EngineStats s = on.stats();
    EXPECT_EQ(s.requests_finished, 20u);
    EXPECT_GT(s.prompt_tokens_cached, 0u);
    EXPECT_EQ(s.kv_blocks_used, 0);
    EXPECT_LE(s.kv_blocks_cached, 6);
  }
  const model::KvBlockPool& pool = m.llama.kv_pool();
  EXPECT_EQ(pool.used_blocks(), 0);
  EXPECT_EQ(pool.free_blocks(), pool.blocks());
  EXPECT_EQ(pool.sequences(), 0);
  for (int32_t b = 0; b < pool.blocks(); ++b) EXPECT_EQ(pool.references(b), 0) << "block " << b;
}

// A runs (its prompt's blocks held, not cached); B and C join and share A's prefix; B is
// cancelled in the middle of its prefill. A's blocks stay A's and C's, although the pool of 8
// blocks (one context) soon needs every block it can take: both answer as without sharing,
// and at the end no block is held.
TEST(EnginePrefixCache, CancellingASharerMidPrefillLeavesTheSharedBlocks) {
  TinyModel m(128, 3, /*kv_blocks=*/8);
  const std::vector<int32_t> prefix = tokens_of(7, 36);
  const std::vector<int32_t> a = joined(prefix, tokens_of(8, 2));
  const std::vector<int32_t> b = joined(prefix, tokens_of(9, 40));
  const std::vector<int32_t> c = joined(prefix, tokens_of(11, 6));
  Answer want_a, want_c;
  {
    Engine off(m.llama, m.tokenizer, sharing(false, 3));
    want_a = run_one(off, a, 60);
    want_c = run_one(off, c, 20);
  }
  ASSERT_GE(want_a.completion_tokens, 20);
  // A's callback stops the worker at A's tokens 1 and 3, until the test lets it go on.
  std::mutex mutex;
  std::condition_variable cv;
  int64_t a_tokens = 0;
  int64_t allowed = 1;
  Collector ca, cb, cc;
  auto a_collect = ca.callback();
  Engine on(m.llama, m.tokenizer, sharing(true, 3));
  on.submit(Request{.prompt = a, .max_tokens = 60}, [&](const Update& u) {
    std::unique_lock lock(mutex);
    if (!u.done) {
      a_tokens = u.completion_tokens;
      cv.notify_all();
      cv.wait(lock, [&] { return a_tokens < allowed; });
    }
    lock.unlock();
    return a_collect(u);
  });
  auto wait_for_a = [&](int64_t n) {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return a_tokens >= n; }));
  };
  wait_for_a(1);  // A's prompt is in its blocks: two full ones of the prefix
  const uint64_t b_id = on.submit(Request{.prompt = b, .max_tokens = 5}, cb.callback());
  on.submit(Request{.prompt = c, .max_tokens = 20}, cc.callback());
  {
    std::lock_guard lock(mutex);
    allowed = 3;
  }
  cv.notify_all();
  wait_for_a(3);  // two more steps: B and C have prefilled a few of their tokens after the prefix
  EngineStats s = on.stats();
  EXPECT_EQ(s.running, 3);
  EXPECT_EQ(s.prompt_tokens_cached, 64u);  // B's and C's 32
  on.cancel(b_id);
  int64_t cancelled_at = 0;
  {
    std::lock_guard lock(mutex);
    cancelled_at = a_tokens;
    allowed = a_tokens + 1;
  }
  cv.notify_all();
  const Update b_last = cb.wait();
  EXPECT_EQ(b_last.finish, FinishReason::cancelled);
  EXPECT_EQ(b_last.completion_tokens, 0);  // still prefilling
  wait_for_a(cancelled_at + 1);
  {
    // The worker waits in A's callback: B is gone, A and C hold the two prefix blocks.
    const model::KvBlockPool& pool = m.llama.kv_pool();
    EXPECT_EQ(pool.sequences(), 2);
    int32_t shared = 0;
    for (int32_t block = 0; block < pool.blocks(); ++block) {
      EXPECT_LE(pool.references(block), 2);
      shared += pool.references(block) == 2 ? 1 : 0;
    }
    EXPECT_EQ(shared, 2);
    std::lock_guard lock(mutex);
    allowed = 1000;
  }
  cv.notify_all();
  EXPECT_EQ(answer_of(ca), want_a);
  EXPECT_EQ(answer_of(cc), want_c);
  s = on.stats();
  EXPECT_EQ(s.requests_cancelled, 1u);
  EXPECT_EQ(s.kv_blocks_used, 0);
  on.shutdown(true);
  const model::KvBlockPool& pool = m.llama.kv_pool();
  EXPECT_EQ(pool.free_blocks(), pool.blocks());
  for (int32_t block = 0; block < pool.blocks(); ++block) EXPECT_EQ(pool.references(block), 0) << "block " << block;
}

// One request at a time: the model's cache keeps the last request's tokens, and the next
// prompt keeps their longest common prefix (all but its last token when it is the same
// prompt) and computes the rest, with the text of computing everything.
TEST(EnginePrefixCache, OneAtATimeKeepsTheCommonPrefixOfTheCache) {
  TinyModel m(128);
  const std::vector<int32_t> prefix = tokens_of(7, 40);
  const std::vector<int32_t> a = joined(prefix, tokens_of(8, 12)), b = joined(prefix, tokens_of(9, 12));
  Answer want_a, want_b;
  {
    Engine off(m.llama, m.tokenizer, sharing(false, 1));
    want_a = run_one(off, a, 10);
    want_b = run_one(off, b, 10);
    EXPECT_EQ(run_one(off, b, 10), want_b);
    EXPECT_EQ(off.stats().prompt_tokens_cached, 0u);
  }
  ASSERT_GE(want_a.completion_tokens, 3);
  ASSERT_NE(want_a, want_b);
  Engine on(m.llama, m.tokenizer, sharing(true, 1));
  EXPECT_EQ(run_one(on, a, 10), want_a);
  EXPECT_EQ(on.stats().prompt_tokens_cached, 0u);
  EXPECT_EQ(run_one(on, b, 10), want_b);
  EXPECT_EQ(on.stats().prompt_tokens_cached, 40u);
  EXPECT_EQ(run_one(on, b, 10), want_b);
  EXPECT_EQ(on.stats().prompt_tokens_cached, 40u + 51u);
}

// A chat's next turn (the last prompt, the answer, a new message) keeps the prompt and the
// answer's tokens but the last one (never fed to the model); a model run by someone else
// between requests is not trusted.
TEST(EnginePrefixCache, OneAtATimeKeepsAnAnswerAndNoticesOtherUse) {
  TinyModel m(160);
  const std::vector<int32_t> prompt = tokens_of(10, 20);
  const std::vector<int32_t> answer = greedy_by_hand(m.llama, m.tokenizer, prompt, 8);
  ASSERT_EQ(answer.size(), 8u);
  const std::vector<int32_t> next_turn = joined(joined(prompt, answer), tokens_of(11, 6));
  Engine on(m.llama, m.tokenizer, sharing(true, 1));
  run_one(on, prompt, 8);
  EXPECT_EQ(on.stats().prompt_tokens_cached, 0u);
  const Answer followed = run_one(on, next_turn, 6);
  EXPECT_GE(followed.completion_tokens, 1);
  EXPECT_EQ(on.stats().prompt_tokens_cached, 20u + 7u);
  // The model used directly while the engine is idle: its cache holds other tokens.
  m.llama.reset();
  (void)m.llama.prefill(tokens_of(12, 5));
  Answer want;
  {
    Engine off(m.llama, m.tokenizer, sharing(false, 1));
    want = run_one(off, next_turn, 6);
  }
  m.llama.reset();
  (void)m.llama.prefill(tokens_of(12, 5));
  EXPECT_EQ(run_one(on, next_turn, 6), want);
  EXPECT_EQ(on.stats().prompt_tokens_cached, 20u + 7u);
}

TEST(EngineParallel, NeedsAModelWithAPool) {
  TinyModel single;
  EXPECT_THROW(Engine(single.llama, single.tokenizer, EngineOptions{.parallel = 2}), Error);
  TinyModel two(64, 2);
  EXPECT_THROW(Engine(two.llama, two.tokenizer, EngineOptions{.parallel = 3}), Error);
  TinyModel small_pool(64, 2, /*kv_blocks=*/3);  // less than one context of 4 blocks
  EXPECT_THROW(Engine(small_pool.llama, small_pool.tokenizer, EngineOptions{.parallel = 2}), Error);
}

}  // namespace
}  // namespace onepass::serve
