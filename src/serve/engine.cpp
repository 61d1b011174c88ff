#include "onepass/serve/engine.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

namespace onepass::serve {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::error: return "error";
  }
  return "?";
}

// ---- StopMatcher ----------------------------------------------------------------------

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopMatcher::push(std::string_view text) {
  if (stopped_) return {};
  held_.append(text);
  // The earliest stop string in the held text ends generation there.
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) first = std::min(first, held_.find(stop));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold back the longest tail that is the start of some stop string.
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    for (size_t n = std::min(stop.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, stop, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

// ---- Engine ---------------------------------------------------------------------------

namespace {

struct Job {
  uint64_t id = 0;
  Request request;
  UpdateCallback on_update;
};

}  // namespace

struct Engine::State {
  model::LlamaModel* model = nullptr;
  const model::Tokenizer* tokenizer = nullptr;
  EngineOptions options;

  mutable std::mutex mutex;
  std::condition_variable wake;
  std::deque<Job> queue;
  uint64_t next_id = 1;
  uint64_t running_id = 0;       // 0: none
  bool cancel_running = false;
  bool stopping = false;         // no more submits
  bool drain = true;             // finish the queue before the worker exits
  EngineStats stats;
  std::thread worker;
};

Engine::Engine(model::LlamaModel& model, const model::Tokenizer& tokenizer, EngineOptions options)
    : state_(std::make_unique<State>()) {
  check(options.queue_limit >= 0, "engine", "queue_limit must be >= 0, got ", options.queue_limit);
  check(tokenizer.vocab_size() <= model.config().vocab_size, "engine", "the tokenizer has ",
        tokenizer.vocab_size(), " tokens but the model only ", model.config().vocab_size);
  state_->model = &model;
  state_->tokenizer = &tokenizer;
  state_->options = options;
  state_->stats.kv_capacity = model.context();
  state_->worker = std::thread([this] { work(); });
}

Engine::~Engine() { shutdown(false); }

uint64_t Engine::submit(Request request, UpdateCallback on_update) {
  const char* where = "engine";
  check(static_cast<bool>(on_update), where, "a request needs a callback");
  check(!request.prompt.empty(), where, "the prompt has no tokens");
  const int64_t vocab = state_->model->config().vocab_size;
  for (const int32_t id : request.prompt) {
    check(id >= 0 && id < vocab, where, "token id ", id, " of the prompt is outside the vocabulary (0..",
          vocab - 1, ")");
  }
  const auto prompt_tokens = static_cast<int64_t>(request.prompt.size());
  check(prompt_tokens <= state_->model->context(), where, "the prompt has ", prompt_tokens,
        " tokens, more than the context of ", state_->model->context());
  check(request.max_tokens >= 1, where, "max_tokens must be at least 1, got ", request.max_tokens);
  request.sampling.validate();

  std::lock_guard lock(state_->mutex);
  if (state_->stopping) throw Unavailable(where, "shutting down; no new requests are taken");
  if (static_cast<int64_t>(state_->queue.size()) >= state_->options.queue_limit) {
    ++state_->stats.requests_rejected;
    throw Unavailable(where, cat("the queue is full (", state_->options.queue_limit, " requests waiting)"));
  }
  const uint64_t id = state_->next_id++;
  state_->queue.push_back(Job{id, std::move(request), std::move(on_update)});
  ++state_->stats.requests_submitted;
  state_->wake.notify_all();
  return id;
}

void Engine::cancel(uint64_t id) {
  UpdateCallback cancelled;
  Update last;
  {
    std::lock_guard lock(state_->mutex);
    if (state_->running_id == id) {
      state_->cancel_running = true;
      return;
    }
    const auto it = std::find_if(state_->queue.begin(), state_->queue.end(),
                                 [id](const Job& j) { return j.id == id; });
    if (it == state_->queue.end()) return;
    cancelled = std::move(it->on_update);
    last.prompt_tokens = static_cast<int64_t>(it->request.prompt.size());
    state_->queue.erase(it);
    ++state_->stats.requests_cancelled;
  }
  last.done = true;
  last.finish = FinishReason::cancelled;
  cancelled(last);
}

EngineStats Engine::stats() const {
  std::lock_guard lock(state_->mutex);
  EngineStats s = state_->stats;
  s.queued = static_cast<int64_t>(state_->queue.size());
  s.running = state_->running_id != 0 ? 1 : 0;
  return s;
}

void Engine::shutdown(bool drain) {
  std::deque<Job> dropped;
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
    if (!drain) {
      state_->drain = false;
      state_->cancel_running = state_->running_id != 0;
      dropped.swap(state_->queue);
      state_->stats.requests_cancelled += dropped.size();
    }
    state_->wake.notify_all();
  }
  for (Job& job : dropped) {
    Update last;
    last.done = true;
    last.finish = FinishReason::cancelled;
    last.prompt_tokens = static_cast<int64_t>(job.request.prompt.size());
    job.on_update(last);
  }
  if (state_->worker.joinable()) state_->worker.join();
}

namespace {

// Runs one request to its end on the model; returns its last update. `cancelled` is polled
// between tokens.
template <typename CancelFlag>
Update generate(model::LlamaModel& llama, const model::Tokenizer& tokenizer, const Request& request,
                const UpdateCallback& on_update, CancelFlag cancelled, EngineStats& counted,
                std::mutex& stats_mutex) {
  Update last;
  last.done = true;
  last.prompt_tokens = static_cast<int64_t>(request.prompt.size());
  auto count_token = [&] {
    ++last.completion_tokens;
    std::lock_guard lock(stats_mutex);
    ++counted.completion_tokens;
    counted.kv_tokens = llama.position();
  };
  // Emits text; false when the receiver cancelled.
  auto emit = [&](std::string text) {
    if (text.empty()) return true;
    Update u;
    u.text = std::move(text);
    u.prompt_tokens = last.prompt_tokens;
    u.completion_tokens = last.completion_tokens;
    return on_update(u);
  };

  model::Sampler sampler(request.sampling);
  sampler.remember(request.prompt);
  // Greedy without a penalty takes the argmax on the device (no logits download).
  const bool device_greedy = request.sampling.greedy() && !request.sampling.penalizes();
  model::Detokenizer detokenizer(tokenizer, {.render_special = false, .strip_space_prefix = false});
  StopMatcher stops(request.stop);

  llama.reset();
  const std::span<const float> logits = llama.prefill(request.prompt);
  int32_t next = sampler.sample(logits);
  {
    std::lock_guard lock(stats_mutex);
    counted.kv_tokens = llama.position();
  }
  for (;;) {
    if (cancelled()) {
      last.finish = FinishReason::cancelled;
      return last;
    }
    if (tokenizer.is_end_of_generation(next)) {
      last.finish = FinishReason::stop;
      break;
    }
    count_token();
    if (!emit(stops.push(detokenizer.push(next)))) {
      last.finish = FinishReason::cancelled;
      return last;
    }
    if (stops.stopped()) {
      last.finish = FinishReason::stop;
      return last;
    }
    if (last.completion_tokens >= request.max_tokens || llama.position() >= llama.context()) {
      last.finish = FinishReason::length;
      break;
    }
    next = device_greedy ? llama.decode_greedy(next) : sampler.sample(llama.decode(next));
  }
  // The end: whatever the detokenizer and the stop matcher still hold.
  std::string rest = stops.push(detokenizer.flush());
  if (!stops.stopped()) rest += stops.flush();
  last.text = std::move(rest);
  return last;
}

}  // namespace

void Engine::work() {
  State& s = *state_;
  for (;;) {
    Job job;
    {
      std::unique_lock lock(s.mutex);
      s.wake.wait(lock, [&] { return !s.queue.empty() || s.stopping; });
      if (s.queue.empty() || (s.stopping && !s.drain)) return;
      job = std::move(s.queue.front());
      s.queue.pop_front();
      s.running_id = job.id;
      s.cancel_running = false;
      s.stats.prompt_tokens += job.request.prompt.size();
    }
    auto cancelled = [&] {
      std::lock_guard lock(s.mutex);
      return s.cancel_running;
    };
    Update last;
    try {
      last = generate(*s.model, *s.tokenizer, job.request, job.on_update, cancelled, s.stats, s.mutex);
    } catch (const std::exception& e) {
      last = Update{};
      last.done = true;
      last.finish = FinishReason::error;
      last.error = e.what();
      last.prompt_tokens = static_cast<int64_t>(job.request.prompt.size());
    }
    {
      std::lock_guard lock(s.mutex);
      s.running_id = 0;
      s.cancel_running = false;
      switch (last.finish) {
        case FinishReason::stop:
        case FinishReason::length: ++s.stats.requests_finished; break;
        case FinishReason::cancelled: ++s.stats.requests_cancelled; break;
        case FinishReason::error: ++s.stats.requests_failed; break;
      }
    }
    // The receiver learns the end whatever it answered before.
    try {
      job.on_update(last);
    } catch (...) {
      // A callback that throws on the last update has nobody left to tell.
    }
  }
}

}  // namespace onepass::serve
