// The Llama-family forward pass, built only from GraphSession ops. Decoding records one
// step into a CapturedGraph once and replays it for every later token: the per-step values
// (token id, position, KV length) live in device-readable buffers, written before each
// launch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "onepass/exec/backend.h"
#include "onepass/exec/captured_graph.h"
#include "onepass/exec/graph_session.h"
#include "onepass/model/kv_pool.h"
#include "onepass/model/model_source.h"
#include "onepass/ops/sample.h"

namespace onepass::model {

struct LoadOptions {
  int64_t context = 4096;     // KV-cache capacity in tokens
  int64_t max_batch = 512;    // prompt tokens per prefill chunk (one graph each)
  DType kv_type = DType::f16;
  /// Decode steps and prefill chunks replay a recorded graph (CapturedGraph, one per
  /// chunk length) instead of re-encoding it.
  bool replay = true;
  /// Emit composite ops where the op library has them (RoPE + KV-cache writes in one
  /// dispatch). Off: the unfused sequence, kept as the reference.
  bool fused_ops = true;
  CaptureOptions capture{};   // passes and encoding of the replayed step
  /// decode_greedy_run: fed decode steps recorded into one graph, so that the boundary
  /// between two steps is a programmatic (PDL) edge inside a graph instead of the start of
  /// the next graph launch. 1: a graph per step. 0: the backend's choice, 8 on CUDA and 1
  /// on the CPU, which has no launch to save and would hold every recorded step's
  /// dispatches in memory (~1 MB a step for a 30-layer model).
  int64_t fed_steps_per_graph = 0;
  /// CUDA decode: the first l2_prefetch_bytes of each layer's gate/up weights are
  /// requested into L2 by the layer's attention kernel (GraphSession::flash_decode's
  /// prefetch_l2), whose own DRAM traffic is small, so the gate/up product starts with
  /// them in L2. 0: off. More bytes warm more of the product but compete with the
  /// attention's own cache reads at long contexts; 4 MiB was chosen by bench-gpu's decode.
  int64_t l2_prefetch_bytes = int64_t{4} << 20;
  /// Batched steps (LlamaModel::step): sequences decoded together at most, which is also
  /// the most rows of logits one step returns. 0: no paged KV pool, only the
  /// single-sequence path (prefill, decode, ...), whose cache is allocated either way.
  int64_t sequences = 0;
  /// Blocks of the paged KV pool shared by the batched sequences; 0: enough for every
  /// sequence to reach the full context (sequences x context / kv_block_size).
  int64_t kv_blocks = 0;
  /// Positions per block. 16: a sequence wastes at most 15 positions of its last block,
  /// and a block's rows of one head (16 x head_dim) are still long contiguous reads.
  int64_t kv_block_size = 16;
  /// Sampled batched steps: penalised tokens (distinct tokens of a sequence's penalty
  /// window) a row may carry (at most ops::kSampleMaxPenalties). 64 covers the default
  /// window of 64 tokens; each row's entries are copied to the device every step.
  int64_t sample_penalties = 64;
  /// Called while weights upload: fraction done and the tensor being loaded.
  std::function<void(double, const std::string&)> progress;
};

/// One linear layer on the device: out = x · wᵀ (+ bias).
struct Linear {
  TensorView weight;                 // [out, in], or packed u32 for MLX affine
  std::optional<AffineFormat> affine;
  TensorView scales, biases;         // MLX affine
  TensorView bias;                   // f32 [out] (Qwen2 Q/K/V), empty if none
  int64_t out_features = 0;
  int64_t in_features = 0;
  /// Rows [first, first+count) of the layer (weights of a fused Q/K/V, say).
  Linear rows(int64_t first, int64_t count) const;
  size_t bytes() const;
};

struct LayerWeights {
  TensorView attn_norm, ffn_norm;    // f32 [hidden]
  TensorView q_norm, k_norm;         // f32 [head_dim] (LlamaConfig::qk_norm; [q_dim], [kv_dim] when qk_norm_whole)
  TensorView post_attn_norm, post_ffn_norm;  // f32 [hidden] (LlamaConfig::post_norms), else empty
  /// Q, K, V as one layer [q_dim + 2 kv_dim, hidden] when they share a format, else three.
  std::vector<Linear> qkv_parts;
  Linear attn_output;                // [hidden, q_dim]
  /// Gate and up as one layer [2 ffn, hidden] when they share a format, else two.
  std::vector<Linear> gate_up_parts;
  Linear down;                       // [hidden, ffn]
  /// Mixture of experts (LlamaConfig::moe()), instead of gate/up/down: the router
  /// [experts, hidden] and the experts' weights.
  Linear router;
  TensorView gate_exps, up_exps;     // [experts, expert_ffn, hidden]
  TensorView down_exps;              // [experts, hidden, expert_ffn]
  TensorView k_cache, v_cache;       // [kv_heads, context, head_dim]
  TensorView k_pool, v_pool;         // paged: [kv_heads, kv_blocks x kv_block_size, head_dim]
};

/// One row of a batched step: a token of a sequence of the KV pool at its position.
struct BatchRow {
  int32_t sequence = 0;  // a KvBlockPool sequence
  int32_t token = 0;
  int32_t position = 0;  // RoPE position and cache position within the sequence
  bool logits = false;   // the step returns this row's logits and argmax
};

/// How a sampled batched step draws the token of one row with logits: ops::sample's
/// parameters and the row's penalised tokens (params.penalty_count of them).
struct RowSampling {
  ops::SampleParams params;
  std::span<const ops::SamplePenalty> penalties;
};

/// What a batched step returns, for its rows with logits set, in row order.
struct BatchResult {
  std::span<const float> logits;    // [rows, vocab] row-major (empty when not downloaded)
  std::span<const int32_t> argmax;  // the largest logit's index per row (not in a sampled step)
  std::span<const int32_t> tokens;  // a sampled step: the token drawn for each row
};

class LlamaModel {
 public:
  LlamaModel(std::shared_ptr<Backend> backend, const ModelSource& source, const LoadOptions& options = {});
  ~LlamaModel();
  LlamaModel(const LlamaModel&) = delete;
  LlamaModel& operator=(const LlamaModel&) = delete;

  const LlamaConfig& config() const { return config_; }
  Backend& backend() const { return *backend_; }
  int64_t context() const { return options_.context; }
  /// Tokens in the KV cache.
  int64_t position() const { return position_; }
  /// Forgets the conversation (the cache contents are simply overwritten later).
  void reset() { position_ = 0; }
  /// Keeps the first `position` tokens of the cache (at most position()): the next token
  /// goes at `position`, later entries are overwritten (prompt caching).
  void rewind(int64_t position);

  /// Appends `tokens` to the cache and returns the logits after the last one; throws Error
  /// when they are not all finite (NaN or Inf weights).
  std::span<const float> prefill(std::span<const int32_t> tokens);
  /// Appends `tokens` to the cache like prefill and returns the logits after every one of
  /// them, [tokens.size(), vocab] row-major (perplexity, teacher forcing). Runs in chunks of
  /// at most kEvaluateRows tokens, recorded each time (not replayed); checked as prefill's.
  std::span<const float> evaluate(std::span<const int32_t> tokens);
  /// Most tokens of one evaluate() chunk: its logits buffer is this many rows of vocab.
  static constexpr int64_t kEvaluateRows = 64;
  /// Appends one token and returns the logits after it (checked as prefill's).
  std::span<const float> decode(int32_t token);
  /// Appends one token and returns the most likely next token (argmax on the device,
  /// no logits download).
  int32_t decode_greedy(int32_t token);
  /// decode_greedy `count` times from `token`, returning the `count` tokens produced. With
  /// replay on, the steps after the first take their input from the previous step's argmax
  /// on the device (ops::FeedTokenArgs) and are launched back to back, with one wait at
  /// the end: no host round trip per token. The same tokens as the loop of decode_greedy.
  std::vector<int32_t> decode_greedy_run(int32_t token, int64_t count);

  /// The paged KV pool of the batched steps (throws Error without LoadOptions::sequences).
  KvBlockPool& kv_pool();
  const KvBlockPool& kv_pool() const;
  /// Most rows of one batched step (LoadOptions::max_batch).
  int64_t max_step_rows() const;
  /// Most rows with logits of one batched step (LoadOptions::sequences).
  int64_t max_sequences() const { return options_.sequences; }
  /// Most penalised tokens of a row of a sampled step (LoadOptions::sample_penalties).
  int64_t max_sample_penalties() const { return options_.sample_penalties; }
  /// One forward pass over rows of many sequences of kv_pool(): decode tokens of several
  /// sequences, prefill chunks, or both mixed. A row at position p sees positions 0..p of
  /// its sequence: those written by earlier steps and by this step's rows. Grows each
  /// sequence's blocks to cover its rows first and throws KvPoolFull (nothing run, nothing
  /// allocated) when the pool has too few free blocks. The step's graph is recorded once
  /// per bucket of rows (a power of two, padded rows write and read nothing) and of logit
  /// rows, then replayed. With `download_logits` false only the argmax comes back.
  BatchResult step(std::span<const BatchRow> rows, bool download_logits = true);
  /// step, then a draw on the device for every row with logits (ops::sample), with
  /// `sampling[i]` for the i-th of them: only the tokens come back (BatchResult::tokens).
  /// A row's draw depends on its logits and its RowSampling alone, not on the other rows.
  /// Throws Error when `sampling` does not match the rows with logits or a row carries
  /// more than LoadOptions::sample_penalties penalised tokens.
  BatchResult step(std::span<const BatchRow> rows, std::span<const RowSampling> sampling);
  /// Recorded batched-step graphs kept for replay.
  size_t step_graphs() const { return step_graphs_.size(); }

  /// Bytes of weights read per decoded token (a MoE layer: its router and experts_used /
  /// experts of its experts' weights), and KV bytes read per token at `kv_length`.
  size_t weight_bytes() const { return weight_bytes_; }
  size_t kv_bytes_read(int64_t kv_length) const;
  /// The replayed decode step (nullptr until the first decode, or with replay off).
  const CapturedGraph* decode_graph() const { return decode_graph_.get(); }
  /// Prefill chunk lengths with a recorded graph kept for replay (at most 4).
  size_t prefill_graphs() const { return prefill_graphs_.size(); }
  /// Drops the recorded prefill graphs, for a caller with no more prompts to prefill (a
  /// later prefill records again).
  void release_prefill_graphs() { prefill_graphs_.clear(); }
  /// Host time of the last decode step from writing its inputs to the launch returning.
  uint64_t last_step_host_ns() const { return last_step_host_ns_; }
  /// Dispatches of one decode step (after fusion).
  size_t decode_dispatches() const;

  /// Emits one forward pass over `n_tokens` tokens into `session`, reading token ids and
  /// positions from the batch buffers. A decode step ends by feeding its argmax to the
  /// next step's inputs on the device; `fed`: its own inputs are already there (no copy
  /// from the host-written step buffer). Exposed for tests and profiling.
  void emit_forward(GraphSession& session, int64_t n_tokens, bool decode_step, bool fed = false);

 private:
  struct Buffers;
  /// step_logit_rows > 0: a batched step of n_tokens rows over the paged pool, returning
  /// that many gathered rows of logits and their argmax, or with `step_sample` their
  /// sampled tokens.
  void emit(GraphSession& session, int64_t n_tokens, bool decode_step, bool fed, bool all_logits,
            int64_t step_logit_rows = 0, bool step_sample = false);
  void allocate_pool();
  CapturedGraph& step_graph(int64_t rows, int64_t logit_rows, bool sample);
  BatchResult run_step(std::span<const BatchRow> rows, bool download_logits, const std::span<const RowSampling>* sampling);
  void emit_experts(GraphSession& session, const LayerWeights& w, int64_t n_tokens, const TensorView& xn,
                    const TensorView& out);
  void load_weights(const ModelSource& source);
  void warm_up_library();
  void set_step(std::span<const int32_t> tokens);
  void run_decode(int32_t token);
  void launch_decode(int32_t token);  // sets the step's inputs and launches decode_graph_
  void check_logits() const;

  std::shared_ptr<Backend> backend_;
  LoadOptions options_;
  LlamaConfig config_;
  std::string source_name_;  // the model file, for errors
  GraphExecutor executor_;
  TensorView token_embd_;
  Linear output_;
  TensorView output_norm_;
  TensorView rope_factors_;
  std::vector<LayerWeights> layers_;
  std::unique_ptr<Buffers> buffers_;
  std::unique_ptr<CapturedGraph> decode_graph_;
  std::unique_ptr<CapturedGraph> fed_decode_graph_;  // decode_greedy_run after its first step
  std::unique_ptr<CapturedGraph> fed_decode_steps_;  // fed_steps_per_graph such steps in one
  /// Recorded prefill chunks by token count, most recently used last (with replay on).
  struct PrefillGraph {
    int64_t tokens;
    std::unique_ptr<CapturedGraph> graph;
  };
  static constexpr size_t kPrefillGraphs = 4;
  std::vector<PrefillGraph> prefill_graphs_;
  CapturedGraph& prefill_graph(int64_t n);
  std::vector<float> logits_;
  std::vector<float> all_logits_;
  std::unique_ptr<KvBlockPool> pool_;
  /// Recorded batched steps by (row bucket, logit-row bucket).
  struct StepGraph {
    int64_t rows;
    int64_t logit_rows;
    bool sample;
    std::unique_ptr<CapturedGraph> graph;
  };
  std::vector<StepGraph> step_graphs_;
  std::vector<float> step_logits_;
  std::vector<int32_t> step_argmax_;
  std::vector<int32_t> step_tokens_;
  int64_t position_ = 0;
  size_t weight_bytes_ = 0;
  uint64_t last_step_host_ns_ = 0;
};

}  // namespace onepass::model
