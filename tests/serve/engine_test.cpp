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
