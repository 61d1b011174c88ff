// The C API (include/onepass.h) over the C++ library: every entry point catches what the
// library throws and turns it into a status and a thread-local message.
#include "onepass.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <memory>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "onepass/backends/factory.h"
#include "onepass/core/buffer.h"
#include "onepass/core/error.h"
#include "onepass/exec/backend.h"
#include "onepass/model/chat.h"
#include "onepass/model/llama.h"
#include "onepass/model/loader.h"
#include "onepass/model/sampler.h"
#include "onepass/model/tokenizer.h"
#include "onepass/version.h"

namespace {

using onepass::cat;

thread_local std::string last_error;

/// A failure with its status, thrown inside an entry point and caught at its boundary.
struct ApiError {
  onepass_status status;
  std::string message;
};

template <typename... Parts>
[[noreturn]] void fail_with(onepass_status status, const char* where, const Parts&... parts) {
  throw ApiError{status, cat("[", where, "] ", parts...)};
}

template <typename... Parts>
void require(bool condition, const char* where, const Parts&... parts) {
  if (!condition) fail_with(ONEPASS_ERROR_INVALID_ARGUMENT, where, parts...);
}

/// Runs `body` (returning nothing) and maps what it throws to a status; onepass::Error
/// becomes `library_status`.
template <typename Body>
onepass_status guarded(onepass_status library_status, Body&& body) noexcept {
  try {
    last_error.clear();
    body();
    return ONEPASS_OK;
  } catch (const ApiError& e) {
    last_error = e.message;
    return e.status;
  } catch (const onepass::Error& e) {
    last_error = e.what();
    return library_status;
  } catch (const std::bad_alloc&) {
    last_error = "[onepass] out of memory";
    return ONEPASS_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    last_error = cat("[onepass] internal error: ", e.what());
    return ONEPASS_ERROR_INTERNAL;
  } catch (...) {
    last_error = "[onepass] internal error: an unknown exception";
    return ONEPASS_ERROR_INTERNAL;
  }
}

// Positions are 32-bit on the device; the bound also keeps prompt + tokens from overflowing.
constexpr int64_t kMaxContext = INT32_MAX / 2;
constexpr int64_t kDefaultContext = 4096;
// Greedy decoding runs up to this many fed steps on the device per host round trip (as
// the CLI's generate does).
constexpr int64_t kGreedyRun = 16;

}  // namespace

/// What a model handle and its generations share: a generation keeps the model alive.
struct ModelState {
  std::unique_ptr<onepass::model::ModelSource> source;  // the weights may be mapped from it
  std::optional<onepass::model::Tokenizer> tokenizer;
  std::unique_ptr<onepass::model::LlamaModel> llama;
  std::string device;
  /// Bumped whenever a generation or an evaluation takes the KV cache.
  uint64_t cache_owner = 0;
};

struct onepass_model {
  std::shared_ptr<ModelState> state;
};

struct onepass_generation {
  std::shared_ptr<ModelState> state;
  uint64_t cache_owner = 0;
  onepass::model::Sampler sampler;
  onepass::model::Detokenizer detokenizer;
  bool greedy = false;
  int64_t max_tokens = 0;
  int64_t generated = 0;
  int32_t next = -1;          // the token the next step emits, once computed
  bool next_ready = false;    // `next` follows the last emitted token
  std::deque<int32_t> pending;  // greedy tokens computed ahead of emitting
  bool stop_requested = false;
  onepass_stop_reason stop = ONEPASS_STOP_NONE;
  std::string text;           // the last step's text

  onepass_generation(std::shared_ptr<ModelState> s, const onepass::model::SamplerOptions& options)
      : state(std::move(s)),
        sampler(options),
        // Continuing the prompt: keep the space before the first generated word.
        detokenizer(*state->tokenizer, {.render_special = false, .strip_space_prefix = false}),
        greedy(options.greedy()) {}
};

struct onepass_logits {
  onepass::BufferView values;  // the device's memory; keeps the device alive, not the model
  int64_t length = 0;
  onepass_device_type device_type = ONEPASS_DEVICE_CPU;
  int32_t device_id = 0;
};

namespace {

ModelState& state_of(const onepass_model* model, const char* where) {
  require(model != nullptr && model->state != nullptr, where, "model is NULL");
  return *model->state;
}

/// Copies `count` items into a caller's buffer of `capacity` and reports `reported` in
/// *length, or reports it and asks for `count` items of capacity.
template <typename T>
void write_out(const char* where, const T* data, size_t count, size_t reported, T* out,
               size_t capacity, size_t* length) {
  require(length != nullptr, where, "length is NULL");
  *length = reported;
  if (capacity < count) {
    fail_with(ONEPASS_ERROR_BUFFER_TOO_SMALL, where, "the output needs ", count,
              " elements, the buffer holds ", capacity);
  }
  if (count == 0) return;
  require(out != nullptr, where, "the output buffer is NULL with capacity ", capacity);
  std::memcpy(out, data, count * sizeof(T));
}

/// `text` and its NUL; *length is the text's length.
void write_text(const char* where, const std::string& text, char* out, size_t capacity,
                size_t* length) {
  write_out(where, text.c_str(), text.size() + 1, text.size(), out, capacity, length);
}

onepass::model::SamplerOptions sampler_options(const onepass_sampling_params& p,
                                               const char* where) {
  require(p.max_tokens >= 0 && p.max_tokens <= kMaxContext, where, "max_tokens is ",
          p.max_tokens, "; expected 0..", kMaxContext);
  onepass::model::SamplerOptions options{
      .temperature = p.temperature,
      .top_k = p.top_k,
      .top_p = p.top_p,
      .seed = p.seed == ONEPASS_SEED_RANDOM ? std::random_device{}() : p.seed};
  try {
    options.validate();
  } catch (const onepass::Error& e) {
    throw ApiError{ONEPASS_ERROR_INVALID_ARGUMENT, e.what()};
  }
  return options;
}

void check_tokens(const ModelState& state, const int32_t* tokens, size_t count,
                  const char* where) {
  require(count >= 1, where, "no tokens; expected at least one");
  require(tokens != nullptr, where, "tokens is NULL with count ", count);
  const int64_t vocab = state.llama->config().vocab_size;
  for (size_t i = 0; i < count; ++i) {
    require(tokens[i] >= 0 && tokens[i] < vocab, where, "token ", i, " is ", tokens[i],
            "; expected 0..", vocab - 1);
  }
  require(static_cast<int64_t>(count) <= state.llama->context(), where, "the prompt has ",
          count, " tokens, more than the context of ", state.llama->context(),
          " (onepass_model_params.context)");
}

std::vector<int32_t> encode_prompt(const ModelState& state, const char* prompt,
                                   const char* where) {
  require(prompt != nullptr, where, "prompt is NULL");
  return state.tokenizer->encode(prompt, {.add_special = true, .parse_special = true});
}

/// Ends `g` with `reason`: the step carries what the detokenizer held back.
void finish(onepass_generation& g, onepass_stop_reason reason, onepass_step& step) {
  g.stop = reason;
  g.text = g.detokenizer.flush();
  step.token = -1;
  step.stop = reason;
}

void advance(onepass_generation& g) {
  onepass::model::LlamaModel& llama = *g.state->llama;
  if (g.greedy) {
    // The argmax on the device, kGreedyRun fed steps per round trip; tokens past an end of
    // generation or a stop are computed but never emitted.
    if (g.pending.empty()) {
      const int64_t run = std::min({kGreedyRun, g.max_tokens - g.generated,
                                    llama.context() - llama.position()});
      const std::vector<int32_t> tokens = llama.decode_greedy_run(g.next, run);
      g.pending.assign(tokens.begin(), tokens.end());
    }
    g.next = g.pending.front();
    g.pending.pop_front();
  } else {
    g.next = g.sampler.sample(llama.decode(g.next));
  }
}

void step_generation(onepass_generation& g, onepass_step& step) {
  step = {.token = -1, .text = "", .text_length = 0, .stop = g.stop, .generated = g.generated};
  if (g.stop != ONEPASS_STOP_NONE) {
    g.text.clear();
    return;
  }
  require(g.cache_owner == g.state->cache_owner, "generation",
          "the model's KV cache was taken by a later generation or onepass_eval_logits");
  if (g.stop_requested) return finish(g, ONEPASS_STOP_CALLBACK, step);
  if (g.generated >= g.max_tokens) return finish(g, ONEPASS_STOP_MAX_TOKENS, step);
  if (!g.next_ready) {
    // A greedy run has advanced the position past the tokens still pending: those were
    // computed inside the context and are emitted before the context counts as full.
    const onepass::model::LlamaModel& llama = *g.state->llama;
    if (g.pending.empty() && llama.position() >= llama.context()) {
      return finish(g, ONEPASS_STOP_CONTEXT_FULL, step);
    }
    advance(g);
    g.next_ready = true;
  }
  if (g.state->tokenizer->is_end_of_generation(g.next)) {
    return finish(g, ONEPASS_STOP_END_OF_GENERATION, step);
  }
  g.text = g.detokenizer.push(g.next);
  g.next_ready = false;
  ++g.generated;
  step.token = g.next;
  step.generated = g.generated;
}

/// From `prompt` when it is not NULL, else from `count` tokens.
onepass_status start_generation(onepass_model* model, const int32_t* tokens, size_t count,
                                const char* prompt, const onepass_sampling_params* params,
                                onepass_generation** generation) {
  const char* where = "generation_start";
  if (generation != nullptr) *generation = nullptr;
  return guarded(ONEPASS_ERROR_RUNTIME, [&] {
    require(generation != nullptr, where, "generation is NULL");
    ModelState& state = state_of(model, where);
    const onepass_sampling_params p = params ? *params : onepass_sampling_default_params();
    const onepass::model::SamplerOptions options = sampler_options(p, where);
    std::vector<int32_t> encoded;
    if (prompt != nullptr) {
      encoded = encode_prompt(state, prompt, where);
      require(!encoded.empty(), where,
              "the prompt is empty and the vocabulary adds no BOS token");
      tokens = encoded.data();
      count = encoded.size();
    }
    check_tokens(state, tokens, count, where);
    auto g = std::make_unique<onepass_generation>(model->state, options);
    g->max_tokens = p.max_tokens;
    g->cache_owner = ++state.cache_owner;
    state.llama->reset();
    if (g->max_tokens > 0) {
      const std::span<const float> logits = state.llama->prefill({tokens, count});
      g->next = g->greedy ? onepass::model::argmax(logits) : g->sampler.sample(logits);
      g->next_ready = true;
    }
    *generation = g.release();
  });
}

// The integer a C caller stored in an enum argument, which may be any int: read as bytes,
// since loading a C++ enum that holds a value outside its enumerators is undefined.
template <typename Enum>
int enum_value(const Enum& e) {
  static_assert(sizeof(Enum) == sizeof(int));
  int v = 0;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

}  // namespace

extern "C" {

const char* onepass_last_error(void) { return last_error.c_str(); }

const char* onepass_status_name(onepass_status status) {
  switch (enum_value(status)) {
    case ONEPASS_OK: return "ONEPASS_OK";
    case ONEPASS_ERROR_INVALID_ARGUMENT: return "ONEPASS_ERROR_INVALID_ARGUMENT";
    case ONEPASS_ERROR_BUFFER_TOO_SMALL: return "ONEPASS_ERROR_BUFFER_TOO_SMALL";
    case ONEPASS_ERROR_MODEL_LOAD: return "ONEPASS_ERROR_MODEL_LOAD";
    case ONEPASS_ERROR_BACKEND: return "ONEPASS_ERROR_BACKEND";
    case ONEPASS_ERROR_RUNTIME: return "ONEPASS_ERROR_RUNTIME";
    case ONEPASS_ERROR_OUT_OF_MEMORY: return "ONEPASS_ERROR_OUT_OF_MEMORY";
    case ONEPASS_ERROR_INTERNAL: return "ONEPASS_ERROR_INTERNAL";
  }
  return "unknown";
}

const char* onepass_version(void) {
  static const std::string version(onepass::kVersion);
  return version.c_str();
}

int onepass_version_number(void) {
  return onepass::kVersionMajor * 10000 + onepass::kVersionMinor * 100 + onepass::kVersionPatch;
}

const char* onepass_backends(void) {
  static const std::string backends(onepass::kBackends);
  return backends.c_str();
}

onepass_model_params onepass_model_default_params(void) {
  return {.backend = ONEPASS_BACKEND_AUTO, .context = 0, .threads = 0};
}

onepass_status onepass_model_load(const char* path, const onepass_model_params* params,
                                  onepass_model** model) {
  const char* where = "model_load";
  if (model != nullptr) *model = nullptr;
  return guarded(ONEPASS_ERROR_MODEL_LOAD, [&] {
    require(model != nullptr, where, "model is NULL");
    require(path != nullptr, where, "path is NULL");
    const onepass_model_params p = params ? *params : onepass_model_default_params();
    require(p.context >= 0 && p.context <= kMaxContext, where, "context is ", p.context,
            "; expected 1..", kMaxContext, ", or 0 for ", kDefaultContext);
    require(p.threads >= 0, where, "threads is ", p.threads,
            "; expected 0 (automatic) or more");
    onepass::BackendChoice choice = onepass::BackendChoice::automatic;
    switch (enum_value(p.backend)) {
      case ONEPASS_BACKEND_AUTO: break;
      case ONEPASS_BACKEND_CPU: choice = onepass::BackendChoice::cpu; break;
      case ONEPASS_BACKEND_CUDA: choice = onepass::BackendChoice::cuda; break;
      default:
        fail_with(ONEPASS_ERROR_INVALID_ARGUMENT, where, "backend is ", enum_value(p.backend),
                  "; expected ONEPASS_BACKEND_AUTO, _CPU or _CUDA");
    }
    const std::filesystem::path file(path);
    if (!std::filesystem::exists(file)) {
      fail_with(ONEPASS_ERROR_MODEL_LOAD, where, path, ": no such file or directory");
    }

    auto state = std::make_shared<ModelState>();
    state->source = onepass::model::open_model(file);
    std::optional<onepass::model::TokenizerData> vocab = state->source->tokenizer_data();
    if (!vocab) {
      fail_with(ONEPASS_ERROR_MODEL_LOAD, where, state->source->describe(),
                " has no vocabulary (tokenizer.ggml.*); the C API needs one");
    }
    state->tokenizer.emplace(std::move(*vocab));

    std::shared_ptr<onepass::Backend> backend;
    try {
      onepass::Options options = onepass::Options::defaults();
      if (p.threads > 0) options.cpu_threads = p.threads;
      backend = onepass::make_backend(choice, options);
    } catch (const onepass::Error& e) {
      throw ApiError{ONEPASS_ERROR_BACKEND, e.what()};
    }
    const onepass::DeviceInfo& info = backend->info();
    state->device = info.kind == onepass::BackendKind::cpu
                        ? std::string(onepass::backend_name(info.kind))
                        : cat(onepass::backend_name(info.kind), ": ", info.name);

    onepass::model::LoadOptions load;
    load.context = p.context > 0 ? p.context : kDefaultContext;
    state->llama = std::make_unique<onepass::model::LlamaModel>(backend, *state->source, load);
    *model = new onepass_model{std::move(state)};
  });
}

void onepass_model_free(onepass_model* model) { delete model; }

onepass_status onepass_model_get_info(const onepass_model* model, onepass_model_info* info) {
  return guarded(ONEPASS_ERROR_RUNTIME, [&] {
    const ModelState& state = state_of(model, "model_get_info");
    require(info != nullptr, "model_get_info", "info is NULL");
    *info = {.vocab_size = static_cast<int32_t>(state.llama->config().vocab_size),
             .context = state.llama->context(),
             .bos_token = state.tokenizer->bos_id(),
             .eos_token = state.tokenizer->eos_id(),
             .device = state.device.c_str()};
  });
}

onepass_status onepass_tokenize(const onepass_model* model, const char* text, size_t text_length,
                                uint32_t flags, int32_t* tokens, size_t capacity,
                                size_t* length) {
  const char* where = "tokenize";
  return guarded(ONEPASS_ERROR_INVALID_ARGUMENT, [&] {
    const ModelState& state = state_of(model, where);
    require(text != nullptr || text_length == 0, where, "text is NULL with length ",
            text_length);
    require((flags & ~uint32_t{3}) == 0, where, "unknown flags 0x", std::hex, flags);
    const std::vector<int32_t> ids = state.tokenizer->encode(
        std::string_view(text ? text : "", text_length),
        {.add_special = (flags & ONEPASS_TOKENIZE_ADD_SPECIAL) != 0,
         .parse_special = (flags & ONEPASS_TOKENIZE_PARSE_SPECIAL) != 0});
    write_out(where, ids.data(), ids.size(), ids.size(), tokens, capacity, length);
  });
}

onepass_status onepass_detokenize(const onepass_model* model, const int32_t* tokens, size_t count,
                                  uint32_t flags, char* text, size_t capacity, size_t* length) {
  const char* where = "detokenize";
  return guarded(ONEPASS_ERROR_INVALID_ARGUMENT, [&] {
    const ModelState& state = state_of(model, where);
    require(tokens != nullptr || count == 0, where, "tokens is NULL with count ", count);
    require((flags & ~uint32_t{1}) == 0, where, "unknown flags 0x", std::hex, flags);
    const int32_t vocab = state.tokenizer->vocab_size();
    for (size_t i = 0; i < count; ++i) {
      require(tokens[i] >= 0 && tokens[i] < vocab, where, "token ", i, " is ", tokens[i],
              "; expected 0..", vocab - 1);
    }
    const std::string decoded = state.tokenizer->decode(
        {tokens, count},
        {.render_special = (flags & ONEPASS_DETOKENIZE_RENDER_SPECIAL) != 0,
         .strip_space_prefix = true});
    write_text(where, decoded, text, capacity, length);
  });
}

onepass_status onepass_chat_apply(const onepass_model* model, const onepass_chat_message* messages,
                                  size_t count, int add_generation_prompt, char* text,
                                  size_t capacity, size_t* length) {
  const char* where = "chat_apply";
  return guarded(ONEPASS_ERROR_INVALID_ARGUMENT, [&] {
    const ModelState& state = state_of(model, where);
    require(messages != nullptr || count == 0, where, "messages is NULL with count ", count);
    std::vector<onepass::model::ChatMessage> chat;
    chat.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      require(messages[i].role != nullptr && messages[i].content != nullptr, where, "message ",
              i, " has a NULL role or content");
      chat.push_back({messages[i].role, messages[i].content});
    }
    write_text(where,
               onepass::model::render_chat(*state.tokenizer, chat, add_generation_prompt != 0),
               text, capacity, length);
  });
}

onepass_sampling_params onepass_sampling_default_params(void) {
  return {.temperature = 0.0f,
          .top_k = 40,
          .top_p = 0.95f,
          .seed = ONEPASS_SEED_RANDOM,
          .max_tokens = 128};
}

onepass_status onepass_generation_start(onepass_model* model, const char* prompt,
                                        const onepass_sampling_params* params,
                                        onepass_generation** generation) {
  if (prompt == nullptr) {
    if (generation != nullptr) *generation = nullptr;
    last_error = "[generation_start] prompt is NULL";
    return ONEPASS_ERROR_INVALID_ARGUMENT;
  }
  return start_generation(model, nullptr, 0, prompt, params, generation);
}

onepass_status onepass_generation_start_tokens(onepass_model* model, const int32_t* tokens,
                                               size_t count, const onepass_sampling_params* params,
                                               onepass_generation** generation) {
  if (tokens == nullptr) {
    if (generation != nullptr) *generation = nullptr;
    last_error = "[generation_start] tokens is NULL";
    return ONEPASS_ERROR_INVALID_ARGUMENT;
  }
  return start_generation(model, tokens, count, nullptr, params, generation);
}

onepass_status onepass_generation_next(onepass_generation* generation, onepass_step* step) {
  return guarded(ONEPASS_ERROR_RUNTIME, [&] {
    require(generation != nullptr, "generation_next", "generation is NULL");
    require(step != nullptr, "generation_next", "step is NULL");
    step_generation(*generation, *step);
    step->text = generation->text.c_str();
    step->text_length = generation->text.size();
    step->generated = generation->generated;
  });
}

onepass_status onepass_generation_stop(onepass_generation* generation) {
  return guarded(ONEPASS_ERROR_RUNTIME, [&] {
    require(generation != nullptr, "generation_stop", "generation is NULL");
    generation->stop_requested = true;
  });
}

void onepass_generation_free(onepass_generation* generation) { delete generation; }

onepass_status onepass_generate(onepass_model* model, const char* prompt,
                                const onepass_sampling_params* params,
                                onepass_token_callback callback, void* user_data,
                                onepass_stop_reason* stop) {
  if (stop != nullptr) *stop = ONEPASS_STOP_NONE;
  onepass_generation* generation = nullptr;
  onepass_status status = onepass_generation_start(model, prompt, params, &generation);
  const std::unique_ptr<onepass_generation, void (*)(onepass_generation*)> owner(
      generation, onepass_generation_free);
  onepass_step step{};
  while (status == ONEPASS_OK) {
    status = onepass_generation_next(generation, &step);
    if (status != ONEPASS_OK) break;
    if (step.stop != ONEPASS_STOP_NONE) {
      // The text held back at the end (an incomplete character), if any.
      if (callback != nullptr && step.text_length > 0) {
        callback(-1, step.text, step.text_length, user_data);
      }
      if (stop != nullptr) *stop = step.stop;
      break;
    }
    if (callback != nullptr && callback(step.token, step.text, step.text_length, user_data) != 0) {
      onepass_generation_stop(generation);
    }
  }
  return status;
}

onepass_status onepass_eval_logits(onepass_model* model, const int32_t* tokens, size_t count,
                                   float* logits, size_t capacity) {
  const char* where = "eval_logits";
  return guarded(ONEPASS_ERROR_RUNTIME, [&] {
    ModelState& state = state_of(model, where);
    check_tokens(state, tokens, count, where);
    const auto vocab = static_cast<size_t>(state.llama->config().vocab_size);
    if (capacity < vocab) {
      fail_with(ONEPASS_ERROR_BUFFER_TOO_SMALL, where, "the logits need ", vocab,
                " floats, the buffer holds ", capacity);
    }
    require(logits != nullptr, where, "logits is NULL");
    ++state.cache_owner;
    state.llama->reset();
    const std::span<const float> result = state.llama->prefill({tokens, count});
    std::copy(result.begin(), result.end(), logits);
  });
}

onepass_status onepass_eval_logits_tensor(onepass_model* model, const int32_t* tokens, size_t count,
                                          onepass_logits** logits) {
  const char* where = "eval_logits_tensor";
  if (logits != nullptr) *logits = nullptr;
  return guarded(ONEPASS_ERROR_RUNTIME, [&] {
    require(logits != nullptr, where, "logits is NULL");
    ModelState& state = state_of(model, where);
    check_tokens(state, tokens, count, where);
    ++state.cache_owner;
    state.llama->reset();
    const std::span<const float> result = state.llama->prefill({tokens, count});
    // prefill checks the logits on the host; the handle gets its own copy on the device.
    onepass::Backend& device = state.llama->backend();
    auto out = std::make_unique<onepass_logits>();
    out->values = device.alloc(result.size_bytes());
    out->values.write(result.data(), result.size_bytes());
    out->length = static_cast<int64_t>(result.size());
    const bool cuda = device.kind() == onepass::BackendKind::cuda;
    out->device_type = cuda ? ONEPASS_DEVICE_CUDA : ONEPASS_DEVICE_CPU;
    out->device_id = cuda ? device.info().ordinal : 0;
    *logits = out.release();
  });
}

onepass_status onepass_logits_get_info(const onepass_logits* logits, onepass_logits_info* info) {
  const char* where = "logits_get_info";
  return guarded(ONEPASS_ERROR_RUNTIME, [&] {
    require(logits != nullptr, where, "logits is NULL");
    require(info != nullptr, where, "info is NULL");
    info->data = static_cast<const float*>(logits->values.data());
    info->length = logits->length;
    info->device_type = logits->device_type;
    info->device_id = logits->device_id;
  });
}

void onepass_logits_free(onepass_logits* logits) {
  delete logits;
}

}  // extern "C"
