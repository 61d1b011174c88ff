// Random-weight Llama-architecture GGUF files of a named or explicit shape (`onepass
// make-model`), with a valid synthesized BPE vocabulary, for benchmarks and tests. Tensor
// types follow llama.cpp's choices for each file type, so file sizes match its files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "onepass/core/dtype.h"
#include "onepass/core/tensor.h"
#include "onepass/model/gguf.h"
#include "onepass/model/model_source.h"

namespace onepass::model {

/// The hyper-parameters of a model to make. head_dim is hidden / heads unless set.
struct ModelShape {
  std::string name = "custom";  // general.name
  std::string architecture = "llama";  // general.architecture: a family of architecture.h
  int64_t hidden = 0;
  int64_t ffn = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t vocab = 0;
  bool tied = false;  // the LM head is the token embedding (no output.weight)
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  int64_t context = 4096;            // <arch>.context_length
  std::string pre = "llama-bpe";     // tokenizer.ggml.pre of the synthesized vocabulary
  DType default_type = DType::q4_0;  // the file type this shape is usually benchmarked in
  int64_t head_dim = 0;              // <arch>.attention.key_length; 0: hidden / heads
  int64_t sliding_window = 0;        // <arch>.attention.sliding_window (families with local layers)
  int64_t experts = 0;               // <arch>.expert_count: 0 for a dense FFN
  int64_t experts_used = 0;          // <arch>.expert_used_count
  int64_t expert_ffn = 0;            // <arch>.expert_feed_forward_length; 0: ffn

  /// The LlamaConfig a loader reads back from the file.
  LlamaConfig config() const;
  /// Throws Error naming the first unusable value.
  void validate() const;
  std::string describe() const;
};

/// The named shapes: smollm2-135m, llama-1b, llama-8b, qwen3-0.6b, gemma3-270m, gemma2-2b,
/// phi3-mini, and the mixtures of experts qwen3-30b-a3b, mixtral-8x7b, olmoe-1b-7b and
/// qwen3moe-small (a small one for tests).
const std::vector<ModelShape>& model_shapes();
/// The named shape called `name`, or nullopt.
std::optional<ModelShape> find_model_shape(std::string_view name);

/// llama.cpp's general.file_type for a file whose matrices are `type`: F32=0, F16=1,
/// Q4_0=2, Q4_1=3, Q8_0=7, Q5_0=8, Q5_1=9, Q2_K=10, Q3_K_S=11, Q4_K_M=15, Q5_K_M=17,
/// Q6_K=18, IQ4_NL=25, IQ4_XS=30, BF16=32. Throws for other types.
uint32_t llama_file_type(DType type);
/// File types make-model writes: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k,
/// q4_k, q5_k, q6_k, iq4_nl, iq4_xs.
std::vector<DType> model_file_types();

/// The type llama.cpp gives a weight matrix with `cols` values per row in a file of
/// `file_type`: the file type, except that the output matrix (output.weight, or
/// token_embd.weight when tied) of a file of fewer than 8 bits is q6_k; a 256-value type
/// whose row is not a multiple of 256 falls back as llama.cpp's (q4_k -> q5_0, q5_k ->
/// q5_1, q6_k -> q8_0; q2_k, q3_k, iq4_xs -> iq4_nl), and a row that is not a whole number
/// of blocks -> f16.
DType llama_tensor_type(DType file_type, bool is_output, int64_t cols);

/// One tensor of a planned file.
struct PlannedTensor {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;  // outermost first
  uint64_t bytes = 0;
  bool norm = false;  // an RMS-norm weight (values near 1) rather than a matrix
};

/// Everything about a file before writing it: metadata, tensors, exact sizes.
struct ModelPlan {
  ModelShape shape;
  DType file_type = DType::q4_0;
  std::vector<std::pair<std::string, GgufMetaValue>> metadata;  // in file order
  std::vector<PlannedTensor> tensors;                           // in file order
  uint64_t parameters = 0;
  uint64_t tensor_bytes = 0;  // sum of tensor bytes, without padding
  uint64_t file_bytes = 0;    // the exact size of the written file

  /// {tensors, parameters, bytes} per tensor type.
  struct TypeTotal {
    size_t tensors = 0;
    uint64_t parameters = 0;
    uint64_t bytes = 0;
  };
  std::map<DType, TypeTotal> totals_by_type() const;
  const PlannedTensor* find(std::string_view name) const;
};

/// Plans the file make_model writes for (shape, file_type, seed), synthesizing its
/// vocabulary (deterministic in vocab, pre and seed) so that the metadata and the file
/// size are exact.
ModelPlan plan_model(const ModelShape& shape, DType file_type, uint64_t seed = 0);

struct MakeModelOptions {
  uint64_t seed = 0;  // weights and vocabulary
  int threads = 0;    // 0: one per hardware thread
  /// Called as tensors are written: fraction of the data written, and the tensor.
  std::function<void(double, const std::string&)> progress;
};

struct MakeModelReport {
  ModelPlan plan;
  uint64_t file_bytes = 0;  // as written (equals plan.file_bytes)
  double seconds = 0;
};

/// Writes the random-weight GGUF file planned by plan_model(shape, type, options.seed).
/// Weights are uniform with standard deviation 1/sqrt(in_features) (the embedding as the
/// LM head: 1/sqrt(hidden)), norms 1 +- 0.1; each row comes from its own counter-based RNG
/// stream, so the file does not depend on the thread count. Generation and quantisation
/// run in parallel over rows while the previous slab is written.
MakeModelReport make_model(const ModelShape& shape, DType type, const std::filesystem::path& path,
                           const MakeModelOptions& options = {});

}  // namespace onepass::model
