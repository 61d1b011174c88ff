// ModelSource: what the model layer needs from a model file — the architecture's
// hyper-parameters and named weight tensors in host memory (GGUF names). GGUF files and
// MLX directories implement it; tests build small random ones in memory.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "onepass/core/dtype.h"
#include "onepass/core/tensor.h"
#include "onepass/model/tokenizer.h"

namespace onepass::model {

/// The gated FFN's activation: act(gate) * up.
enum class FfnActivation : uint8_t { silu, gelu_tanh };

/// How a mixture-of-experts router's logits weight the experts it selects.
enum class ExpertWeighting : uint8_t {
  softmax_selected,  // softmax over the selected experts' logits (Mixtral, Qwen3-MoE)
  softmax_all,       // softmax over all experts, not renormalised (OLMoE)
};

/// Hyper-parameters of a decoder-only transformer. One forward pass serves every family;
/// what differs between families (Llama 2/3, SmolLM2, Mistral, Qwen2/3, Gemma 2/3, Phi-3)
/// is data here, filled from the family's table entry and the file's metadata.
struct LlamaConfig {
  // Bounds well above every released Llama-family model (Llama 3.1 405B: 126 layers,
  // hidden 16384, ffn 53248, 128 heads, vocab 128256) and low enough that a hostile file
  // cannot make the loader loop over billions of layers or size products past int64.
  static constexpr int64_t kMaxLayers = 4096;
  static constexpr int64_t kMaxHeads = 4096;
  static constexpr int64_t kMaxHidden = int64_t{1} << 20;
  static constexpr int64_t kMaxFfn = int64_t{1} << 22;
  static constexpr int64_t kMaxVocab = int64_t{1} << 24;

  std::string architecture = "llama";  // llama, qwen2 (Mistral and SmolLM2 are "llama")
  int64_t vocab_size = 0;
  int64_t hidden = 0;      // embedding length
  int64_t ffn = 0;         // feed-forward length
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;    // hidden / heads unless the file says otherwise
  int64_t rope_dims = 0;   // rotary dimensions (head_dim unless the file says otherwise)
  float rope_theta = 10000.0f;
  float rope_freq_scale = 1.0f;  // linear RoPE scaling: positions are multiplied by it
  bool rope_neox = false;  // NeoX (half split) layout: Qwen2 and HF/MLX weights; GGUF llama: interleaved
  float norm_eps = 1e-5f;
  int64_t train_context = 4096;
  bool tied_output = false;  // LM head shares the token embedding
  bool qkv_bias = false;     // Qwen2

  FfnActivation activation = FfnActivation::silu;
  /// Added to every norm weight as it loads (Gemma's HF checkpoints store w - 1; GGUF
  /// files store w, so 0 there).
  float norm_weight_offset = 0.0f;
  /// Per-head RMS norm of Q and K (weights [head_dim]) before RoPE: Qwen3, Gemma 3.
  bool qk_norm = false;
  /// RMS norms of the attention and FFN outputs before each residual add: Gemma 2/3.
  bool post_norms = false;
  /// The token embeddings are multiplied by this (Gemma: sqrt(hidden)).
  float embedding_scale = 1.0f;
  /// Scale of q·k; 0: 1 / sqrt(head_dim).
  float attention_scale = 0.0f;
  /// Attention scores and final logits pass through cap * tanh(x / cap) when > 0 (Gemma 2).
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  /// Local (sliding-window) layers attend to the last `sliding_window` keys only; 0: every
  /// layer is global. With a period P > 0, layer l is global when l % P == P - 1 (Gemma 2:
  /// P = 2, Gemma 3: P = 6); P = 0 makes every layer local.
  int64_t sliding_window = 0;
  int64_t sliding_window_period = 0;
  /// RoPE base of the local layers; 0: rope_theta (Gemma 3: 10000 local, 1e6 global).
  float rope_theta_local = 0.0f;
  /// Q, K, V in one tensor (attn_qkv) and gate, up in one (ffn_up, gate first): Phi-3.
  bool fused_qkv_tensor = false;
  bool fused_gate_up_tensor = false;
  /// Q and K RMS norms over the whole q_dim / kv_dim vectors (weights [q_dim], [kv_dim])
  /// rather than per head (OLMoE); with qk_norm.
  bool qk_norm_whole = false;
  /// Mixture of experts: every layer's FFN is `experts` gated FFNs of `expert_ffn` rows, of
  /// which the router (blk.N.ffn_gate_inp) selects `experts_used` per token; 0: dense FFN.
  static constexpr int64_t kMaxExperts = 1024;
  static constexpr int64_t kMaxExpertsUsed = 64;
  int64_t experts = 0;
  int64_t experts_used = 0;
  int64_t expert_ffn = 0;  // <arch>.expert_feed_forward_length, else ffn
  ExpertWeighting expert_weighting = ExpertWeighting::softmax_selected;

  bool moe() const { return experts > 0; }
  int64_t q_dim() const { return heads * head_dim; }
  /// Whether layer l attends through a sliding window.
  bool layer_is_local(int64_t l) const {
    if (sliding_window <= 0) return false;
    return sliding_window_period <= 0 || l % sliding_window_period != sliding_window_period - 1;
  }
  float layer_rope_theta(int64_t l) const {
    return layer_is_local(l) && rope_theta_local > 0 ? rope_theta_local : rope_theta;
  }
  float attention_scale_or_default() const;
  int64_t kv_dim() const { return kv_heads * head_dim; }
  /// Throws Error naming the first value out of range or inconsistent, prefixed with
  /// `source` (the file) when given.
  void validate(std::string_view source = {}) const;
  std::string describe() const;
};

/// A weight in host memory (typically memory-mapped), outermost dimension first: a
/// linear layer's weight is [out_features, in_features].
struct HostTensor {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  const void* data = nullptr;
  size_t bytes = 0;
  /// MLX affine quantization: `data` holds packed u32 words and these the per-group
  /// scales and biases ([out, in / group]).
  std::optional<AffineFormat> affine;
  const void* scales = nullptr;
  const void* biases = nullptr;
  /// A tensor stored as slices of its outermost dimension, one tensor each (a Hugging Face
  /// checkpoint's experts): `data` is null, `shape` and `bytes` are the stacked tensor's,
  /// and each part holds one slice, in order, of the same type and shape.
  std::vector<HostTensor> parts;
};

class ModelSource {
 public:
  virtual ~ModelSource() = default;
  virtual const LlamaConfig& config() const = 0;
  /// The tensor with this GGUF name ("blk.3.attn_q.weight"), or nullopt.
  virtual std::optional<HostTensor> find(std::string_view name) const = 0;
  /// Optional per-dimension RoPE frequency factors (Llama 3.1 scaling), f32 [rope_dims/2].
  virtual std::optional<std::vector<float>> rope_freq_factors() const { return std::nullopt; }
  /// The vocabulary stored with the model, if any.
  virtual std::optional<TokenizerData> tokenizer_data() const { return std::nullopt; }
  /// Human-readable description (path, format).
  virtual std::string describe() const = 0;
  /// The name the file gives the tensor called `name` here, for messages: the GGUF name
  /// itself, or an MLX directory's Hugging Face name ("model.norm.weight").
  virtual std::string file_name(std::string_view name) const { return std::string(name); }
  /// Called once `tensor` (from find) has been copied to the backend: a file-backed source
  /// returns its mapped pages to the OS, so the weights are not resident twice. find()
  /// still works afterwards (the pages are read back from the file).
  virtual void release(const HostTensor& tensor) const { (void)tensor; }
  /// Called once every tensor has been copied to the backend: a file-backed source returns
  /// the mapped pages of all its tensors, including those release() keeps (a page a tensor
  /// shares with one not yet copied) and those a later copy's page faults mapped again
  /// around it. find() still works afterwards.
  virtual void release_all() const {}

  /// find() or an Error naming the missing tensor.
  HostTensor require(std::string_view name) const;
};

/// An in-memory model with random weights of the given shape (for tests): every weight
/// in `weight_type` (f32/f16/bf16 or a GGML block format), norms in f32.
std::unique_ptr<ModelSource> make_random_source(const LlamaConfig& config, DType weight_type,
                                                uint64_t seed);

}  // namespace onepass::model
