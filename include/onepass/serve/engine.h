// Engine: generation requests against one loaded model, queued and run by one worker
// thread, each streaming its text through a callback. `onepass serve` puts HTTP in front of
// it; programs use it directly, without HTTP.
//
// Requests run one after another on the model's single KV cache: a request holds the cache
// from its prefill to its last token, and the next queued one starts when it finishes or is
// cancelled.
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
  int64_t kv_capacity = 0;         // the model's context
};

struct EngineOptions {
  int64_t queue_limit = 64;  // requests waiting at most; submit throws Unavailable beyond it
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
  void work();
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
