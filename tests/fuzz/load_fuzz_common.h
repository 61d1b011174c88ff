// What the load-path fuzz targets share: a scratch directory for the files an input becomes,
// and the steps after a model source opens (vocabulary, tokenizer, weights bound on a CPU
// backend, one forward pass).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "onepass/backends/factory.h"
#include "onepass/core/error.h"
#include "onepass/model/llama.h"
#include "onepass/model/loader.h"
#include "onepass/model/tokenizer.h"

namespace onepass::fuzz {

/// A directory of this process's own (removed at exit), for the files of one input.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path d =
        std::filesystem::temp_directory_path() / cat("onepass_fuzz_", ::getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  static const struct Remover {
    ~Remover() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } remover;
  return dir;
}

inline void write_file(const std::filesystem::path& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

/// With ONEPASS_FUZZ_ERRORS=1 in the environment, prints each error message once (to review
/// which errors fail to name the file, key or tensor).
inline void note_error(const Error& e) {
  static const bool print = [] {
    const char* value = std::getenv("ONEPASS_FUZZ_ERRORS");
    return value != nullptr && std::string(value) == "1";
  }();
  if (print) std::fprintf(stderr, "fuzz error: %s\n", e.what());
}

/// Every step of `generate` after the file opens, on a tiny context: the vocabulary and a
/// tokenizer over it (encode, decode), then the weights bound to a one-thread CPU backend
/// and a forward pass over one token. Only onepass::Error may come out.
inline void use_source(const model::ModelSource& source) {
  if (const std::optional<model::TokenizerData> vocab = source.tokenizer_data()) {
    const model::Tokenizer tokenizer(*vocab);
    const std::vector<int32_t> ids = tokenizer.encode("Hello, world! 123 \xc3\xa9t\xc3\xa9 <s></s>\n\t  x");
    (void)tokenizer.decode(ids);
    model::Detokenizer stream(tokenizer);
    for (int32_t id = 0; id < tokenizer.vocab_size() && id < 512; ++id) (void)stream.push(id);
    (void)stream.flush();
  }
  static const std::shared_ptr<Backend> backend = [] {
    Options options = Options::defaults();
    options.cpu_threads = 1;
    return make_cpu_backend(options);
  }();
  model::LoadOptions load;
  load.context = 8;
  load.max_batch = 4;
  model::LlamaModel llama(backend, source, load);
  const int32_t prompt[] = {0};
  (void)llama.prefill(prompt);
}

}  // namespace onepass::fuzz
