#include "stream.h"

#include <algorithm>
#include <deque>

#include "common.h"

namespace onepass::cli {

StreamResult stream_completion(model::LlamaModel& llama, model::Sampler& sampler,
                               const model::Tokenizer& tokenizer, std::span<const float> logits,
                               const StreamOptions& options,
                               const std::function<void(std::string_view)>& print,
                               std::vector<int32_t>* fed) {
  StreamResult result;
  serve::StopMatcher filter(options.stops);
  model::Detokenizer detokenizer(
      tokenizer, {.render_special = false, .strip_space_prefix = options.strip_space_prefix});
  auto emit = [&](std::string_view text) {
    const std::string out = filter.push(text);
    if (!out.empty()) {
      print(out);
      result.text += out;
    }
  };
  // Greedy decoding without a penalty takes the argmax on the device (no logits download)
  // and runs up to kGreedyRun steps back to back, each fed by the previous one on the
  // device; tokens past an end of generation are computed but never printed.
  const bool device_greedy = sampler.options().greedy() && !sampler.options().penalizes();
  constexpr int64_t kGreedyRun = 16;
  std::deque<int32_t> pending;  // greedy tokens computed ahead of printing
  int32_t next = sampler.sample(logits);
  const double start = now_seconds();
  while (result.generated < options.max_tokens && !tokenizer.is_end_of_generation(next)) {
    emit(detokenizer.push(next));
    ++result.generated;
    if (filter.stopped()) break;
    if (result.generated == options.max_tokens) break;
    // A greedy run has advanced the position past the tokens still pending: those were
    // computed inside the context and are printed before the context counts as full.
    if (pending.empty() && llama.position() >= llama.context()) {
      result.context_full = true;
      break;
    }
    if (device_greedy) {
      if (pending.empty()) {
        const int64_t run = std::min({kGreedyRun, options.max_tokens - result.generated,
                                      llama.context() - llama.position()});
        const std::vector<int32_t> tokens = llama.decode_greedy_run(next, run);
        if (fed != nullptr) {
          fed->push_back(next);
          fed->insert(fed->end(), tokens.begin(), tokens.end() - 1);
        }
        pending.assign(tokens.begin(), tokens.end());
      }
      next = pending.front();
      pending.pop_front();
    } else {
      if (fed != nullptr) fed->push_back(next);
      next = sampler.sample(llama.decode(next));
    }
    ++result.decode_steps;
  }
  result.decode_seconds = now_seconds() - start;
  if (!filter.stopped()) emit(detokenizer.flush());
  const std::string tail = filter.flush();
  if (!tail.empty()) {
    print(tail);
    result.text += tail;
  }
  result.stopped = filter.stopped();
  return result;
}

}  // namespace onepass::cli
