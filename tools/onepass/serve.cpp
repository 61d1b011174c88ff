// onepass serve: an OpenAI-compatible HTTP server over one loaded model (serve::Engine).
//   POST /v1/completions, /v1/chat/completions (stream: server-sent events)
//   GET  /v1/models, /health, /metrics (Prometheus text)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common.h"
#include "onepass/backends/factory.h"
#include "onepass/core/error.h"
#include "onepass/model/chat.h"
#include "onepass/model/llama.h"
#include "onepass/model/loader.h"
#include "onepass/serve/engine.h"

#if ONEPASS_HAVE_HTTPLIB
#include <httplib.h>
#endif

namespace onepass::cli {
namespace {

using json = nlohmann::json;

struct ServeArgs {
  std::string model;
  std::string backend = "auto";
  std::string host = "127.0.0.1";
  int64_t port = 8080;
  int64_t context = 4096;
  int64_t threads = 0;
  int64_t queue = 64;
  int64_t parallel = 1;
  int64_t max_body = 8 << 20;
  bool no_prefix_cache = false;
  std::string alias;
};

#if ONEPASS_HAVE_HTTPLIB

// A request that the client got wrong: HTTP 400 with an OpenAI-style error body.
struct BadRequest {
  std::string message;
  std::string param;
};

json error_body(const std::string& message, const char* type, const std::string& param = {}) {
  return json{{"error",
               {{"message", message}, {"type", type}, {"param", param.empty() ? json() : json(param)}, {"code", nullptr}}}};
}

void send_error(httplib::Response& res, int status, const std::string& message, const char* type,
                const std::string& param = {}) {
  res.status = status;
  res.set_content(error_body(message, type, param).dump(), "application/json");
}

// Reads an optional number field with a range check.
template <typename T>
T number_field(const json& body, const char* key, T fallback, double lo, double hi) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_number()) throw BadRequest{cat("'", key, "' must be a number"), key};
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi)) throw BadRequest{cat("'", key, "' is ", v, ", expected ", lo, "..", hi), key};
  if constexpr (std::is_integral_v<T>) {
    if (v != static_cast<double>(static_cast<int64_t>(v))) throw BadRequest{cat("'", key, "' must be a whole number"), key};
  }
  return static_cast<T>(v);
}

// The queue of updates one HTTP request reads, filled by the engine's worker.
struct Channel {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<serve::Update> updates;
  std::atomic<bool> client_gone{false};

  bool push(const serve::Update& u) {
    {
      std::lock_guard lock(mutex);
      updates.push_back(u);
    }
    ready.notify_all();
    return !client_gone.load();
  }
  // The next update, or nullopt after `wait` without one.
  std::optional<serve::Update> pop(std::chrono::milliseconds wait) {
    std::unique_lock lock(mutex);
    if (!ready.wait_for(lock, wait, [&] { return !updates.empty(); })) return std::nullopt;
    serve::Update u = std::move(updates.front());
    updates.pop_front();
    return u;
  }
};

struct Parsed {
  serve::Request request;
  bool stream = false;
  bool chat = false;
};

class Server {
 public:
  Server(const ServeArgs& args, model::LlamaModel& llama, const model::Tokenizer& tokenizer,
         std::string model_id)
      : args_(args),
        llama_(llama),
        tokenizer_(tokenizer),
        model_id_(std::move(model_id)),
        engine_(llama, tokenizer,
                serve::EngineOptions{.queue_limit = args.queue,
                                     .parallel = args.parallel,
                                     .prefix_cache = !args.no_prefix_cache}),
        created_(std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count()) {
    // One HTTP worker per request that can wait in the engine, plus a few for the cheap
    // endpoints, so /health and /metrics answer while the queue is full.
    const auto workers = static_cast<size_t>(args.queue + args.parallel + 8);
    http_.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
    http_.set_payload_max_length(static_cast<size_t>(args.max_body));
    http_.set_keep_alive_timeout(2);
    http_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    http_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      json data = json::array({{{"id", model_id_}, {"object", "model"}, {"created", created_}, {"owned_by", "onepass"}}});
      res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
    });
    http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics(), "text/plain; version=0.0.4");
    });
    http_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      handle(req, res, false);
    });
    http_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      handle(req, res, true);
    });
    http_.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;
      const char* type = res.status == 404 ? "not_found_error" : "invalid_request_error";
      res.set_content(error_body(cat("HTTP ", res.status), type).dump(), "application/json");
    });
  }

  // Binds and serves until stop(); returns false when the address cannot be bound.
  bool listen() {
    int port = static_cast<int>(args_.port);
    if (port == 0) {
      port = http_.bind_to_any_port(args_.host);
      if (port < 0) return false;
    } else if (!http_.bind_to_port(args_.host, port)) {
      return false;
    }
    std::fprintf(stderr, "[serve] listening on http://%s:%d (model %s)\n", args_.host.c_str(), port, model_id_.c_str());
    std::fflush(stderr);
    return http_.listen_after_bind();
  }

  // Stops listening once every response in flight has been written (httplib cuts chunked
  // responses short when stopped), or after `grace`.
  void stop(std::chrono::seconds grace) {
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (responses_in_flight_.load() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    http_.stop();
  }
  serve::Engine& engine() { return engine_; }

 private:
  std::string metrics() const {
    const serve::EngineStats s = engine_.stats();
    std::string out;
    auto metric = [&](const char* name, const char* type, const char* help, auto value) {
      out += cat("# HELP onepass_", name, " ", help, "\n# TYPE onepass_", name, " ", type, "\nonepass_", name, " ",
                 value, "\n");
    };
    metric("requests_total", "counter", "Requests accepted into the queue.", s.requests_submitted);
    metric("requests_rejected_total", "counter", "Requests refused because the queue was full.", s.requests_rejected);
    metric("requests_finished_total", "counter", "Requests that ended at a stop or their length.", s.requests_finished);
    metric("requests_cancelled_total", "counter", "Requests cancelled (client gone or shutdown).", s.requests_cancelled);
    metric("requests_failed_total", "counter", "Requests that ended with a model error.", s.requests_failed);
    metric("prompt_tokens_total", "counter", "Prompt tokens of started requests.", s.prompt_tokens);
    metric("completion_tokens_total", "counter", "Tokens generated.", s.completion_tokens);
    metric("queue_depth", "gauge", "Requests waiting for the model.", s.queued);
    metric("running_requests", "gauge", "Requests generating now.", s.running);
    metric("kv_tokens_used", "gauge", "Tokens held in the KV cache.", s.kv_tokens);
    metric("kv_tokens_capacity", "gauge", "KV-cache capacity in tokens.", s.kv_capacity);
    metric("batch_rows", "gauge", "Rows (tokens) of the last batched step (--parallel > 1).", s.batch_rows);
    metric("kv_blocks_used", "gauge", "Blocks of the paged KV pool held (--parallel > 1).", s.kv_blocks_used);
    metric("kv_blocks_total", "gauge", "Blocks of the paged KV pool (--parallel > 1).", s.kv_blocks_total);
    metric("preemptions_total", "counter", "Sequences that gave up their KV blocks to be recomputed later.",
           s.preemptions);
    metric("prompt_tokens_cached_total", "counter",
           "Prompt tokens taken from the KV cache (earlier requests' tokens) instead of being computed.",
           s.prompt_tokens_cached);
    metric("kv_blocks_cached", "gauge", "KV blocks no request holds, kept for prefix sharing (--parallel > 1).",
           s.kv_blocks_cached);
    return out;
  }

  Parsed parse(const httplib::Request& req, bool chat) const {
    json body;
    try {
      body = json::parse(req.body);
    } catch (const json::exception& e) {
      throw BadRequest{cat("the body is not valid JSON: ", e.what()), ""};
    }
    if (!body.is_object()) throw BadRequest{"the body must be a JSON object", ""};
    Parsed p;
    p.chat = chat;
    if (const auto it = body.find("stream"); it != body.end() && !it->is_null()) {
      if (!it->is_boolean()) throw BadRequest{"'stream' must be true or false", "stream"};
      p.stream = it->get<bool>();
    }
    if (const auto it = body.find("n"); it != body.end() && !it->is_null() && *it != 1) {
      throw BadRequest{"only n = 1 is supported", "n"};
    }
    serve::Request& r = p.request;
    std::string text;
    bool parse_special = false;
    if (chat) {
      const auto it = body.find("messages");
      if (it == body.end() || !it->is_array() || it->empty()) {
        throw BadRequest{"'messages' must be a non-empty array", "messages"};
      }
      std::vector<model::ChatMessage> messages;
      for (const json& m : *it) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
          throw BadRequest{"each message needs a 'role' string", "messages"};
        }
        model::ChatMessage message{m["role"].get<std::string>(), ""};
        const json content = m.value("content", json());
        if (content.is_string()) {
          message.content = content.get<std::string>();
        } else if (content.is_array()) {  // [{"type": "text", "text": ...}, ...]
          for (const json& part : content) {
            if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
                !part["text"].is_string()) {
              throw BadRequest{"message content parts must be {\"type\": \"text\", \"text\": ...}", "messages"};
            }
            message.content += part["text"].get<std::string>();
          }
        } else if (!content.is_null()) {
          throw BadRequest{"a message's 'content' must be a string or a list of text parts", "messages"};
        }
        messages.push_back(std::move(message));
      }
      try {
        text = model::render_chat(tokenizer_, messages);
      } catch (const Error& e) {
        throw BadRequest{e.what(), "messages"};
      }
      parse_special = true;
    } else {
      const auto it = body.find("prompt");
      if (it == body.end()) throw BadRequest{"'prompt' is required", "prompt"};
      if (it->is_string()) {
        text = it->get<std::string>();
      } else if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
        text = (*it)[0].get<std::string>();
      } else if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) {
        for (const json& id : *it) {
          if (!id.is_number_integer()) throw BadRequest{"a token prompt must hold integers only", "prompt"};
          const int64_t v = id.get<int64_t>();
          if (v < 0 || v >= tokenizer_.vocab_size()) {
            throw BadRequest{cat("token id ", v, " is outside the vocabulary (0..", tokenizer_.vocab_size() - 1, ")"),
                             "prompt"};
          }
          r.prompt.push_back(static_cast<int32_t>(v));
        }
      } else {
        throw BadRequest{"'prompt' must be a string, a list of one string or a list of token ids", "prompt"};
      }
    }
    if (r.prompt.empty()) {
      try {
        r.prompt = tokenizer_.encode(text, {.add_special = true, .parse_special = parse_special});
      } catch (const Error& e) {
        throw BadRequest{e.what(), chat ? "messages" : "prompt"};
      }
    }
    if (r.prompt.empty()) throw BadRequest{"the prompt has no tokens", chat ? "messages" : "prompt"};
    const auto prompt_tokens = static_cast<int64_t>(r.prompt.size());
    if (prompt_tokens > llama_.context()) {
      throw BadRequest{cat("the prompt has ", prompt_tokens, " tokens, more than the context of ", llama_.context()),
                       chat ? "messages" : "prompt"};
    }
    // OpenAI's defaults: 16 tokens for completions, up to the context for chat.
    const int64_t room = llama_.context() - prompt_tokens + 1;
    const char* max_key = body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    r.max_tokens = number_field<int64_t>(body, max_key, chat ? room : 16, 1, 1e9);
    r.sampling.temperature = number_field<float>(body, "temperature", 1.0f, 0.0, 2.0);
    r.sampling.top_p = number_field<float>(body, "top_p", 1.0f, 1e-6, 1.0);
    r.sampling.top_k = number_field<int32_t>(body, "top_k", 0, 0, 1e9);
    r.sampling.min_p = number_field<float>(body, "min_p", 0.0f, 0.0, 1.0);
    r.sampling.repeat_penalty = number_field<float>(body, "repeat_penalty", 1.0f, 1e-3, 100.0);
    r.sampling.repeat_last_n = number_field<int32_t>(body, "repeat_last_n", 64, 0, 1e6);
    r.sampling.presence_penalty = number_field<float>(body, "presence_penalty", 0.0f, -2.0, 2.0);
    r.sampling.frequency_penalty = number_field<float>(body, "frequency_penalty", 0.0f, -2.0, 2.0);
    if (const auto it = body.find("seed"); it != body.end() && !it->is_null()) {
      if (!it->is_number_integer()) throw BadRequest{"'seed' must be an integer", "seed"};
      r.sampling.seed = it->get<uint64_t>();
    } else {
      r.sampling.seed = std::random_device{}();
    }
    if (const auto it = body.find("stop"); it != body.end() && !it->is_null()) {
      if (it->is_string()) {
        r.stop.push_back(it->get<std::string>());
      } else if (it->is_array() && it->size() <= 16) {
        for (const json& s : *it) {
          if (!s.is_string()) throw BadRequest{"'stop' must be a string or a list of strings", "stop"};
          r.stop.push_back(s.get<std::string>());
        }
      } else {
        throw BadRequest{"'stop' must be a string or a list of at most 16 strings", "stop"};
      }
    }
    return p;
  }

  void handle(const httplib::Request& req, httplib::Response& res, bool chat) {
    Parsed parsed;
    try {
      parsed = parse(req, chat);
    } catch (const BadRequest& e) {
      return send_error(res, 400, e.message, "invalid_request_error", e.param);
    }
    auto channel = std::make_shared<Channel>();
    ++responses_in_flight_;
    uint64_t id = 0;
    try {
      id = engine_.submit(parsed.request, [channel](const serve::Update& u) { return channel->push(u); });
    } catch (const serve::Unavailable& e) {
      --responses_in_flight_;
      res.set_header("Retry-After", "1");
      return send_error(res, 503, e.detail(), "server_busy");
    } catch (const Error& e) {
      --responses_in_flight_;
      return send_error(res, 400, e.detail(), "invalid_request_error");
    }
    const std::string completion_id = cat(chat ? "chatcmpl-" : "cmpl-", id, "-", created_);
    const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
    const bool stream = parsed.stream;
    // Both forms stream chunks so that a client that goes away is noticed (a failed or
    // refused write) and its request cancelled; the non-streaming form writes one JSON
    // body when generation ends.
    auto text = std::make_shared<std::string>();
    auto sent_role = std::make_shared<bool>(false);
    auto finished = std::make_shared<bool>(false);
    res.set_chunked_content_provider(
        stream ? "text/event-stream" : "application/json",
        [this, channel, id, chat, stream, completion_id, created, text, sent_role, finished](
            size_t, httplib::DataSink& sink) {
          if (*finished) {
            sink.done();
            return true;
          }
          const std::optional<serve::Update> u = channel->pop(std::chrono::milliseconds(100));
          if (!u) {
            if (sink.is_writable && !sink.is_writable()) {
              channel->client_gone = true;
              engine_.cancel(id);
              return false;
            }
            if (stream) {  // an SSE comment keeps the connection checked while queued
              if (!sink.write(": waiting\n\n", 11)) {
                channel->client_gone = true;
                engine_.cancel(id);
                return false;
              }
            }
            return true;
          }
          const char* finish = u->done ? (u->finish == serve::FinishReason::length ? "length" : "stop") : nullptr;
          bool ok = true;
          if (stream) {
            auto send = [&](const json& chunk) {
              const std::string line = "data: " + chunk.dump() + "\n\n";
              return sink.write(line.data(), line.size());
            };
            auto chunk = [&](const json& choice) {
              return json{{"id", completion_id},
                          {"object", chat ? "chat.completion.chunk" : "text_completion"},
                          {"created", created},
                          {"model", model_id_},
                          {"choices", json::array({choice})}};
            };
            if (chat && !*sent_role) {
              *sent_role = true;
              ok = send(chunk({{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"finish_reason", nullptr}}));
            }
            if (ok && !u->text.empty()) {
              json choice = chat ? json{{"index", 0}, {"delta", {{"content", u->text}}}, {"finish_reason", nullptr}}
                                 : json{{"index", 0}, {"text", u->text}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
              ok = send(chunk(choice));
            }
            if (ok && u->done) {
              if (u->finish == serve::FinishReason::error) {
                const std::string line = "data: " + error_body(u->error, "server_error").dump() + "\n\n";
                ok = sink.write(line.data(), line.size());
              } else if (u->finish != serve::FinishReason::cancelled) {
                json choice = chat ? json{{"index", 0}, {"delta", json::object()}, {"finish_reason", finish}}
                                   : json{{"index", 0}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", finish}};
                json last = chunk(choice);
                last["usage"] = {{"prompt_tokens", u->prompt_tokens},
                                 {"completion_tokens", u->completion_tokens},
                                 {"total_tokens", u->prompt_tokens + u->completion_tokens}};
                ok = send(last);
              }
              if (ok) ok = sink.write("data: [DONE]\n\n", 14);
            }
          } else {
            *text += u->text;
            if (u->done) {
              std::string body;
              if (u->finish == serve::FinishReason::error || u->finish == serve::FinishReason::cancelled) {
                body = error_body(u->finish == serve::FinishReason::error ? u->error : "the request was cancelled",
                                  "server_error")
                           .dump();
              } else {
                json choice = chat ? json{{"index", 0},
                                          {"message", {{"role", "assistant"}, {"content", *text}}},
                                          {"finish_reason", finish}}
                                   : json{{"index", 0}, {"text", *text}, {"logprobs", nullptr}, {"finish_reason", finish}};
                body = json{{"id", completion_id},
                            {"object", chat ? "chat.completion" : "text_completion"},
                            {"created", created},
                            {"model", model_id_},
                            {"choices", json::array({choice})},
                            {"usage",
                             {{"prompt_tokens", u->prompt_tokens},
                              {"completion_tokens", u->completion_tokens},
                              {"total_tokens", u->prompt_tokens + u->completion_tokens}}}}
                           .dump();
              }
              ok = sink.write(body.data(), body.size());
            }
          }
          if (!ok) {
            channel->client_gone = true;
            engine_.cancel(id);
            return false;
          }
          if (u->done) {
            *finished = true;
            sink.done();
          }
          return true;
        },
        [this, channel, id, finished](bool) {
          // The response ended (sent, or the connection dropped): a request still running
          // has nobody to send to.
          if (!*finished) {
            channel->client_gone = true;
            engine_.cancel(id);
          }
          --responses_in_flight_;
        });
  }

  const ServeArgs& args_;
  model::LlamaModel& llama_;
  const model::Tokenizer& tokenizer_;
  std::string model_id_;
  serve::Engine engine_;
  int64_t created_;
  std::atomic<int64_t> responses_in_flight_{0};  // accepted requests whose response is not done
  httplib::Server http_;
};

int g_signal_pipe[2] = {-1, -1};

void on_signal(int) {
  const char byte = 1;
  [[maybe_unused]] const ssize_t n = write(g_signal_pipe[1], &byte, 1);
}

int run_serve(const ServeArgs& args) {
  const char* where = "serve";
  check(args.port >= 0 && args.port <= 65535, where, "--port must be 0..65535, got ", args.port);
  check(args.context >= 1 && args.context <= INT32_MAX / 2, where, "-c/--ctx must be 1..", INT32_MAX / 2, ", got ",
        args.context);
  check(args.queue >= 0 && args.queue <= 4096, where, "--queue must be 0..4096, got ", args.queue);
  check(args.threads >= 0, where, "-t/--threads must be >= 0, got ", args.threads);
  check(args.parallel >= 1 && args.parallel <= 1024, where, "--parallel must be 1..1024, got ", args.parallel);
  const BackendChoice choice = parse_backend_choice(args.backend);
  const std::filesystem::path path = resolve_model(args.model, where);
  const std::unique_ptr<model::ModelSource> source = model::open_model(path);
  const std::optional<model::TokenizerData> vocab = source->tokenizer_data();
  check(vocab.has_value(), where, source->describe(), " has no vocabulary (tokenizer.ggml.*); serve needs one");
  const model::Tokenizer tokenizer(*vocab);

  Options options = Options::defaults();
  if (args.threads > 0) options.cpu_threads = static_cast<int>(args.threads);
  const std::shared_ptr<Backend> backend = make_backend(choice, options);
  model::LoadOptions load;
  load.context = args.context;
  // --parallel N: a paged KV pool in which every sequence can reach the whole context.
  if (args.parallel > 1) {
    load.sequences = args.parallel;
    load.max_batch = std::max(load.max_batch, args.parallel);  // a decode row of each in one step
  }
  model::LlamaModel llama(backend, *source, load);
  std::string id = args.alias.empty() ? path.filename().string() : args.alias;
  if (id.ends_with(".gguf")) id.resize(id.size() - 5);

  check(pipe(g_signal_pipe) == 0, where, "cannot create the signal pipe");
  Server server(args, llama, tokenizer, id);
  // SIGTERM / SIGINT: stop listening, let running and queued requests finish, exit 0.
  std::thread watcher([&server] {
    char byte = 0;
    if (read(g_signal_pipe[0], &byte, 1) == 1 && byte == 1) {
      std::fprintf(stderr, "[serve] shutting down: finishing the requests in flight\n");
      server.engine().shutdown(true);
      server.stop(std::chrono::seconds(30));
    }
  });
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  const bool listened = server.listen();
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  const char release = 2;  // ends the watcher if no signal came
  [[maybe_unused]] const ssize_t n = write(g_signal_pipe[1], &release, 1);
  watcher.join();
  check(listened, where, "cannot listen on ", args.host, ":", args.port, " (address in use or not available)");
  server.engine().shutdown(true);
  std::fprintf(stderr, "[serve] stopped\n");
  return 0;
}

#else

int run_serve(const ServeArgs&) {
  fail("serve", "this onepass was built without cpp-httplib (Debian: libcpp-httplib-dev); rebuild to serve");
}

#endif

}  // namespace

Command add_serve_command(CLI::App& parent) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* app = parent.add_subcommand("serve", "Serve a model over HTTP (OpenAI-compatible API)");
  app->footer(
      "Endpoints: POST /v1/completions, /v1/chat/completions (\"stream\": true for server-sent events),\n"
      "GET /v1/models, /health, /metrics. Up to --parallel requests generate at once (batched steps over\n"
      "a paged KV cache; 1: one at a time); up to --queue more wait, beyond that the server answers 503\n"
      "with Retry-After. SIGTERM or Ctrl-C finishes the requests in flight and exits.");
  app->add_option("-m,--model", args->model, "GGUF file or MLX directory (default: the SmolLM2-135M-Instruct model)");
  app->add_option("--backend", args->backend, "auto, cpu or cuda")->capture_default_str();
  app->add_option("--host", args->host, "Address to listen on")->capture_default_str();
  app->add_option("--port", args->port, "Port to listen on (0: any free port, printed on stderr)")
      ->capture_default_str();
  app->add_option("-c,--ctx", args->context, "KV-cache capacity in tokens (prompt + answer)")->capture_default_str();
  app->add_option("-t,--threads", args->threads, "CPU threads (default: ONEPASS_THREADS, else all)");
  app->add_option("--queue", args->queue, "Requests waiting at most beside the running ones")->capture_default_str();
  app->add_option("--parallel", args->parallel,
                  "Requests generating at once (continuous batching; KV memory grows with it: N x --ctx tokens)")
      ->capture_default_str();
  app->add_flag("--no-prefix-cache", args->no_prefix_cache,
               "Compute every prompt in full instead of keeping the KV cache of a prefix an earlier request "
               "computed");
  app->add_option("--alias", args->alias, "Model id in the API (default: the file name)");
  return {app, [args] { return run_serve(*args); }};
}

}  // namespace onepass::cli
