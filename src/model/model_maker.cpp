#include "onepass/model/model_maker.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <thread>

#include "onepass/core/error.h"
#include "onepass/core/thread_pool.h"
#include "onepass/model/architecture.h"
#include "onepass/model/tokenizer.h"
#include "onepass/ops/quant.h"

namespace onepass::model {
namespace {

constexpr std::string_view kWhere = "make_model";
constexpr uint64_t kAlignment = 32;  // GGUF's default; the writer records nothing for it
// Output bytes generated per slab: large enough to keep every thread busy, small enough
// that two slabs (one being written, one being filled) stay modest in memory.
constexpr uint64_t kSlabBytes = uint64_t{32} << 20;
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;

uint64_t align_up(uint64_t n, uint64_t a) {
  return (n + a - 1) / a * a;
}

// splitmix64's output function: a bijective 64-bit mixer.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t hash_name(std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a
  for (const char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
  return h;
}

// Uniform values in [-scale, scale) from a counter-based stream: value pair i is a mix of
// (stream + i * gamma), so rows can be generated in any order on any thread.
void fill_uniform(float* out, int64_t n, uint64_t stream, float scale) {
  const float step = scale * 0x1p-23f;  // 24-bit integers -> [0, 2 * scale)
  const int64_t pairs = n / 2;
  for (int64_t i = 0; i < pairs; ++i) {
    const uint64_t z = mix64(stream + static_cast<uint64_t>(i + 1) * kGamma);
    out[2 * i] = static_cast<float>(static_cast<int32_t>(z >> 40)) * step - scale;
    out[2 * i + 1] = static_cast<float>(static_cast<int32_t>((z >> 8) & 0xFFFFFF)) * step - scale;
  }
  if (n % 2 != 0) {
    const uint64_t z = mix64(stream + static_cast<uint64_t>(pairs + 1) * kGamma);
    out[n - 1] = static_cast<float>(static_cast<int32_t>(z >> 40)) * step - scale;
  }
}

// llama.cpp's type for a matrix of 256-value type `t` whose rows are not 256-multiples.
DType row_fallback(DType t) {
  switch (t) {
    case DType::q4_k:
      return DType::q5_0;
    case DType::q5_k:
      return DType::q5_1;
    case DType::q6_k:
      return DType::q8_0;
    default:
      return DType::iq4_nl;  // q2_k, q3_k, iq4_xs
  }
}

std::vector<std::pair<std::string, GgufMetaValue>> model_metadata(const ModelShape& s, DType type,
                                                                  const TokenizerData& vocab) {
  std::vector<std::pair<std::string, GgufMetaValue>> m;
  auto add = [&](std::string key, GgufMetaValue value) {
    m.emplace_back(std::move(key), std::move(value));
  };
  auto u32 = [](int64_t v) { return GgufMetaValue::u32(static_cast<uint32_t>(v)); };
  const LlamaConfig c = s.config();
  const std::string a = s.architecture;
  add("general.architecture", GgufMetaValue::string(a));
  add("general.type", GgufMetaValue::string("model"));
  add("general.name", GgufMetaValue::string(s.name));
  add("general.file_type", GgufMetaValue::u32(llama_file_type(type)));
  add("general.quantization_version", GgufMetaValue::u32(2));
  add(a + ".block_count", u32(s.layers));
  add(a + ".context_length", u32(s.context));
  add(a + ".embedding_length", u32(s.hidden));
  add(a + ".feed_forward_length", u32(s.ffn));
  add(a + ".attention.head_count", u32(s.heads));
  add(a + ".attention.head_count_kv", u32(s.kv_heads));
  add(a + ".rope.freq_base", GgufMetaValue::f32(s.rope_theta));
  add(a + ".attention.layer_norm_rms_epsilon", GgufMetaValue::f32(s.norm_eps));
  if (s.head_dim > 0) {
    add(a + ".attention.key_length", u32(c.head_dim));
    add(a + ".attention.value_length", u32(c.head_dim));
  }
  add(a + ".rope.dimension_count", u32(c.rope_dims));
  if (c.sliding_window > 0) add(a + ".attention.sliding_window", u32(c.sliding_window));
  if (c.attn_softcap > 0) add(a + ".attn_logit_softcapping", GgufMetaValue::f32(c.attn_softcap));
  if (c.final_softcap > 0) add(a + ".final_logit_softcapping", GgufMetaValue::f32(c.final_softcap));
  if (c.moe()) {
    add(a + ".expert_count", u32(c.experts));
    add(a + ".expert_used_count", u32(c.experts_used));
    if (s.expert_ffn > 0) add(a + ".expert_feed_forward_length", u32(c.expert_ffn));
  }
  add(a + ".vocab_size", u32(s.vocab));
  add("tokenizer.ggml.model", GgufMetaValue::string(vocab.model));
  add("tokenizer.ggml.pre", GgufMetaValue::string(vocab.pre));
  add("tokenizer.ggml.tokens", GgufMetaValue::strings(vocab.tokens));
  add("tokenizer.ggml.token_type", GgufMetaValue::i32s(vocab.token_types));
  if (!vocab.scores.empty()) add("tokenizer.ggml.scores", GgufMetaValue::f32s(vocab.scores));
  add("tokenizer.ggml.merges", GgufMetaValue::strings(vocab.merges));
  // llama.cpp writes token ids as u32; absent ids (-1) are left out.
  auto id = [&](const char* key, int32_t value) {
    if (value >= 0) add(key, GgufMetaValue::u32(static_cast<uint32_t>(value)));
  };
  id("tokenizer.ggml.bos_token_id", vocab.bos_id);
  id("tokenizer.ggml.eos_token_id", vocab.eos_id);
  if (vocab.eot_id) id("tokenizer.ggml.eot_token_id", *vocab.eot_id);
  id("tokenizer.ggml.unknown_token_id", vocab.unk_id);
  id("tokenizer.ggml.padding_token_id", vocab.pad_id);
  add("tokenizer.ggml.add_bos_token", GgufMetaValue::boolean(vocab.add_bos));
  add("tokenizer.ggml.add_eos_token", GgufMetaValue::boolean(vocab.add_eos));
  add("tokenizer.chat_template", GgufMetaValue::string(vocab.chat_template));
  return m;
}

// Bytes of the GGUF header (magic to the end of the tensor infos), before padding; the
// layout GgufWriter::write_header writes.
uint64_t header_bytes(const ModelPlan& plan) {
  uint64_t n = 4 + 4 + 8 + 8;
  for (const auto& [key, value] : plan.metadata) n += 8 + key.size() + 4 + value.encoded().size();
  for (const PlannedTensor& t : plan.tensors)
    n += 8 + t.name.size() + 4 + 8 * static_cast<uint64_t>(t.shape.ndim()) + 4 + 8;
  return n;
}

// Linear weights: uniform with variance 1/in keeps activations O(1) through the layers.
float weight_scale(int64_t in_features) {
  return std::sqrt(3.0f / static_cast<float>(in_features));
}

}  // namespace

LlamaConfig ModelShape::config() const {
  LlamaConfig c;
  c.vocab_size = vocab;
  c.hidden = hidden;
  c.ffn = ffn;
  c.layers = layers;
  c.heads = heads;
  c.kv_heads = kv_heads;
  const Architecture* family = find_architecture(architecture);
  check(family != nullptr, kWhere, "architecture '", architecture, "' is not supported (", architecture_names(), ")");
  apply_architecture(*family, c);
  if (architecture == "mistral") c.architecture = "llama";
  c.sliding_window = c.sliding_window_period > 0 ? sliding_window : 0;
  c.head_dim = head_dim > 0 ? head_dim : heads > 0 ? hidden / heads : 0;
  c.rope_dims = c.head_dim;
  c.rope_theta = rope_theta;
  c.norm_eps = norm_eps;
  c.train_context = context;
  c.tied_output = tied;
  c.experts = experts;
  c.experts_used = experts > 0 ? experts_used : 0;
  c.expert_ffn = experts > 0 ? (expert_ffn > 0 ? expert_ffn : ffn) : 0;
  return c;
}

void ModelShape::validate() const {
  check(hidden > 0 && ffn > 0 && layers > 0 && heads > 0 && kv_heads > 0 && vocab > 0, kWhere,
        "hidden, ffn, layers, heads, kv-heads and vocab must all be positive (", describe(), ")");
  check(head_dim > 0 || hidden % heads == 0, kWhere, "hidden (", hidden, ") must be a multiple of heads (", heads,
        ") or head_dim given");
  // The configuration's bounds keep every size make-model computes within 64 bits.
  config().validate(name);
  check(context > 0 && context <= UINT32_MAX, kWhere, "context must be in 1..", UINT32_MAX,
        ", got ", context);
}

std::string ModelShape::describe() const {
  return cat(name, " (", architecture, "): hidden ", hidden, ", ffn ", ffn, ", layers ", layers, ", heads ", heads, "/",
             kv_heads, ", vocab ", vocab, tied ? ", tied" : ", untied", ", rope theta ", rope_theta,
             ", context ", context,
             experts > 0 ? cat(", experts ", experts_used, "/", experts, " (ffn ", expert_ffn > 0 ? expert_ffn : ffn, ")")
                         : std::string());
}

const std::vector<ModelShape>& model_shapes() {
  static const std::vector<ModelShape> kShapes = [] {
    ModelShape smollm{.name = "smollm2-135m",
                      .hidden = 576,
                      .ffn = 1536,
                      .layers = 30,
                      .heads = 9,
                      .kv_heads = 3,
                      .vocab = 49152,
                      .tied = true,
                      .rope_theta = 100000.0f,
                      .norm_eps = 1e-5f,
                      .context = 8192,
                      .pre = "smollm",
                      .default_type = DType::q4_1};
    ModelShape llama1b{.name = "llama-1b",
                       .hidden = 2048,
                       .ffn = 8192,
                       .layers = 16,
                       .heads = 32,
                       .kv_heads = 8,
                       .vocab = 128256,
                       .tied = true,
                       .rope_theta = 500000.0f,
                       .norm_eps = 1e-5f,
                       .context = 131072,
                       .pre = "llama-bpe",
                       .default_type = DType::q4_0};
    ModelShape llama8b{.name = "llama-8b",
                       .hidden = 4096,
                       .ffn = 14336,
                       .layers = 32,
                       .heads = 32,
                       .kv_heads = 8,
                       .vocab = 128256,
                       .tied = false,
                       .rope_theta = 500000.0f,
                       .norm_eps = 1e-5f,
                       .context = 8192,
                       .pre = "llama-bpe",
                       .default_type = DType::q4_0};
    ModelShape qwen3{.name = "qwen3-0.6b",
                     .architecture = "qwen3",
                     .hidden = 1024,
                     .ffn = 3072,
                     .layers = 28,
                     .heads = 16,
                     .kv_heads = 8,
                     .vocab = 151936,
                     .tied = true,
                     .rope_theta = 1000000.0f,
                     .norm_eps = 1e-6f,
                     .context = 40960,
                     .pre = "qwen2",
                     .default_type = DType::q4_k,
                     .head_dim = 128};
    ModelShape gemma3{.name = "gemma3-270m",
                      .architecture = "gemma3",
                      .hidden = 640,
                      .ffn = 2048,
                      .layers = 18,
                      .heads = 4,
                      .kv_heads = 1,
                      .vocab = 262144,
                      .tied = true,
                      .rope_theta = 1000000.0f,
                      .norm_eps = 1e-6f,
                      .context = 32768,
                      .pre = "default",
                      .default_type = DType::q8_0,
                      .head_dim = 256,
                      .sliding_window = 512};
    ModelShape gemma2{.name = "gemma2-2b",
                      .architecture = "gemma2",
                      .hidden = 2304,
                      .ffn = 9216,
                      .layers = 26,
                      .heads = 8,
                      .kv_heads = 4,
                      .vocab = 256000,
                      .tied = true,
                      .rope_theta = 10000.0f,
                      .norm_eps = 1e-6f,
                      .context = 8192,
                      .pre = "default",
                      .default_type = DType::q4_k,
                      .head_dim = 256,
                      .sliding_window = 4096};
    ModelShape phi3{.name = "phi3-mini",
                    .architecture = "phi3",
                    .hidden = 3072,
                    .ffn = 8192,
                    .layers = 32,
                    .heads = 32,
                    .kv_heads = 32,
                    .vocab = 32064,
                    .tied = false,
                    .rope_theta = 10000.0f,
                    .norm_eps = 1e-5f,
                    .context = 4096,
                    .pre = "default",
                    .default_type = DType::q4_k};
    // Mixtures of experts, with their llama.cpp metadata: Qwen3-30B-A3B (128 experts, 8 used,
    // expert ffn 768), Mixtral 8x7B ("llama" with 8 experts, 2 used), OLMoE-1B-7B (64
    // experts, 8 used, no expert_feed_forward_length key).
    ModelShape qwen3moe{.name = "qwen3-30b-a3b",
                        .architecture = "qwen3moe",
                        .hidden = 2048,
                        .ffn = 6144,
                        .layers = 48,
                        .heads = 32,
                        .kv_heads = 4,
                        .vocab = 151936,
                        .tied = false,
                        .rope_theta = 1000000.0f,
                        .norm_eps = 1e-6f,
                        .context = 40960,
                        .pre = "qwen2",
                        .default_type = DType::q4_k,
                        .head_dim = 128,
                        .experts = 128,
                        .experts_used = 8,
                        .expert_ffn = 768};
    ModelShape mixtral{.name = "mixtral-8x7b",
                       .architecture = "llama",
                       .hidden = 4096,
                       .ffn = 14336,
                       .layers = 32,
                       .heads = 32,
                       .kv_heads = 8,
                       .vocab = 32000,
                       .tied = false,
                       .rope_theta = 1000000.0f,
                       .norm_eps = 1e-5f,
                       .context = 32768,
                       .pre = "default",
                       .default_type = DType::q4_k,
                       .experts = 8,
                       .experts_used = 2};
    ModelShape olmoe{.name = "olmoe-1b-7b",
                     .architecture = "olmoe",
                     .hidden = 2048,
                     .ffn = 1024,
                     .layers = 16,
                     .heads = 16,
                     .kv_heads = 16,
                     .vocab = 50304,
                     .tied = false,
                     .rope_theta = 10000.0f,
                     .norm_eps = 1e-5f,
                     .context = 4096,
                     .pre = "default",
                     .default_type = DType::q4_k,
                     .experts = 64,
                     .experts_used = 8};
    // A small Qwen3-MoE for tests and quick GPU runs: 16 experts, 4 used.
    ModelShape moe_small{.name = "qwen3moe-small",
                         .architecture = "qwen3moe",
                         .hidden = 512,
                         .ffn = 1024,
                         .layers = 4,
                         .heads = 8,
                         .kv_heads = 2,
                         .vocab = 4096,
                         .tied = false,
                         .rope_theta = 1000000.0f,
                         .norm_eps = 1e-6f,
                         .context = 4096,
                         .pre = "qwen2",
                         .default_type = DType::q8_0,
                         .head_dim = 64,
                         .experts = 16,
                         .experts_used = 4,
                         .expert_ffn = 256};
    return std::vector<ModelShape>{smollm, llama1b, llama8b, qwen3,   gemma3,
                                   gemma2, phi3,    qwen3moe, mixtral, olmoe, moe_small};
  }();
  return kShapes;
}

std::optional<ModelShape> find_model_shape(std::string_view name) {
  for (const ModelShape& s : model_shapes()) {
    if (s.name == name) return s;
  }
  return std::nullopt;
}

uint32_t llama_file_type(DType type) {
  switch (type) {
    case DType::f32:
      return 0;
    case DType::f16:
      return 1;
    case DType::q4_0:
      return 2;
    case DType::q4_1:
      return 3;
    case DType::q8_0:
      return 7;
    case DType::q5_0:
      return 8;
    case DType::q5_1:
      return 9;
    case DType::q2_k:
      return 10;  // LLAMA_FTYPE_MOSTLY_Q2_K
    case DType::q3_k:
      return 11;  // LLAMA_FTYPE_MOSTLY_Q3_K_S
    case DType::q4_k:
      return 15;  // LLAMA_FTYPE_MOSTLY_Q4_K_M
    case DType::q5_k:
      return 17;  // LLAMA_FTYPE_MOSTLY_Q5_K_M
    case DType::q6_k:
      return 18;
    case DType::iq4_nl:
      return 25;
    case DType::iq4_xs:
      return 30;
    case DType::bf16:
      return 32;
    default:
      break;
  }
  std::string types;
  for (const DType t : model_file_types()) types += cat(types.empty() ? "" : ", ", dtype_name(t));
  fail(kWhere, "no llama.cpp file type for ", dtype_name(type), " (make-model writes ", types, ")");
}

std::vector<DType> model_file_types() {
  return {DType::f32,  DType::f16,  DType::bf16, DType::q4_0, DType::q4_1, DType::q5_0,
          DType::q5_1, DType::q8_0, DType::q2_k, DType::q3_k, DType::q4_k, DType::q5_k,
          DType::q6_k, DType::iq4_nl, DType::iq4_xs};
}

DType llama_tensor_type(DType file_type, bool is_output, int64_t cols) {
  (void)llama_file_type(file_type);  // rejects types make-model does not write
  DType t = file_type;
  // llama.cpp keeps the output matrix at 6 bits in every file of fewer bits per weight.
  const bool low_bits = dtype_is_quantized(file_type) && file_type != DType::q8_0;
  if (is_output && low_bits) t = DType::q6_k;
  if (dtype_block_elems(t) == ops::kQuantBlockK && cols % ops::kQuantBlockK != 0)
    t = row_fallback(t);
  if (cols % dtype_block_elems(t) != 0) t = DType::f16;
  return t;
}

std::map<DType, ModelPlan::TypeTotal> ModelPlan::totals_by_type() const {
  std::map<DType, TypeTotal> totals;
  for (const PlannedTensor& t : tensors) {
    TypeTotal& total = totals[t.dtype];
    ++total.tensors;
    total.parameters += static_cast<uint64_t>(t.shape.numel());
    total.bytes += t.bytes;
  }
  return totals;
}

const PlannedTensor* ModelPlan::find(std::string_view name) const {
  for (const PlannedTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

ModelPlan plan_model(const ModelShape& shape, DType file_type, uint64_t seed) {
  shape.validate();
  ModelPlan plan;
  plan.shape = shape;
  plan.file_type = file_type;
  const TokenizerData vocab =
      synthesize_bpe_vocab(static_cast<int32_t>(shape.vocab), shape.pre, seed);
  plan.metadata = model_metadata(shape, file_type, vocab);

  const LlamaConfig c = shape.config();
  auto matrix = [&](std::string name, int64_t rows, int64_t cols, bool is_output) {
    const DType t = llama_tensor_type(file_type, is_output, cols);
    plan.tensors.push_back({std::move(name), t, Shape{rows, cols},
                            static_cast<uint64_t>(rows) * dtype_bytes(t, cols), false});
  };
  // Experts' weights [experts, rows, cols], typed as one expert's matrix would be.
  auto experts = [&](std::string name, int64_t rows, int64_t cols) {
    const DType t = llama_tensor_type(file_type, false, cols);
    plan.tensors.push_back({std::move(name), t, Shape{c.experts, rows, cols},
                            static_cast<uint64_t>(c.experts * rows) * dtype_bytes(t, cols), false});
  };
  auto norm = [&](std::string name, int64_t size = 0) {
    const int64_t n = size > 0 ? size : c.hidden;
    plan.tensors.push_back({std::move(name), DType::f32, Shape{n}, static_cast<uint64_t>(n) * 4, true});
  };
  // llama.cpp's tensor order: embedding, the blocks, the final norm and the LM head.
  matrix("token_embd.weight", c.vocab_size, c.hidden, c.tied_output);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = cat("blk.", l, ".");
    norm(p + "attn_norm.weight");
    if (c.fused_qkv_tensor) {
      matrix(p + "attn_qkv.weight", c.q_dim() + 2 * c.kv_dim(), c.hidden, false);
    } else {
      matrix(p + "attn_q.weight", c.q_dim(), c.hidden, false);
      matrix(p + "attn_k.weight", c.kv_dim(), c.hidden, false);
      matrix(p + "attn_v.weight", c.kv_dim(), c.hidden, false);
    }
    if (c.qk_norm) {
      norm(p + "attn_q_norm.weight", c.qk_norm_whole ? c.q_dim() : c.head_dim);
      norm(p + "attn_k_norm.weight", c.qk_norm_whole ? c.kv_dim() : c.head_dim);
    }
    matrix(p + "attn_output.weight", c.hidden, c.q_dim(), false);
    if (c.post_norms) norm(p + "post_attention_norm.weight");
    norm(p + "ffn_norm.weight");
    if (c.moe()) {
      // llama.cpp keeps the router in f32.
      plan.tensors.push_back({p + "ffn_gate_inp.weight", DType::f32, Shape{c.experts, c.hidden},
                              static_cast<uint64_t>(c.experts * c.hidden) * 4, false});
      experts(p + "ffn_gate_exps.weight", c.expert_ffn, c.hidden);
      experts(p + "ffn_up_exps.weight", c.expert_ffn, c.hidden);
      experts(p + "ffn_down_exps.weight", c.hidden, c.expert_ffn);
    } else if (c.fused_gate_up_tensor) {
      matrix(p + "ffn_up.weight", 2 * c.ffn, c.hidden, false);
    } else {
      matrix(p + "ffn_gate.weight", c.ffn, c.hidden, false);
      matrix(p + "ffn_up.weight", c.ffn, c.hidden, false);
    }
    if (!c.moe()) matrix(p + "ffn_down.weight", c.hidden, c.ffn, false);
    if (c.post_norms) norm(p + "post_ffw_norm.weight");
  }
  norm("output_norm.weight");
  if (!c.tied_output) matrix("output.weight", c.vocab_size, c.hidden, true);

  uint64_t data = 0;
  for (const PlannedTensor& t : plan.tensors) {
    plan.parameters += static_cast<uint64_t>(t.shape.numel());
    plan.tensor_bytes += t.bytes;
    data += align_up(t.bytes, kAlignment);
  }
  plan.file_bytes = align_up(header_bytes(plan), kAlignment) + data;
  return plan;
}

MakeModelReport make_model(const ModelShape& shape, DType type, const std::filesystem::path& path,
                           const MakeModelOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  MakeModelReport report;
  report.plan = plan_model(shape, type, options.seed);
  const ModelPlan& plan = report.plan;

  GgufWriter writer(path);
  for (const auto& [key, value] : plan.metadata) writer.set(key, value);
  for (const PlannedTensor& t : plan.tensors) writer.add_tensor(t.name, t.dtype, t.shape);

  ThreadPool pool(options.threads);
  const int threads = pool.size();
  // Two slabs: the pool fills one while the other is written by an async task.
  std::vector<uint8_t> slabs[2];
  std::future<void> pending_write;
  int current = 0;
  uint64_t done_bytes = 0;

  for (const PlannedTensor& t : plan.tensors) {
    const int64_t rows = t.shape.rows();
    const int64_t cols = t.shape.cols();
    const uint64_t row_bytes = dtype_bytes(t.dtype, cols);
    const float scale =
        t.norm ? 0.1f : weight_scale(t.name == "token_embd.weight" ? shape.hidden : cols);
    const float offset = t.norm ? 1.0f : 0.0f;
    const uint64_t stream_base = mix64(options.seed ^ hash_name(t.name));
    const int64_t slab_rows = std::max<int64_t>(1, static_cast<int64_t>(kSlabBytes / row_bytes));

    for (int64_t first = 0; first < rows; first += slab_rows) {
      const int64_t count = std::min(slab_rows, rows - first);
      // The write in flight (if any) uses the other slab.
      std::vector<uint8_t>& slab = slabs[current];
      slab.resize(static_cast<size_t>(count) * row_bytes);
      const int64_t chunks = std::min<int64_t>(count, int64_t{threads} * 4);
      pool.parallel_for(static_cast<size_t>(chunks), [&](size_t chunk) {
        const int64_t begin = count * static_cast<int64_t>(chunk) / chunks;
        const int64_t end = count * static_cast<int64_t>(chunk + 1) / chunks;
        std::vector<float> values(static_cast<size_t>(cols));
        for (int64_t r = begin; r < end; ++r) {
          const uint64_t row = static_cast<uint64_t>(first + r);
          fill_uniform(values.data(), cols, mix64(stream_base + row * 0xD1B54A32D192ED03ull),
                       scale);
          if (offset != 0.0f) {
            for (float& v : values) v += offset;
          }
          ops::quantize(t.dtype, values.data(), cols,
                        slab.data() + static_cast<uint64_t>(r) * row_bytes);
        }
      });
      if (pending_write.valid()) pending_write.get();  // rethrows a write error
      pending_write = std::async(std::launch::async, [&writer, &slab] {
        writer.write_tensor_data(slab.data(), slab.size());
      });
      current = 1 - current;
      done_bytes += slab.size();
      if (options.progress) {
        options.progress(plan.tensor_bytes ? static_cast<double>(done_bytes) /
                                                 static_cast<double>(plan.tensor_bytes)
                                           : 1.0,
                         t.name);
      }
    }
  }
  if (pending_write.valid()) pending_write.get();
  writer.finish();

  std::error_code ec;
  report.file_bytes = std::filesystem::file_size(path, ec);
  check(!ec, kWhere, path.string(), ": cannot read the written file's size: ", ec.message());
  check(report.file_bytes == plan.file_bytes, kWhere, path.string(), ": wrote ", report.file_bytes,
        " bytes, planned ", plan.file_bytes);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace onepass::model
