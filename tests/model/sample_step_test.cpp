// Sampled batched steps (LlamaModel::step with RowSampling): the tokens drawn on the device
// are the host Sampler's draws from the same step's logits, greedy rows give the argmax,
// and bad samplings are clear errors. On the CPU, and on the GPU when there is one.
#include <gtest/gtest.h>

#include <filesystem>

#include "onepass/backends/factory.h"
#include "onepass/core/error.h"
#include "onepass/model/architecture.h"
#include "onepass/model/llama.h"
#include "onepass/model/loader.h"
#include "onepass/model/sampler.h"
#include "onepass/model/tokenizer.h"
#include "support/testing.h"

namespace onepass::model {
namespace {

LlamaConfig tiny() {
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

// Sampler options for row i: greedy, greedy with penalties, and sampled ones.
SamplerOptions options_of(size_t i) {
  SamplerOptions o;
  o.seed = 1000 + i;
  switch (i % 5) {
    case 0: break;  // greedy
    case 1: o.repeat_penalty = 1.5f; o.presence_penalty = 0.5f; break;  // greedy, penalised
    case 2: o.temperature = 0.8f; o.top_k = 40; o.top_p = 0.9f; break;
    case 3: o.temperature = 1.2f; o.min_p = 0.05f; o.frequency_penalty = 0.4f; o.repeat_last_n = 8; break;
    default: o.temperature = 0.6f; break;
  }
  return o;
}

// Runs `prompts` (one sequence each) through one step twice: once downloading the logits
// for the host Sampler, once rewriting the same positions with samplers on the device; the
// tokens must agree. Then a few decode steps, each compared the same way.
void expect_device_draws_match_the_sampler(LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts) {
  KvBlockPool& pool = model.kv_pool();
  std::vector<int32_t> seqs;
  std::vector<Sampler> host, device;
  for (size_t i = 0; i < prompts.size(); ++i) {
    seqs.push_back(pool.add_sequence());
    host.emplace_back(options_of(i));
    device.emplace_back(options_of(i));
    host.back().remember(prompts[i]);
    device.back().remember(prompts[i]);
  }
  std::vector<BatchRow> rows;
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (size_t j = 0; j < prompts[i].size(); ++j) {
      rows.push_back({seqs[i], prompts[i][j], static_cast<int32_t>(j), j + 1 == prompts[i].size()});
    }
  }
  const auto vocab = static_cast<size_t>(model.config().vocab_size);
  std::vector<size_t> lengths;
  for (const auto& p : prompts) lengths.push_back(p.size());
  for (int step = 0; step < 6; ++step) {
    SCOPED_TRACE(step);
    const BatchResult with_logits = model.step(rows, true);
    std::vector<int32_t> want;
    for (size_t i = 0; i < prompts.size(); ++i) {
      want.push_back(host[i].sample(with_logits.logits.subspan(i * vocab, vocab)));
    }
    std::vector<std::vector<ops::SamplePenalty>> entries(prompts.size());
    std::vector<RowSampling> sampling;
    for (size_t i = 0; i < prompts.size(); ++i) {
      device[i].penalties(entries[i]);
      ops::SampleParams p = device[i].device_params();
      ASSERT_EQ(static_cast<size_t>(p.penalty_count), entries[i].size());
      sampling.push_back({p, entries[i]});
    }
    const BatchResult drawn = model.step(rows, sampling);  // the same positions again
    EXPECT_TRUE(drawn.logits.empty());
    EXPECT_TRUE(drawn.argmax.empty());
    ASSERT_EQ(drawn.tokens.size(), prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(drawn.tokens[i], want[i]) << "sequence " << i;
      if (options_of(i).temperature <= 0.0f && !options_of(i).penalizes()) {
        EXPECT_EQ(drawn.tokens[i], with_logits.argmax[i]) << "sequence " << i;
      }
      device[i].accept(drawn.tokens[i]);
    }
    rows.clear();
    for (size_t i = 0; i < prompts.size(); ++i) {
      rows.push_back({seqs[i], want[i], static_cast<int32_t>(lengths[i]), true});
      ++lengths[i];
    }
  }
  for (const int32_t s : seqs) pool.release(s);
}

TEST(SampledStep, DrawsWhatTheHostSamplerDrawsFromTheSameLogits) {
  auto src = make_random_source(tiny(), DType::f32, 11);
  LoadOptions o;
  o.context = 64;
  o.max_batch = 32;
  o.sequences = 5;
  LlamaModel model(testing::cpu_backend(), *src, o);
  expect_device_draws_match_the_sampler(model, {{1, 2, 3}, {7, 8}, {40, 41, 42, 43, 44}, {9}, {5, 6, 7, 8}});
}

TEST(SampledStep, BadSamplingsAreClearErrors) {
  auto src = make_random_source(tiny(), DType::f32, 11);
  LoadOptions o;
  o.context = 16;
  o.max_batch = 4;
  o.sequences = 2;
  o.sample_penalties = 2;
  LlamaModel model(testing::cpu_backend(), *src, o);
  const int32_t s = model.kv_pool().add_sequence();
  const std::vector<BatchRow> rows = {{s, 1, 0, true}};
  EXPECT_THROW(model.step(rows, std::span<const RowSampling>{}), Error);  // one row with logits, no sampling
  const std::vector<ops::SamplePenalty> three = {{1, 1}, {2, 1}, {3, 1}};
  RowSampling too_many{{}, three};
  too_many.params.penalty_count = 3;
  EXPECT_THROW(model.step(rows, std::span<const RowSampling>(&too_many, 1)), Error);
  RowSampling mismatched{{}, std::span<const ops::SamplePenalty>(three).first(2)};
  mismatched.params.penalty_count = 1;
  EXPECT_THROW(model.step(rows, std::span<const RowSampling>(&mismatched, 1)), Error);
  RowSampling fine{{}, std::span<const ops::SamplePenalty>(three).first(2)};
  fine.params.penalty_count = 2;
  EXPECT_EQ(model.step(rows, std::span<const RowSampling>(&fine, 1)).tokens.size(), 1u);
  o.sample_penalties = ops::kSampleMaxPenalties + 1;
  EXPECT_THROW(LlamaModel(testing::cpu_backend(), *src, o), Error);
}

// The default model (a 49k vocabulary): the same on the CPU and on the GPU.
TEST(SampledStep, DefaultModelDrawsWhatTheHostSamplerDraws) {
  const char* path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not installed (scripts/setup)";
  auto src = open_model(path);
  Tokenizer tok(*src->tokenizer_data());
  std::vector<std::vector<int32_t>> prompts;
  for (const char* text : {"The capital of France is", "Once upon a time", "Write a poem about the sea:",
                           "2 + 2 =", "My favourite colour is"}) {
    prompts.push_back(tok.encode(text));
  }
  std::vector<std::shared_ptr<Backend>> backends = {testing::cpu_backend(Options::defaults())};
  if (cuda_device_count() > 0) backends.push_back(make_cuda_backend(0));
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend_name(backend->kind()));
    LoadOptions o;
    o.context = 128;
    o.max_batch = 64;
    o.sequences = 5;
    LlamaModel model(backend, *src, o);
    expect_device_draws_match_the_sampler(model, prompts);
  }
}

}  // namespace
}  // namespace onepass::model
