// Engine: generation requests against one loaded model, queued and run by one worker
// thread, each streaming its text through a callback. `onepass serve` puts HTTP in front of
// it; programs use it directly, without HTTP.
//
// With parallel = 1, requests run one after another on the model's single KV cache. With
// parallel = N > 1 (continuous batching), up to N requests share the model's paged KV pool:
// every worker step admits queued requests while sequences and blocks allow, and runs one
// batched forward step holding a decode token of each generating request and chunks of the
// prompts still being prefilled. A prompt that starts with full KV blocks another sequence
// computed (running, or finished and still cached) shares those blocks and is prefilled
// from after them; with parallel = 1 a request keeps the part of the model's cache that
// starts its prompt (EngineOptions::prefix_cache).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "onepass/core/error.h"
#include "onepass/model/llama.h"
#include "onepass/model/sampler.h"
#include "onepass/model/tokenizer.h"

namespace onepass::serve {

struct Request {
  std::vector<int32_t> prompt;     // token ids, BOS included where the model wants one
  int64_t max_tokens = 16;         // tokens generated at most (>= 1)
  model::SamplerOptions sampling;  // greedy unless temperature > 0
  std::vector<std::string> stop;   // generation ends before the first of these strings
};

enum class FinishReason : uint8_t {
  stop,       // end-of-generation token or a stop string
  length,     // max_tokens generated, or the context is full
  cancelled,  // cancel(), the callback returned false, or shutdown without draining
  error,      // the model failed (Update::error says how)
};
const char* finish_reason_name(FinishReason reason);

/// What a request's callback receives: new text as it is generated, then one last update
/// with done set.
struct Update {
  std::string text;  // text completed since the previous update (may be empty)
  bool done = false;
  FinishReason finish = FinishReason::length;  // valid when done
  std::string error;                           // FinishReason::error: the message
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

/// Called on the engine's worker thread (for a request cancelled while still queued: on the
/// thread calling cancel or shutdown); returning false cancels the request (a client that
/// went away). It must not call back into the engine.
using UpdateCallback = std::function<bool(const Update&)>;

/// Thrown by submit when the queue holds queue_limit requests already or the engine is
/// shutting down: the request was fine, try again later (HTTP 503).
class Unavailable : public Error {
 public:
  using Error::Error;
};

struct EngineStats {
  uint64_t requests_submitted = 0;
  uint64_t requests_rejected = 0;  // queue full
  uint64_t requests_finished = 0;  // stop or length
  uint64_t requests_cancelled = 0;
  uint64_t requests_failed = 0;
  uint64_t prompt_tokens = 0;      // of requests started
  uint64_t completion_tokens = 0;
  int64_t queued = 0;              // waiting for the model
  int64_t running = 0;             // generating now
  int64_t kv_tokens = 0;           // tokens in the KV cache
  int64_t kv_capacity = 0;         // the model's context (parallel > 1: the pool's positions)
  int64_t batch_rows = 0;          // rows of the last batched step (parallel > 1)
  int64_t kv_blocks_used = 0;      // blocks of the paged KV pool held (parallel > 1)
  int64_t kv_blocks_total = 0;
  uint64_t preemptions = 0;        // sequences that gave up their blocks to be recomputed later
  /// Positions a sequence took from the prefix cache instead of computing them: its
  /// prompt's, and after a preemption (parallel > 1) also those of the text it had generated.
  uint64_t prompt_tokens_cached = 0;
  int64_t kv_blocks_cached = 0;    // blocks no sequence holds, kept for prefix sharing
};

struct EngineOptions {
  int64_t queue_limit = 64;  // requests waiting at most; submit throws Unavailable beyond it
  /// Requests generating at once. 1: one after another on the model's single-sequence
  /// cache. N > 1: batched steps over the model's paged KV pool, which must have been
  /// loaded with LoadOptions::sequences >= N.
  int64_t parallel = 1;
  /// Prompt tokens of one request per batched step: a long prompt is prefilled in chunks
  /// mixed into the decode steps of the others, so it does not stall them. More tokens
  /// prefill faster but make those steps longer.
  int64_t prefill_chunk = 64;
  /// Prefix caching. parallel > 1: the full KV blocks of every sequence are kept by the
  /// hash of the tokens up to their end, and a sequence whose tokens start with such
  /// blocks shares them (read-only) and is prefilled from after them. Blocks no sequence
  /// holds stay cached until the pool needs them (least recently released first).
  /// parallel = 1: the model's cache keeps the last request's tokens, and the next request
  /// keeps their longest common prefix with its prompt (a chat's earlier turns) and computes
  /// the rest (the engine checks that the model still holds as many tokens as it left).
  bool prefix_cache = true;
};

class Engine {
 public:
  /// The engine uses `model` and `tokenizer` from its worker thread only; both must
  /// outlive it.
  Engine(model::LlamaModel& model, const model::Tokenizer& tokenizer, EngineOptions options = {});
  /// Cancels whatever is queued or running and joins the worker.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Checks `request` (throws Error naming what is wrong: empty prompt, a token id outside
  /// the vocabulary, a prompt longer than the context, max_tokens < 1, sampling options)
  /// and queues it; throws Unavailable when the queue is full or after shutdown.
  /// Returns the request's id.
  uint64_t submit(Request request, UpdateCallback on_update);
  /// Cancels a queued or running request (no-op for an unknown or finished id). Its
  /// callback receives a last update with FinishReason::cancelled.
  void cancel(uint64_t id);
  EngineStats stats() const;
  /// Takes no more requests; with `drain`, finishes the queued and running ones, else
  /// cancels them; returns when the worker has stopped. Idempotent.
  void shutdown(bool drain);

 private:
  struct State;
  struct Sequence;
  void work();
  void work_batched();
  std::unique_ptr<State> state_;
};

/// Splits generated text at stop strings: text that could still become a stop string is
/// held back until it cannot.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  /// Appends `text`; returns the text now safe to emit. After a stop string is found,
  /// stopped() is true and the text up to it (exclusive) has been returned.
  std::string push(std::string_view text);
  /// The held-back text (generation ended without a stop string).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace onepass::serve
