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

/// Hyper-parameters of a Llama-family decoder (Llama 2/3, SmolLM2, Mistral, Qwen2).
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

  int64_t q_dim() const { return heads * head_dim; }
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
  /// Called once `tensor` (from find) has been copied to the backend: a file-backed source
  /// returns its mapped pages to the OS, so the weights are not resident twice. find()
  /// still works afterwards (the pages are read back from the file).
  virtual void release(const HostTensor& tensor) const { (void)tensor; }

  /// find() or an Error naming the missing tensor.
  HostTensor require(std::string_view name) const;
};

/// An in-memory model with random weights of the given shape (for tests): every weight
/// in `weight_type` (f32/f16/bf16 or a GGML block format), norms in f32.
std::unique_ptr<ModelSource> make_random_source(const LlamaConfig& config, DType weight_type,
                                                uint64_t seed);

}  // namespace onepass::model
