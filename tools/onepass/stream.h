// Streaming a completion to the terminal: the token loop shared by generate and chat, with
// stop strings held back until they can no longer begin.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "onepass/model/llama.h"
#include "onepass/model/sampler.h"
#include "onepass/model/tokenizer.h"
#include "onepass/serve/engine.h"

namespace onepass::cli {

struct StreamOptions {
  int64_t max_tokens = 0;
  std::vector<std::string> stops;
  /// SentencePiece: drop the space before the first word (a fresh answer, not a continuation).
  bool strip_space_prefix = false;
};

struct StreamResult {
  std::string text;  // everything printed
  int64_t generated = 0;
  int64_t decode_steps = 0;
  double decode_seconds = 0.0;
  bool context_full = false;
  bool stopped = false;  // at a stop string
};

/// Samples from `logits` (the prefill's) and decodes until the end of generation, a stop
/// string, `max_tokens` or a full context, passing printable text to `print`. A greedy
/// sampler without a repetition penalty decodes on the device in fed runs. `fed`, when
/// given, receives every token appended to the cache.
StreamResult stream_completion(model::LlamaModel& llama, model::Sampler& sampler,
                               const model::Tokenizer& tokenizer, std::span<const float> logits,
                               const StreamOptions& options,
                               const std::function<void(std::string_view)>& print,
                               std::vector<int32_t>* fed = nullptr);

}  // namespace onepass::cli
