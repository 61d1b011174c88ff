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
  std::vector<uint64_t> running_batch;     // parallel > 1: the requests generating
  std::vector<uint64_t> cancel_requested;  // parallel > 1: running requests to cancel
  bool stopping = false;         // no more submits
  bool drain = true;             // finish the queue before the worker exits
  /// parallel = 1: the tokens whose keys and values the model's cache holds, in order.
  std::vector<int32_t> cached;
  EngineStats stats;
  std::thread worker;
};

Engine::Engine(model::LlamaModel& model, const model::Tokenizer& tokenizer, EngineOptions options)
    : state_(std::make_unique<State>()) {
  check(options.queue_limit >= 0, "engine", "queue_limit must be >= 0, got ", options.queue_limit);
  check(options.parallel >= 1, "engine", "parallel must be >= 1, got ", options.parallel);
  check(options.prefill_chunk >= 1, "engine", "prefill_chunk must be >= 1, got ", options.prefill_chunk);
  if (options.parallel > 1) {
    check(model.max_sequences() >= options.parallel, "engine", "parallel ", options.parallel,
          " needs a model loaded with LoadOptions::sequences >= ", options.parallel, " (it has ",
          model.max_sequences(), ")");
    check(model.max_step_rows() >= options.parallel, "engine", "parallel ", options.parallel,
          " needs a model loaded with LoadOptions::max_batch >= ", options.parallel, " (it has ",
          model.max_step_rows(), ")");
    // A request alone must be able to reach the whole context, whatever the others hold.
    const model::KvBlockPool& pool = model.kv_pool();
    check(pool.blocks() >= pool.max_blocks(), "engine", "the KV pool's ", pool.blocks(), " blocks of ",
          pool.block_size(), " positions hold less than one context of ", model.context(), " tokens");
  }
  check(tokenizer.vocab_size() <= model.config().vocab_size, "engine", "the tokenizer has ",
        tokenizer.vocab_size(), " tokens but the model only ", model.config().vocab_size);
  state_->model = &model;
  state_->tokenizer = &tokenizer;
  state_->options = options;
  state_->stats.kv_capacity = model.context();
  if (options.parallel > 1) {
    const model::KvBlockPool& pool = model.kv_pool();
    state_->stats.kv_capacity = pool.blocks() * pool.block_size();
    state_->stats.kv_blocks_total = pool.blocks();
  }
  state_->worker = std::thread([this] {
    if (state_->options.parallel > 1) {
      work_batched();
    } else {
      work();
    }
  });
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
    if (std::find(state_->running_batch.begin(), state_->running_batch.end(), id) != state_->running_batch.end()) {
      state_->cancel_requested.push_back(id);
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
  s.running = state_->options.parallel > 1 ? static_cast<int64_t>(state_->running_batch.size())
                                           : (state_->running_id != 0 ? 1 : 0);
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
// between tokens. `cached` (prompt caching, else nullptr) holds the tokens in the model's
// cache: the request keeps their longest common prefix with its prompt, but for the prompt's
// last token (which gives the logits), and computes the rest; `cached` then follows every
// token the request feeds.
template <typename CancelFlag>
Update generate(model::LlamaModel& llama, const model::Tokenizer& tokenizer, const Request& request,
                const UpdateCallback& on_update, CancelFlag cancelled, EngineStats& counted,
                std::mutex& stats_mutex, std::vector<int32_t>* cached) {
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

  size_t kept = 0;
  // The cache is the engine's as it left it only when it holds exactly `cached`.
  if (cached != nullptr && static_cast<int64_t>(cached->size()) == llama.position() && !request.prompt.empty()) {
    const size_t limit = std::min(cached->size(), request.prompt.size() - 1);
    while (kept < limit && (*cached)[kept] == request.prompt[kept]) ++kept;
  }
  if (cached != nullptr) cached->clear();  // until the prefill has written the prompt
  llama.rewind(static_cast<int64_t>(kept));
  const std::span<const float> logits = llama.prefill(std::span(request.prompt).subspan(kept));
  if (cached != nullptr) cached->assign(request.prompt.begin(), request.prompt.end());
  int32_t next = sampler.sample(logits);
  {
    std::lock_guard lock(stats_mutex);
    counted.kv_tokens = llama.position();
    counted.prompt_tokens_cached += kept;
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
    const int32_t fed = next;
    next = device_greedy ? llama.decode_greedy(fed) : sampler.sample(llama.decode(fed));
    if (cached != nullptr) cached->push_back(fed);
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
      last = generate(*s.model, *s.tokenizer, job.request, job.on_update, cancelled, s.stats, s.mutex,
                      s.options.prefix_cache ? &s.cached : nullptr);
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

// ---- continuous batching (parallel > 1) -----------------------------------------------

// A request generating in the batch. tokens holds the prompt and the tokens sampled so far;
// the first in_cache of them are in the KV pool, the rest (the prompt's unprefilled part,
// or the last sampled token) go into the next steps.
struct Engine::Sequence {
  Job job;
  uint64_t admitted = 0;  // admission order: the newest is preempted first
  int32_t kv = -1;        // its KV-pool sequence, -1 while it holds no blocks
  std::vector<int32_t> tokens;
  size_t in_cache = 0;
  model::Sampler sampler;
  std::vector<ops::SamplePenalty> penalties;  // the sampler's penalised tokens, for a sampled step
  model::Detokenizer detokenizer;
  StopMatcher stops;
  bool device_greedy;     // greedy without a penalty: the step's argmax, no logits download
  Update last;
  bool finished = false;

  Sequence(Job j, uint64_t order, const model::Tokenizer& tokenizer)
      : job(std::move(j)),
        admitted(order),
        tokens(job.request.prompt),
        sampler(job.request.sampling),
        detokenizer(tokenizer, {.render_special = false, .strip_space_prefix = false}),
        stops(job.request.stop),
        device_greedy(job.request.sampling.greedy() && !job.request.sampling.penalizes()) {
    sampler.remember(job.request.prompt);
    last.done = true;
    last.prompt_tokens = static_cast<int64_t>(job.request.prompt.size());
  }
  size_t pending() const { return tokens.size() - in_cache; }
};

void Engine::work_batched() {
  State& s = *state_;
  model::LlamaModel& llama = *s.model;
  model::KvBlockPool& pool = llama.kv_pool();
  const auto parallel = static_cast<size_t>(s.options.parallel);
  const auto max_rows = static_cast<size_t>(llama.max_step_rows());
  std::vector<std::unique_ptr<Sequence>> active;
  uint64_t admitted = 0;

  // Takes a sampled token into the sequence's text; true when the request ends
  // (last.finish says why).
  auto accept = [&](Sequence& q, int32_t next) {
    Update& last = q.last;
    if (s.tokenizer->is_end_of_generation(next)) {
      last.finish = FinishReason::stop;
      return true;
    }
    ++last.completion_tokens;
    {
      std::lock_guard lock(s.mutex);
      ++s.stats.completion_tokens;
    }
    const std::string text = q.stops.push(q.detokenizer.push(next));
    if (!text.empty()) {
      Update u;
      u.text = text;
      u.prompt_tokens = last.prompt_tokens;
      u.completion_tokens = last.completion_tokens;
      bool keep_going = false;
      try {
        keep_going = q.job.on_update(u);
      } catch (...) {
        // A callback that throws has gone away: its request ends, the others go on.
      }
      if (!keep_going) {
        last.finish = FinishReason::cancelled;
        return true;
      }
    }
    if (q.stops.stopped()) {
      last.finish = FinishReason::stop;
      return true;
    }
    // The cache holds every token but `next`; decoding it needs one more position.
    if (last.completion_tokens >= q.job.request.max_tokens || static_cast<int64_t>(q.in_cache) >= llama.context()) {
      last.finish = FinishReason::length;
      return true;
    }
    q.tokens.push_back(next);
    return false;
  };
  auto release = [&](Sequence& q) {
    if (q.kv >= 0) pool.release(q.kv);
    q.kv = -1;
    q.in_cache = 0;
  };
  // Ends a request: its blocks back to the pool, the counters, its last update.
  auto finish = [&](Sequence& q) {
    release(q);
    q.finished = true;
    if (q.last.finish != FinishReason::cancelled && q.last.finish != FinishReason::error) {
      std::string rest = q.stops.push(q.detokenizer.flush());
      if (!q.stops.stopped()) rest += q.stops.flush();
      q.last.text = std::move(rest);
    }
    {
      std::lock_guard lock(s.mutex);
      std::erase(s.running_batch, q.job.id);
      std::erase(s.cancel_requested, q.job.id);
      s.stats.kv_blocks_used = pool.used_blocks();
      s.stats.kv_blocks_cached = pool.cached_blocks();
      switch (q.last.finish) {
        case FinishReason::stop:
        case FinishReason::length: ++s.stats.requests_finished; break;
        case FinishReason::cancelled: ++s.stats.requests_cancelled; break;
        case FinishReason::error: ++s.stats.requests_failed; break;
      }
    }
    try {
      q.job.on_update(q.last);
    } catch (...) {
      // A callback that throws on the last update has nobody left to tell.
    }
  };

  for (;;) {
    // Admit queued requests while sequences and blocks allow; note cancellations.
    {
      std::unique_lock lock(s.mutex);
      if (active.empty()) {
        s.wake.wait(lock, [&] { return !s.queue.empty() || s.stopping; });
        if (s.queue.empty() || (s.stopping && !s.drain)) return;
      }
      if (s.stopping && !s.drain) {
        for (auto& q : active) s.cancel_requested.push_back(q->job.id);
      }
      // Blocks the admitted but unprefilled requests will take.
      int64_t promised = 0;
      for (const auto& q : active) {
        if (q->kv < 0) promised += pool.blocks_for(static_cast<int64_t>(q->tokens.size()) + 1);
      }
      while (active.size() < parallel && !s.queue.empty() && !(s.stopping && !s.drain)) {
        const int64_t blocks = pool.blocks_for(static_cast<int64_t>(s.queue.front().request.prompt.size()) + 1);
        if (!active.empty() && promised + blocks > pool.free_blocks()) break;
        promised += blocks;
        Job job = std::move(s.queue.front());
        s.queue.pop_front();
        s.stats.prompt_tokens += job.request.prompt.size();
        s.running_batch.push_back(job.id);
        active.push_back(std::make_unique<Sequence>(std::move(job), admitted++, *s.tokenizer));
      }
      for (auto& q : active) {
        if (std::find(s.cancel_requested.begin(), s.cancel_requested.end(), q->job.id) != s.cancel_requested.end()) {
          q->last.finish = FinishReason::cancelled;
          q->finished = true;
        }
      }
    }
    for (auto& q : active) {
      if (q->finished) finish(*q);
    }
    std::erase_if(active, [](const auto& q) { return q->finished; });
    if (active.empty()) continue;

    // Decode rows first: while they need more blocks than are free, the newest sequence
    // holding blocks gives them up, to be prefilled again (prompt and text so far) later.
    auto decode_blocks = [&] {
      int64_t n = 0;
      for (const auto& q : active) {
        if (q->kv >= 0 && q->pending() == 1) n += pool.blocks_needed(q->kv, static_cast<int64_t>(q->in_cache) + 1);
      }
      return n;
    };
    auto preempt_newest = [&] {
      Sequence* newest = nullptr;
      for (auto& q : active) {
        if (q->kv >= 0 && (!newest || q->admitted > newest->admitted)) newest = q.get();
      }
      if (!newest) return;
      release(*newest);
      std::lock_guard lock(s.mutex);
      ++s.stats.preemptions;
    };
    while (decode_blocks() > pool.free_blocks()) preempt_newest();
    std::vector<model::BatchRow> rows;
    std::vector<Sequence*> with_logits;
    int64_t free_blocks = pool.free_blocks();
    auto add_rows = [&](Sequence& q, size_t n) {
      for (size_t j = 0; j < n; ++j) {
        const size_t position = q.in_cache + j;
        const bool logits = position + 1 == q.tokens.size();
        rows.push_back({q.kv, q.tokens[position], static_cast<int32_t>(position), logits});
        if (logits) with_logits.push_back(&q);
      }
    };
    for (auto& q : active) {
      if (q->kv < 0 || q->pending() != 1 || rows.size() >= max_rows) continue;
      free_blocks -= pool.blocks_needed(q->kv, static_cast<int64_t>(q->in_cache) + 1);
      add_rows(*q, 1);
    }
    // Prompt chunks (oldest first) in the rows and blocks left.
    for (auto& q : active) {
      if ((q->kv >= 0 && q->pending() == 1) || rows.size() >= max_rows) continue;
      const bool starting = q->kv < 0;
      if (starting) {
        q->kv = pool.add_sequence();
        if (s.options.prefix_cache) {
          // Shared blocks that no sequence held leave the free count. The last token is
          // always computed: its row gives the logits, and it writes to a private block.
          const int64_t free_before = pool.free_blocks();
          q->in_cache = static_cast<size_t>(
              pool.share_prefix(q->kv, std::span<const int32_t>(q->tokens).first(q->tokens.size() - 1)));
          free_blocks -= free_before - pool.free_blocks();
        }
      }
      const int64_t room = pool.capacity(q->kv) - static_cast<int64_t>(q->in_cache) + free_blocks * pool.block_size();
      const size_t n = std::min({q->pending(), static_cast<size_t>(s.options.prefill_chunk), max_rows - rows.size(),
                                 static_cast<size_t>(std::max<int64_t>(room, 0))});
      if (n == 0) {
        if (starting) {  // no room: hold nothing, so that preempting makes progress
          const int64_t free_before = pool.free_blocks();
          release(*q);
          free_blocks += pool.free_blocks() - free_before;
        }
        continue;
      }
      if (starting && q->in_cache > 0) {
        std::lock_guard lock(s.mutex);
        s.stats.prompt_tokens_cached += q->in_cache;
      }
      free_blocks -= pool.blocks_needed(q->kv, static_cast<int64_t>(q->in_cache + n));
      add_rows(*q, n);
    }
    if (rows.empty()) {
      // Prompts that hold blocks but cannot grow: the newest gives its blocks up.
      preempt_newest();
      continue;
    }

    // Greedy rows without penalties take the argmax. Otherwise every row with logits is
    // drawn on the device (ops::sample, the sampler's parameters and penalised tokens),
    // unless one carries more penalised tokens than a sampled step holds: then the logits
    // come back and each request samples on the host.
    bool sample = false;
    bool download = false;
    std::vector<model::RowSampling> sampling;
    for (const Sequence* q : with_logits) sample = sample || !q->device_greedy;
    if (sample) {
      for (Sequence* q : with_logits) {
        q->sampler.penalties(q->penalties);
        download = download || static_cast<int64_t>(q->penalties.size()) > llama.max_sample_penalties();
        ops::SampleParams params = q->sampler.device_params();
        params.penalty_count = static_cast<int32_t>(q->penalties.size());
        sampling.push_back({params, q->penalties});
      }
    }
    model::BatchResult result;
    try {
      if (download) {
        result = llama.step(rows, true);
      } else if (sample) {
        result = llama.step(rows, sampling);
      } else {
        result = llama.step(rows, false);
      }
    } catch (const model::KvPoolFull&) {
      // The plan above fits the free blocks; should the pool disagree, make room and retry.
      preempt_newest();
      continue;
    } catch (const std::exception& e) {
      // The model failed: every request of the step ends with the error.
      for (auto& q : active) {
        if (std::none_of(rows.begin(), rows.end(), [&](const model::BatchRow& r) { return r.sequence == q->kv; })) {
          continue;
        }
        q->last.finish = FinishReason::error;
        q->last.error = e.what();
        finish(*q);
      }
      std::erase_if(active, [](const auto& q) { return q->finished; });
      continue;
    }
    for (const model::BatchRow& r : rows) {
      for (auto& q : active) {
        if (q->kv == r.sequence) {
          q->in_cache = std::max(q->in_cache, static_cast<size_t>(r.position) + 1);
          break;
        }
      }
    }
    // The blocks these rows filled become shareable.
    if (s.options.prefix_cache) {
      for (auto& q : active) {
        if (q->kv >= 0) pool.commit(q->kv, std::span<const int32_t>(q->tokens).first(q->in_cache));
      }
    }
    {
      std::lock_guard lock(s.mutex);
      s.stats.batch_rows = static_cast<int64_t>(rows.size());
      s.stats.kv_blocks_used = pool.used_blocks();
      s.stats.kv_blocks_cached = pool.cached_blocks();
      int64_t in_cache = 0;
      for (const auto& q : active) in_cache += static_cast<int64_t>(q->in_cache);
      s.stats.kv_tokens = in_cache;
    }
    const auto vocab = static_cast<size_t>(llama.config().vocab_size);
    for (size_t k = 0; k < with_logits.size(); ++k) {
      Sequence& q = *with_logits[k];
      int32_t next = 0;
      if (download && !q.device_greedy) {
        next = q.sampler.sample(result.logits.subspan(k * vocab, vocab));
      } else {
        next = sample && !download ? result.tokens[k] : result.argmax[k];
        q.sampler.accept(next);
      }
      if (accept(q, next)) finish(q);
    }
    std::erase_if(active, [](const auto& q) { return q->finished; });
  }
}

}  // namespace onepass::serve
