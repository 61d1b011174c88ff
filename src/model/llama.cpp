#include "onepass/model/llama.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <climits>
#include <cstring>

#include "model/affine_relayout.h"
#include "onepass/core/error.h"
#include "onepass/ops/ops.h"
#include "onepass/ops/paged_attention.h"

namespace onepass::model {
namespace {

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

size_t tensor_bytes(DType type, int64_t rows, int64_t cols) {
  return static_cast<size_t>(rows) * dtype_bytes(type, cols);
}

// A tensor's shape as the model sees it: an MLX affine weight's packed u32 columns
// expanded to its input features.
Shape logical_shape(const HostTensor& t) {
  if (!t.affine || t.shape.ndim() < 1) return t.shape;
  Shape out = t.shape;
  out[out.ndim() - 1] *= 32 / static_cast<int64_t>(t.affine->bits);
  return out;
}

// Every tensor the configuration implies exists with the shape it implies, checked before
// anything is allocated: a file whose rows are shifted between Q and K (or gate and up),
// or with fewer blocks than its configuration, fails here naming the tensor.
void check_tensors(const ModelSource& source, const LlamaConfig& c) {
  auto expect = [&](const std::string& name, Shape expected, const char* meaning) {
    const HostTensor t = source.require(name);
    const Shape actual = logical_shape(t);
    check(actual == expected, "model", source.describe(), ": tensor '", source.file_name(name), "' has shape ",
          actual.str(), ", expected ", expected.str(), " ", meaning);
  };
  expect("token_embd.weight", Shape{c.vocab_size, c.hidden}, "[vocab, hidden]");
  expect("output_norm.weight", Shape{c.hidden}, "[hidden]");
  if (source.find("output.weight")) expect("output.weight", Shape{c.vocab_size, c.hidden}, "[vocab, hidden]");
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = cat("blk.", l, ".");
    expect(p + "attn_norm.weight", Shape{c.hidden}, "[hidden]");
    expect(p + "ffn_norm.weight", Shape{c.hidden}, "[hidden]");
    if (c.fused_qkv_tensor) {
      expect(p + "attn_qkv.weight", Shape{c.q_dim() + 2 * c.kv_dim(), c.hidden},
             "[(heads + 2 kv_heads) x head_dim, hidden]");
    } else {
      expect(p + "attn_q.weight", Shape{c.q_dim(), c.hidden}, "[heads x head_dim, hidden]");
      expect(p + "attn_k.weight", Shape{c.kv_dim(), c.hidden}, "[kv_heads x head_dim, hidden]");
      expect(p + "attn_v.weight", Shape{c.kv_dim(), c.hidden}, "[kv_heads x head_dim, hidden]");
    }
    expect(p + "attn_output.weight", Shape{c.hidden, c.q_dim()}, "[hidden, heads x head_dim]");
    if (c.moe()) {
      expect(p + "ffn_gate_inp.weight", Shape{c.experts, c.hidden}, "[experts, hidden] (the router)");
      expect(p + "ffn_gate_exps.weight", Shape{c.experts, c.expert_ffn, c.hidden}, "[experts, expert_ffn, hidden]");
      expect(p + "ffn_up_exps.weight", Shape{c.experts, c.expert_ffn, c.hidden}, "[experts, expert_ffn, hidden]");
      expect(p + "ffn_down_exps.weight", Shape{c.experts, c.hidden, c.expert_ffn}, "[experts, hidden, expert_ffn]");
    } else if (c.fused_gate_up_tensor) {
      expect(p + "ffn_up.weight", Shape{2 * c.ffn, c.hidden}, "[2 ffn (gate, then up), hidden]");
    } else {
      expect(p + "ffn_gate.weight", Shape{c.ffn, c.hidden}, "[ffn, hidden]");
      expect(p + "ffn_up.weight", Shape{c.ffn, c.hidden}, "[ffn, hidden]");
    }
    if (!c.moe()) expect(p + "ffn_down.weight", Shape{c.hidden, c.ffn}, "[hidden, ffn]");
    if (c.qk_norm && c.qk_norm_whole) {
      expect(p + "attn_q_norm.weight", Shape{c.q_dim()}, "[heads x head_dim] (over the whole Q)");
      expect(p + "attn_k_norm.weight", Shape{c.kv_dim()}, "[kv_heads x head_dim] (over the whole K)");
    } else if (c.qk_norm) {
      expect(p + "attn_q_norm.weight", Shape{c.head_dim}, "[head_dim]");
      expect(p + "attn_k_norm.weight", Shape{c.head_dim}, "[head_dim]");
    }
    if (c.post_norms) {
      expect(p + "post_attention_norm.weight", Shape{c.hidden}, "[hidden]");
      expect(p + "post_ffw_norm.weight", Shape{c.hidden}, "[hidden]");
    }
    if (c.qkv_bias) {
      expect(p + "attn_q.bias", Shape{c.q_dim()}, "[heads x head_dim]");
      expect(p + "attn_k.bias", Shape{c.kv_dim()}, "[kv_heads x head_dim]");
      expect(p + "attn_v.bias", Shape{c.kv_dim()}, "[kv_heads x head_dim]");
    }
  }
}

}  // namespace

Linear Linear::rows(int64_t first, int64_t count) const {
  Linear out = *this;
  out.weight = weight.rows_slice(first, count);
  if (affine) {
    out.scales = scales.rows_slice(first, count);
    out.biases = biases.rows_slice(first, count);
  }
  if (bias.view) {
    out.bias = TensorView(bias.view.slice(static_cast<size_t>(first) * 4, static_cast<size_t>(count) * 4), DType::f32,
                          Shape{count});
  }
  out.out_features = count;
  return out;
}

size_t Linear::bytes() const {
  size_t n = weight.span_bytes();
  if (affine) n += scales.span_bytes() + biases.span_bytes();
  if (bias.view) n += bias.span_bytes();
  return n;
}

// Activations and per-step inputs, allocated once for the largest batch.
struct LlamaModel::Buffers {
  int64_t max_batch = 0;
  BufferView step_host;  // i32: [0] kv_length, [1..1+B) tokens, [1+B..1+2B) positions
  BufferView step_dev;
  TensorView x, xn, q, k, v, attn, proj, gate, up, act;  // [B, *] f32
  TensorView qkv, gate_up;                               // decode: [1, q+2kv], [1, 2 ffn]
  TensorView logits;                                     // [1, vocab] f32
  TensorView next_token;                                 // i32 [1]
  TensorView history;  // i32 [context + 1]: token at each position, as fed on the device
  BufferView flash_scratch;
  TensorView rope_cos_sin;  // decode: f32 [2, rope_dims], the token's (cos, sin) per RoPE pair, per base
  TensorView all_logits;    // evaluate(): f32 [rows, vocab], allocated on first use
  // Mixture of experts (S = experts_used): the router's logits [B, experts], each token's
  // experts i32 [B, S] and their weights [B, S], the experts' gate, up and activation
  // [B * S, expert_ffn], their outputs [B * S, hidden], and matmul_id's scratch.
  TensorView router_logits, expert_ids, expert_weights, expert_gate, expert_up, expert_act, expert_out;
  BufferView expert_scratch;

  TensorView ids(int64_t n) const {
    return TensorView(step_dev.slice(4, static_cast<size_t>(n) * 4), DType::i32, Shape{n});
  }
  TensorView positions(int64_t n) const {
    return TensorView(step_dev.slice(static_cast<size_t>(1 + max_batch) * 4, static_cast<size_t>(n) * 4),
                      DType::i32, Shape{n});
  }
  TensorView kv_length() const { return TensorView(step_dev.slice(0, 4), DType::i32, Shape{1}); }

  // Batched steps (LoadOptions::sequences): the inputs of a step of R rows, i32, packed for
  // R so that a step copies only its own bucket's bytes: ids [R], positions [R], slots
  // [R], lengths [R], logit rows [R], block table [R, max_blocks].
  int64_t max_blocks = 0;
  BufferView batch_host, batch_dev;
  TensorView step_logits;  // f32 [sequences, vocab]
  TensorView step_argmax;  // i32 [sequences]
  // Sampled steps: for L logit rows, packed for L, ops::SampleParams [L] then penalty
  // entries [L, sample_penalties]; and the drawn tokens.
  int64_t sample_penalties = 0;
  BufferView sample_host, sample_dev;
  TensorView step_tokens;  // i32 [sequences]
  size_t sample_bytes(int64_t logit_rows) const {
    return static_cast<size_t>(logit_rows) *
           (sizeof(ops::SampleParams) + static_cast<size_t>(sample_penalties) * sizeof(ops::SamplePenalty));
  }
  TensorView sample_params(int64_t logit_rows) const {
    const auto bytes = static_cast<int64_t>(sizeof(ops::SampleParams));
    return TensorView(sample_dev.slice(0, static_cast<size_t>(logit_rows * bytes)), DType::u8, Shape{logit_rows, bytes});
  }
  TensorView sample_penalty_rows(int64_t logit_rows) const {
    if (sample_penalties == 0) return TensorView{};
    const size_t offset = static_cast<size_t>(logit_rows) * sizeof(ops::SampleParams);
    return TensorView(sample_dev.slice(offset, sample_bytes(logit_rows) - offset), DType::i32,
                      Shape{logit_rows, 2 * sample_penalties});
  }
  static constexpr int64_t kBatchFields = 5;
  size_t batch_bytes(int64_t rows) const { return static_cast<size_t>(rows * (kBatchFields + max_blocks)) * 4; }
  TensorView batch_field(int64_t rows, int64_t field) const {
    return TensorView(batch_dev.slice(static_cast<size_t>(field * rows) * 4, static_cast<size_t>(rows) * 4),
                      DType::i32, Shape{rows});
  }
  TensorView block_table(int64_t rows) const {
    return TensorView(batch_dev.slice(static_cast<size_t>(kBatchFields * rows) * 4,
                                      static_cast<size_t>(rows * max_blocks) * 4),
                      DType::i32, Shape{rows, max_blocks});
  }
};

LlamaModel::LlamaModel(std::shared_ptr<Backend> backend, const ModelSource& source, const LoadOptions& options)
    : backend_(std::move(backend)),
      options_(options),
      config_(source.config()),
      source_name_(source.describe()),
      executor_(backend_) {
  config_.validate(source_name_);
  check(options_.context > 0, "model", "context must be positive, got ", options_.context);
  check(options_.max_batch > 0, "model", "max batch must be positive, got ", options_.max_batch);
  check(options_.sequences >= 0 && options_.kv_blocks >= 0, "model", "sequences and kv_blocks must not be negative, got ",
        options_.sequences, " and ", options_.kv_blocks);
  check(options_.kv_type == DType::f16 || options_.kv_type == DType::f32, "model",
        "KV cache type must be f16 or f32, got ", dtype_name(options_.kv_type));
  try {
    load_weights(source);
  } catch (const Error& e) {
    // A weight the file gets wrong: name the file, as the checks against the config do.
    if (e.detail().find(source_name_) != std::string::npos) throw;
    fail(e.where(), source_name_, ": ", e.detail());
  }
  warm_up_library();
}

void LlamaModel::warm_up_library() {
  // The first product of many rows may set up a library (cuBLAS on CUDA: ~45 ms): pay it
  // while loading instead of in the first prompt's prefill. One product of the largest
  // prefill chunk, on activation buffers whose contents mean nothing yet; not on the CPU,
  // where it would only cost a real product's time.
  const Buffers& b = *buffers_;
  if (backend_->kind() == BackendKind::cpu || layers_.empty()) return;
  const Linear& o = layers_.front().attn_output;
  if (o.affine || b.max_batch <= ops::kMatmulMvMaxRows) return;
  GraphSession s = executor_.begin();
  ops::matmul(s, b.attn.rows_slice(0, b.max_batch), o.weight, b.proj.rows_slice(0, b.max_batch));
  s.finish();
}

LlamaModel::~LlamaModel() = default;

void LlamaModel::load_weights(const ModelSource& source) {
  const LlamaConfig& c = config_;
  Backend& b = *backend_;
  check_tensors(source, c);
  // Progress by bytes uploaded.
  size_t total = 0;
  auto count = [&](std::string_view name) {
    if (auto t = source.find(name)) total += t->bytes;
  };
  count("token_embd.weight");
  count("output.weight");
  for (int64_t l = 0; l < c.layers; ++l) {
    for (const char* n : {"attn_q", "attn_k", "attn_v", "attn_qkv", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
                          "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}) {
      count(cat("blk.", l, ".", n, ".weight"));
    }
  }
  size_t done = 0;
  auto report = [&](const std::string& name, size_t bytes) {
    done += bytes;
    if (options_.progress) options_.progress(total ? static_cast<double>(done) / static_cast<double>(total) : 1.0, name);
  };

  auto upload = [&](const HostTensor& t) {
    check(t.parts.empty(), "model", "tensor '", t.name, "' is stored in ", t.parts.size(),
          " parts, expected one tensor");
    TensorView v = b.alloc_tensor(t.dtype, t.shape);
    check(t.bytes == v.view.size(), "model", "tensor '", t.name, "' has ", t.bytes, " bytes, expected ", v.view.size(),
          " for ", dtype_name(t.dtype), t.shape.str());
    v.view.write(t.data, t.bytes);
    source.release(t);  // the copy is on the backend: the file's pages need not stay resident
    return v;
  };
  // Experts stored one tensor each, stacked on the backend one expert at a time: the host
  // holds at most one expert's re-laid copy, and each expert's pages go back once written.
  auto upload_experts = [&](const HostTensor& t) {
    const HostTensor& first = t.parts.front();
    check(first.shape.ndim() == 2 && t.shape == Shape({static_cast<int64_t>(t.parts.size()), first.shape[0],
                                                         first.shape[1]}),
          "model", "tensor '", t.name, "' has shape ", t.shape.str(), " but ", t.parts.size(), " parts of ",
          first.shape.str(), ", expected matrices stacked");
    auto same_format = [](const HostTensor& x, const HostTensor& y) {
      return x.affine.has_value() == y.affine.has_value() &&
             (!x.affine || (x.affine->bits == y.affine->bits && x.affine->group_size == y.affine->group_size &&
                            x.affine->scale_type == y.affine->scale_type));
    };
    for (const HostTensor& part : t.parts) {
      check(part.dtype == first.dtype && part.shape == first.shape && same_format(part, first), "model",
            "tensor '", part.name, "' is ", dtype_name(part.dtype), part.shape.str(), ", but '", first.name, "' is ",
            dtype_name(first.dtype), first.shape.str(), "; expected every part of '", t.name,
            "' of one type and shape");
    }
    const RelayoutForms forms = first.affine ? common_relayout_forms(t.parts) : RelayoutForms{};
    TensorView v;
    size_t offset = 0;
    for (size_t e = 0; e < t.parts.size(); ++e) {
      const HostTensor& part = t.parts[e];
      RelaidWeight relaid;
      HostTensor slice = part;
      if (part.affine) {
        relaid = relayout_affine(part, forms);
        slice = HostTensor{.name = part.name, .dtype = relaid.dtype, .shape = relaid.shape,
                           .data = relaid.bytes.data(), .bytes = relaid.bytes.size()};
      }
      if (e == 0) v = b.alloc_tensor(slice.dtype, Shape{t.shape[0], slice.shape[0], slice.shape[1]});
      const size_t slice_bytes = v.view.size() / t.parts.size();
      check(slice.bytes == slice_bytes && slice.dtype == v.dtype, "model", "tensor '", part.name, "' has ",
            slice.bytes, " bytes of ", dtype_name(slice.dtype), ", expected ", slice_bytes, " of ",
            dtype_name(v.dtype), " (one expert of '", t.name, "')");
      v.view.write(slice.data, slice.bytes, offset);
      offset += slice.bytes;
      source.release(part);
    }
    return v;
  };
  auto vector_f32 = [&](const std::string& name, int64_t n) {
    HostTensor t = source.require(name);
    check(t.dtype == DType::f32 && t.shape.numel() == n, "model", "tensor '", name, "' is ", dtype_name(t.dtype),
          t.shape.str(), ", expected f32 with ", n, " values");
    return upload(t).reshaped(Shape{n});
  };
  // Norm weights with the family's offset added (Gemma's HF checkpoints store w - 1).
  auto norm_f32 = [&](const std::string& name, int64_t n) {
    TensorView v = vector_f32(name, n);
    if (c.norm_weight_offset != 0.0f) {
      std::vector<float> w(static_cast<size_t>(n));
      v.view.read(w.data(), w.size() * 4);
      for (float& x : w) x += c.norm_weight_offset;
      v.view.write(w);
    }
    return v;
  };
  // Rows of several tensors with the same column count and format, in one buffer: one
  // matrix product instead of several (Q/K/V, gate/up).
  auto linear = [&](const std::vector<std::string>& names, int64_t in, const std::vector<std::string>& bias_names) {
    std::vector<HostTensor> parts;
    for (const std::string& n : names) parts.push_back(source.require(n));
    int64_t out = 0;
    for (const HostTensor& t : parts) {
      check(t.parts.empty(), "model", "tensor '", t.name, "' is stored in ", t.parts.size(),
            " parts, expected one tensor");
      check(t.shape.ndim() == 2 && t.shape[1] * (t.affine ? 32 / t.affine->bits : 1) == in, "model", "tensor '", t.name,
            "' has shape ", t.shape.str(), ", expected [*, ", in, "]");
      check(t.dtype == parts[0].dtype && t.affine.has_value() == parts[0].affine.has_value(), "model",
            "tensors '", parts[0].name, "' and '", t.name, "' differ in type, expected one type");
      out += t.shape[0];
    }
    Linear l;
    l.in_features = in;
    l.out_features = out;
    const HostTensor& first = parts[0];
    l.weight = b.alloc_tensor(first.dtype, Shape{out, first.shape[1]});
    size_t offset = 0;
    for (const HostTensor& t : parts) {
      l.weight.view.write(t.data, t.bytes, offset);
      offset += t.bytes;
      report(t.name, t.bytes);
    }
    if (first.affine) {
      l.affine = first.affine;
      const int64_t groups = in / first.affine->group_size;
      l.scales = b.alloc_tensor(first.affine->scale_type, Shape{out, groups});
      l.biases = b.alloc_tensor(first.affine->scale_type, Shape{out, groups});
      size_t at = 0;
      for (const HostTensor& t : parts) {
        const size_t n = tensor_bytes(first.affine->scale_type, t.shape[0], groups);
        l.scales.view.write(t.scales, n, at);
        l.biases.view.write(t.biases, n, at);
        at += n;
      }
    }
    for (const HostTensor& t : parts) source.release(t);
    if (!bias_names.empty()) {
      l.bias = b.alloc_tensor(DType::f32, Shape{out});
      size_t at = 0;
      for (size_t i = 0; i < bias_names.size(); ++i) {
        HostTensor t = source.require(bias_names[i]);
        check(t.dtype == DType::f32 && t.shape.numel() == parts[i].shape[0], "model", "bias '", t.name, "' is ",
              dtype_name(t.dtype), t.shape.str(), ", expected f32 [", parts[i].shape[0], "]");
        l.bias.view.write(t.data, t.bytes, at);
        source.release(t);
        at += t.bytes;
      }
    }
    weight_bytes_ += l.bytes();
    return l;
  };
  // One fused layer when the parts share a format, else separate ones (llama.cpp's mixed
  // quantisations give V another type than Q and K).
  auto fused_or_separate = [&](const std::vector<std::string>& names, int64_t in,
                               const std::vector<std::string>& bias_names) {
    bool same = true;
    const HostTensor first = source.require(names[0]);
    for (const std::string& n : names) {
      const HostTensor t = source.require(n);
      same = same && t.dtype == first.dtype && t.affine.has_value() == first.affine.has_value();
    }
    std::vector<Linear> out;
    if (same) {
      out.push_back(linear(names, in, bias_names));
    } else {
      for (size_t i = 0; i < names.size(); ++i) {
        out.push_back(linear({names[i]}, in, bias_names.empty() ? std::vector<std::string>{} : std::vector{bias_names[i]}));
      }
    }
    return out;
  };

  const HostTensor embd = source.require("token_embd.weight");
  check(embd.shape.ndim() == 2 && embd.shape[0] == c.vocab_size && embd.shape[1] == c.hidden && !embd.affine, "model",
        "token_embd.weight has shape ", embd.shape.str(), ", expected [", c.vocab_size, ", ", c.hidden, "]");
  token_embd_ = upload(embd);
  report(embd.name, embd.bytes);
  output_norm_ = norm_f32("output_norm.weight", c.hidden);
  if (source.find("output.weight")) {
    output_ = linear({"output.weight"}, c.hidden, {});
  } else {  // tied: the LM head is the token embedding
    output_.weight = token_embd_;
    output_.in_features = c.hidden;
    output_.out_features = c.vocab_size;
    weight_bytes_ += token_embd_.span_bytes();
  }
  if (auto factors = source.rope_freq_factors()) {
    check(static_cast<int64_t>(factors->size()) == c.rope_dims / 2, "model", "tensor 'rope_freqs.weight' has ",
          factors->size(), " values, expected rope_dims / 2 = ", c.rope_dims / 2);
    rope_factors_ = b.alloc_tensor(DType::f32, Shape{c.rope_dims / 2});
    rope_factors_.view.write(*factors);
  }

  const int64_t ctx = options_.context;
  const size_t cache_bytes = tensor_bytes(options_.kv_type, c.kv_heads * ctx, c.head_dim);
  BufferView caches = b.alloc(cache_bytes * 2 * static_cast<size_t>(c.layers));
  layers_.resize(static_cast<size_t>(c.layers));
  for (int64_t l = 0; l < c.layers; ++l) {
    LayerWeights& w = layers_[static_cast<size_t>(l)];
    const std::string p = cat("blk.", l, ".");
    w.attn_norm = norm_f32(p + "attn_norm.weight", c.hidden);
    w.ffn_norm = norm_f32(p + "ffn_norm.weight", c.hidden);
    if (c.qk_norm) {
      w.q_norm = norm_f32(p + "attn_q_norm.weight", c.qk_norm_whole ? c.q_dim() : c.head_dim);
      w.k_norm = norm_f32(p + "attn_k_norm.weight", c.qk_norm_whole ? c.kv_dim() : c.head_dim);
    }
    if (c.post_norms) {
      w.post_attn_norm = norm_f32(p + "post_attention_norm.weight", c.hidden);
      w.post_ffn_norm = norm_f32(p + "post_ffw_norm.weight", c.hidden);
    }
    if (c.fused_qkv_tensor) {
      w.qkv_parts = {linear({p + "attn_qkv.weight"}, c.hidden, {})};
    } else {
      std::vector<std::string> bias;
      if (c.qkv_bias) bias = {p + "attn_q.bias", p + "attn_k.bias", p + "attn_v.bias"};
      w.qkv_parts = fused_or_separate({p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"}, c.hidden, bias);
    }
    w.attn_output = linear({p + "attn_output.weight"}, c.q_dim(), {});
    if (c.moe()) {
      w.router = linear({p + "ffn_gate_inp.weight"}, c.hidden, {});
      // A decoded token reads experts_used of the experts' weights.
      auto experts = [&](const std::string& name) {
        const HostTensor t = source.require(name);
        TensorView v;
        if (!t.parts.empty()) {
          v = upload_experts(t);
        } else if (t.affine) {  // matmul_id takes GGUF weight types: MLX's groups are re-laid as one
          const RelaidWeight relaid = relayout_affine(t);
          v = upload(HostTensor{.name = t.name, .dtype = relaid.dtype, .shape = relaid.shape,
                                .data = relaid.bytes.data(), .bytes = relaid.bytes.size()});
          source.release(t);
        } else {
          v = upload(t);
        }
        report(t.name, t.bytes);
        weight_bytes_ += v.span_bytes() / static_cast<size_t>(c.experts) * static_cast<size_t>(c.experts_used);
        return v;
      };
      w.gate_exps = experts(p + "ffn_gate_exps.weight");
      w.up_exps = experts(p + "ffn_up_exps.weight");
      w.down_exps = experts(p + "ffn_down_exps.weight");
    } else {
      if (c.fused_gate_up_tensor) {
        w.gate_up_parts = {linear({p + "ffn_up.weight"}, c.hidden, {})};
      } else {
        w.gate_up_parts = fused_or_separate({p + "ffn_gate.weight", p + "ffn_up.weight"}, c.hidden, {});
      }
      w.down = linear({p + "ffn_down.weight"}, c.ffn, {});
    }
    const size_t base = static_cast<size_t>(l) * 2 * cache_bytes;
    w.k_cache = TensorView(caches.slice(base, cache_bytes), options_.kv_type, Shape{c.kv_heads, ctx, c.head_dim});
    w.v_cache = TensorView(caches.slice(base + cache_bytes, cache_bytes), options_.kv_type,
                           Shape{c.kv_heads, ctx, c.head_dim});
  }

  auto buffers = std::make_unique<Buffers>();
  // One sequence's rows never exceed the context; a batched step holds a row per sequence,
  // whatever the context.
  const int64_t batch = std::min(options_.max_batch, std::max(ctx, options_.sequences));
  buffers->max_batch = batch;
  const size_t step_bytes = static_cast<size_t>(1 + 2 * batch) * 4;
  buffers->step_host = b.alloc_host_visible(step_bytes);
  buffers->step_dev = b.alloc(step_bytes);
  std::memset(buffers->step_host.data(), 0, step_bytes);
  auto act = [&](int64_t rows, int64_t cols) { return b.alloc_tensor(DType::f32, Shape{rows, cols}); };
  buffers->x = act(batch, c.hidden);
  buffers->xn = act(batch, c.hidden);
  buffers->q = act(batch, c.q_dim());
  buffers->k = act(batch, c.kv_dim());
  buffers->v = act(batch, c.kv_dim());
  buffers->attn = act(batch, c.q_dim());
  buffers->proj = act(batch, c.hidden);
  buffers->gate = act(batch, c.ffn);
  buffers->up = act(batch, c.ffn);
  buffers->act = act(batch, c.ffn);
  buffers->qkv = act(1, c.q_dim() + 2 * c.kv_dim());
  buffers->gate_up = act(1, 2 * c.ffn);
  buffers->logits = act(1, c.vocab_size);
  buffers->next_token = b.alloc_tensor(DType::i32, Shape{1});
  buffers->history = b.alloc_tensor(DType::i32, Shape{ctx + 1});
  buffers->flash_scratch = b.alloc(ops::flash_decode_scratch_bytes(c.heads, ctx, c.head_dim));
  // One (cos, sin) table per RoPE base (local and global layers may differ).
  buffers->rope_cos_sin = b.alloc_tensor(DType::f32, Shape{2, c.rope_dims});
  if (c.moe()) {
    const int64_t pairs = batch * c.experts_used;
    buffers->router_logits = act(batch, c.experts);
    buffers->expert_ids = b.alloc_tensor(DType::i32, Shape{batch, c.experts_used});
    buffers->expert_weights = act(batch, c.experts_used);
    buffers->expert_gate = act(pairs, c.expert_ffn);
    buffers->expert_up = act(pairs, c.expert_ffn);
    buffers->expert_act = act(pairs, c.expert_ffn);
    buffers->expert_out = act(pairs, c.hidden);
    buffers->expert_scratch = b.alloc(ops::matmul_id_scratch_bytes(batch, c.experts_used, c.experts));
  }
  buffers_ = std::move(buffers);
  source.release_all();  // every weight is on the backend now
  logits_.resize(static_cast<size_t>(c.vocab_size));
  if (options_.sequences > 0) allocate_pool();
}

// The paged KV pool of the batched steps, its caches and the step's inputs and outputs.
void LlamaModel::allocate_pool() {
  const LlamaConfig& c = config_;
  Backend& b = *backend_;
  const int64_t block_size = options_.kv_block_size;
  check(block_size > 0, "model", "kv_block_size must be positive, got ", block_size);
  const int64_t per_sequence = (options_.context + block_size - 1) / block_size;
  const int64_t blocks = options_.kv_blocks > 0 ? options_.kv_blocks : options_.sequences * per_sequence;
  pool_ = std::make_unique<KvBlockPool>(blocks, block_size, options_.context);
  const int64_t slots = blocks * block_size;
  const size_t cache_bytes = tensor_bytes(options_.kv_type, c.kv_heads * slots, c.head_dim);
  BufferView caches = b.alloc(cache_bytes * 2 * static_cast<size_t>(c.layers));
  for (size_t l = 0; l < layers_.size(); ++l) {
    const size_t base = l * 2 * cache_bytes;
    layers_[l].k_pool =
        TensorView(caches.slice(base, cache_bytes), options_.kv_type, Shape{c.kv_heads, slots, c.head_dim});
    layers_[l].v_pool = TensorView(caches.slice(base + cache_bytes, cache_bytes), options_.kv_type,
                                   Shape{c.kv_heads, slots, c.head_dim});
  }
  Buffers& buf = *buffers_;
  buf.max_blocks = pool_->max_blocks();
  const size_t bytes = buf.batch_bytes(buf.max_batch);
  buf.batch_host = b.alloc_host_visible(bytes);
  buf.batch_dev = b.alloc(bytes);
  std::memset(buf.batch_host.data(), 0, bytes);
  buf.step_logits = b.alloc_tensor(DType::f32, Shape{options_.sequences, c.vocab_size});
  buf.step_argmax = b.alloc_tensor(DType::i32, Shape{options_.sequences});
  check(options_.sample_penalties >= 0 && options_.sample_penalties <= ops::kSampleMaxPenalties, "model",
        "sample_penalties must be in 0..", ops::kSampleMaxPenalties, ", got ", options_.sample_penalties);
  buf.sample_penalties = options_.sample_penalties;
  const size_t sample_bytes = buf.sample_bytes(options_.sequences);
  buf.sample_host = b.alloc_host_visible(sample_bytes);
  buf.sample_dev = b.alloc(sample_bytes);
  std::memset(buf.sample_host.data(), 0, sample_bytes);
  buf.step_tokens = b.alloc_tensor(DType::i32, Shape{options_.sequences});
}

KvBlockPool& LlamaModel::kv_pool() {
  check(pool_ != nullptr, "model", "no paged KV pool: load the model with LoadOptions::sequences > 0");
  return *pool_;
}

const KvBlockPool& LlamaModel::kv_pool() const {
  check(pool_ != nullptr, "model", "no paged KV pool: load the model with LoadOptions::sequences > 0");
  return *pool_;
}

int64_t LlamaModel::max_step_rows() const { return buffers_->max_batch; }

size_t LlamaModel::kv_bytes_read(int64_t kv_length) const {
  return 2 * static_cast<size_t>(config_.layers) * tensor_bytes(options_.kv_type, config_.kv_heads * kv_length,
                                                                 config_.head_dim);
}

size_t LlamaModel::decode_dispatches() const {
  // The steady decode step: fed on the device once decode_greedy_run has run.
  const CapturedGraph* g = fed_decode_graph_ ? fed_decode_graph_.get() : decode_graph_.get();
  return g ? g->stats().dispatches : 0;
}

namespace {

void run_linear(GraphSession& s, const TensorView& x, const Linear& l, const TensorView& out) {
  if (l.affine) {
    ops::matmul_affine(s, x, l.weight, l.scales, l.biases, out, *l.affine);
  } else {
    ops::matmul(s, x, l.weight, out);
  }
  if (l.bias.view) ops::add(s, out, TensorView(l.bias.view, DType::f32, Shape{1, l.out_features}), out);
}

// Runs a list of row-parts (fused or separate) writing consecutive column ranges of
// `out` ([T, total]); with one fused part that is one product.
void run_parts(GraphSession& s, const TensorView& x, const std::vector<Linear>& parts, const TensorView& out) {
  int64_t col = 0;
  for (const Linear& l : parts) {
    const size_t offset = static_cast<size_t>(col) * 4;
    TensorView cols(out.view.slice_from(offset), DType::f32, Shape{out.rows(), l.out_features}, out.row_stride);
    run_linear(s, x, l, cols);
    col += l.out_features;
  }
}

}  // namespace

// The mixture-of-experts FFN of n tokens, on the device: the router's logits choose each
// token's experts and weights, every (token, expert) pair runs that expert's gated FFN,
// and the pairs' outputs are summed with the weights into out [n, hidden].
void LlamaModel::emit_experts(GraphSession& s, const LayerWeights& w, int64_t n, const TensorView& xn,
                              const TensorView& out) {
  const LlamaConfig& c = config_;
  const Buffers& b = *buffers_;
  const int64_t slots = c.experts_used;
  const int64_t pairs = n * slots;
  const TensorView logits = b.router_logits.rows_slice(0, n);
  const TensorView ids = b.expert_ids.rows_slice(0, n);
  const TensorView weights = b.expert_weights.rows_slice(0, n);
  const TensorView gate = b.expert_gate.rows_slice(0, pairs);
  const TensorView up = b.expert_up.rows_slice(0, pairs);
  const TensorView act = b.expert_act.rows_slice(0, pairs);
  const TensorView y = b.expert_out.rows_slice(0, pairs);
  run_linear(s, xn, w.router, logits);
  ops::moe_route(s, logits, ids, weights,
                 c.expert_weighting == ExpertWeighting::softmax_all ? ops::MoeWeighting::softmax_all
                                                                    : ops::MoeWeighting::softmax_selected);
  ops::MatmulIdParams shared{.n_experts = static_cast<int32_t>(c.experts), .slots = static_cast<int32_t>(slots)};
  ops::matmul_id(s, xn, w.gate_exps, ids, gate, b.expert_scratch, shared);
  ops::matmul_id(s, xn, w.up_exps, ids, up, b.expert_scratch, shared);
  switch (c.activation) {
    case FfnActivation::silu:
      ops::silu_mul(s, gate, up, act);
      break;
    case FfnActivation::gelu_tanh:
      ops::gelu_mul(s, gate, up, act);
      break;
  }
  ops::MatmulIdParams per_slot = shared;
  per_slot.per_slot_input = true;
  ops::matmul_id(s, act, w.down_exps, ids, y, b.expert_scratch, per_slot);
  ops::moe_combine(s, y, weights, out);
}

void LlamaModel::emit_forward(GraphSession& s, int64_t n, bool decode_step, bool fed) {
  emit(s, n, decode_step, fed, false);
}

void LlamaModel::emit(GraphSession& s, int64_t n, bool decode_step, bool fed, bool all_logits,
                      int64_t step_logit_rows, bool step_sample) {
  const LlamaConfig& c = config_;
  const Buffers& b = *buffers_;
  const bool paged = step_logit_rows > 0;
  check(n >= 1 && n <= b.max_batch, "model", "batch of ", n, " tokens (1..", b.max_batch, ")");
  check(!paged || (pool_ && !decode_step && !all_logits && step_logit_rows <= std::min(n, b.step_logits.rows())),
        "model", "a batched step of ", n, " rows with ", step_logit_rows, " logit rows");
  check(!decode_step || n == 1, "model", "a decode step takes one token");
  check(!fed || decode_step, "model", "only a decode step takes its inputs from the previous one");
  check(!all_logits || (!decode_step && n <= b.all_logits.rows()), "model", "all-position logits of ", n,
        " tokens (a prefill chunk of at most ", b.all_logits.rows(), ")");
  const int64_t hd = c.head_dim;
  if (paged) {
    ops::copy_bytes(s, b.batch_host.slice(0, b.batch_bytes(n)), b.batch_dev.slice(0, b.batch_bytes(n)));
  } else if (!fed) {
    ops::copy_bytes(s, b.step_host, b.step_dev);
  }
  const TensorView ids = paged ? b.batch_field(n, 0) : b.ids(n);
  const TensorView positions = paged ? b.batch_field(n, 1) : b.positions(n);
  const TensorView x = b.x.rows_slice(0, n);
  const TensorView xn = b.xn.rows_slice(0, n);
  const TensorView attn = b.attn.rows_slice(0, n);
  const TensorView proj = b.proj.rows_slice(0, n);
  const TensorView act = b.act.rows_slice(0, n);
  ops::embedding(s, token_embd_, ids, x);
  if (c.embedding_scale != 1.0f) ops::scale(s, x, c.embedding_scale, x);

  ops::RopeParams rope;
  rope.layout = c.rope_neox ? ops::RopeLayout::neox : ops::RopeLayout::normal;
  rope.rotary_dims = static_cast<int32_t>(c.rope_dims);
  rope.freq_scale = c.rope_freq_scale;
  rope.freq_factors = rope_factors_;
  ops::AttentionParams attention;
  attention.scale = c.attention_scale_or_default();
  attention.softcap = c.attn_softcap;
  attention.n_head = static_cast<int32_t>(c.heads);
  attention.n_kv_head = static_cast<int32_t>(c.kv_heads);
  attention.head_dim = static_cast<int32_t>(hd);

  // Decode: the first layer of each RoPE base stores the token's (cos, sin) per pair in
  // that base's row, the later ones load it (powf and sincosf once per token and base).
  bool cos_sin_stored[2] = {false, false};
  int64_t li = 0;  // layer index
  for (const LayerWeights& w : layers_) {
    const bool local = c.layer_is_local(li);
    rope.theta = c.layer_rope_theta(li);
    // Linear RoPE scaling stretches the global layers only where local layers have their own
    // base (Gemma 3: factor 8 on the global layers of the 4B and larger models).
    rope.freq_scale = local && c.rope_theta_local > 0 ? 1.0f : c.rope_freq_scale;
    attention.window = local ? static_cast<int32_t>(std::min<int64_t>(c.sliding_window, INT32_MAX)) : 0;
    ops::rms_norm(s, x, w.attn_norm, xn, c.norm_eps);
    TensorView q, k, v;
    if (decode_step) {
      // One token: Q, K and V are consecutive slices of one product's output.
      run_parts(s, xn, w.qkv_parts, b.qkv);
      q = TensorView(b.qkv.view.slice(0, static_cast<size_t>(c.q_dim()) * 4), DType::f32, Shape{1, c.heads, hd});
      k = TensorView(b.qkv.view.slice(static_cast<size_t>(c.q_dim()) * 4, static_cast<size_t>(c.kv_dim()) * 4),
                     DType::f32, Shape{1, c.kv_heads, hd});
      v = TensorView(b.qkv.view.slice(static_cast<size_t>(c.q_dim() + c.kv_dim()) * 4, static_cast<size_t>(c.kv_dim()) * 4),
                     DType::f32, Shape{1, c.kv_heads, hd});
    } else {
      // A batch: separate products into contiguous buffers (rows of the fused weight).
      const TensorView* outs[3] = {&b.q, &b.k, &b.v};
      std::vector<Linear> split;
      for (const Linear& part : w.qkv_parts) {
        if (w.qkv_parts.size() == 1) {
          split = {part.rows(0, c.q_dim()), part.rows(c.q_dim(), c.kv_dim()), part.rows(c.q_dim() + c.kv_dim(), c.kv_dim())};
        } else {
          split.push_back(part);
        }
      }
      for (size_t i = 0; i < 3; ++i) run_linear(s, xn, split[i], outs[i]->rows_slice(0, n));
      q = b.q.rows_slice(0, n).reshaped(Shape{n, c.heads, hd});
      k = b.k.rows_slice(0, n).reshaped(Shape{n, c.kv_heads, hd});
      v = b.v.rows_slice(0, n).reshaped(Shape{n, c.kv_heads, hd});
    }
    if (c.qk_norm && c.qk_norm_whole) {  // over the whole Q and K of each token, in place
      ops::rms_norm(s, q.reshaped(Shape{n, c.q_dim()}), w.q_norm, q.reshaped(Shape{n, c.q_dim()}), c.norm_eps);
      ops::rms_norm(s, k.reshaped(Shape{n, c.kv_dim()}), w.k_norm, k.reshaped(Shape{n, c.kv_dim()}), c.norm_eps);
    } else if (c.qk_norm && !options_.fused_ops) {
      // Per head, in place (fused: inside rope_kv_write).
      ops::rms_norm(s, q.reshaped(Shape{n * c.heads, hd}), w.q_norm, q.reshaped(Shape{n * c.heads, hd}), c.norm_eps);
      ops::rms_norm(s, k.reshaped(Shape{n * c.kv_heads, hd}), w.k_norm, k.reshaped(Shape{n * c.kv_heads, hd}),
                    c.norm_eps);
    }
    if (paged && !options_.fused_ops) {
      // RoPE at the tokens' positions; K and V into the pool at their slots.
      ops::rope(s, q, q, positions, rope);
      ops::rope(s, k, k, positions, rope);
      ops::kv_write(s, k, w.k_pool, b.batch_field(n, 2));
      ops::kv_write(s, v, w.v_pool, b.batch_field(n, 2));
    } else if (paged) {
      ops::RopeParams layer_rope = rope;
      if (c.qk_norm && !c.qk_norm_whole) {
        layer_rope.q_norm = w.q_norm;
        layer_rope.k_norm = w.k_norm;
        layer_rope.qk_norm_eps = c.norm_eps;
      }
      ops::rope_kv_write(s, q, k, v, w.k_pool, w.v_pool, positions, layer_rope, b.batch_field(n, 2));
    } else if (options_.fused_ops) {
      ops::RopeParams layer_rope = rope;
      if (decode_step) {
        const size_t base = rope.theta == c.rope_theta ? 0 : 1;
        layer_rope.cos_sin = b.rope_cos_sin.rows_slice(static_cast<int64_t>(base), 1).reshaped(Shape{c.rope_dims});
        layer_rope.cos_sin_use = cos_sin_stored[base] ? ops::RopeCosSin::load : ops::RopeCosSin::store;
        cos_sin_stored[base] = true;
      }
      if (c.qk_norm && !c.qk_norm_whole) {
        layer_rope.q_norm = w.q_norm;
        layer_rope.k_norm = w.k_norm;
        layer_rope.qk_norm_eps = c.norm_eps;
      }
      ops::rope_kv_write(s, q, k, v, w.k_cache, w.v_cache, positions, layer_rope);
    } else {
      ops::rope(s, q, q, positions, rope);
      ops::rope(s, k, k, positions, rope);
      ops::kv_write(s, k, w.k_cache, positions);
      ops::kv_write(s, v, w.v_cache, positions);
    }
    if (paged) {
      ops::paged_attention(s, q, w.k_pool, w.v_pool, b.block_table(n), b.batch_field(n, 3),
                           attn.reshaped(Shape{n, c.heads, hd}), pool_->block_size(), attention);
    } else if (decode_step) {
      // The attention's DRAM traffic is small: it requests the start of the gate/up
      // weights into L2 meanwhile (LoadOptions::l2_prefetch_bytes).
      BufferView prefetch;
      if (options_.l2_prefetch_bytes > 0 && !w.gate_up_parts.empty()) {
        const BufferView& gate_up = w.gate_up_parts.front().weight.view;
        prefetch = gate_up.slice(0, std::min(gate_up.size(), static_cast<size_t>(options_.l2_prefetch_bytes)));
      }
      // No dispatch of a decode step writes a cache row but the token's own, kv_length - 1
      // (rope_kv_write, folded into the Q/K/V product, or kv_write): the history, every
      // row below it, may be copied before the attention's PDL wait.
      ops::flash_decode(s, q.reshaped(Shape{c.heads, hd}), w.k_cache, w.v_cache, b.kv_length(),
                     attn.reshaped(Shape{c.heads, hd}), b.flash_scratch, attention, prefetch,
                     ops::CacheWrites::token_row_only);
    } else {
      ops::sdpa(s, q, w.k_cache, w.v_cache, positions, attn.reshaped(Shape{n, c.heads, hd}), attention);
    }
    run_linear(s, attn, w.attn_output, proj);
    if (c.post_norms) ops::rms_norm(s, proj, w.post_attn_norm, proj, c.norm_eps);
    ops::add(s, x, proj, x);
    ops::rms_norm(s, x, w.ffn_norm, xn, c.norm_eps);
    if (c.moe()) {
      emit_experts(s, w, n, xn, proj);
      if (c.post_norms) ops::rms_norm(s, proj, w.post_ffn_norm, proj, c.norm_eps);
      ops::add(s, x, proj, x);
      ++li;
      continue;
    }
    TensorView gate, up;
    if (decode_step) {
      run_parts(s, xn, w.gate_up_parts, b.gate_up);
      gate = TensorView(b.gate_up.view.slice(0, static_cast<size_t>(c.ffn) * 4), DType::f32, Shape{1, c.ffn});
      up = TensorView(b.gate_up.view.slice(static_cast<size_t>(c.ffn) * 4, static_cast<size_t>(c.ffn) * 4),
                      DType::f32, Shape{1, c.ffn});
    } else {
      gate = b.gate.rows_slice(0, n);
      up = b.up.rows_slice(0, n);
      if (w.gate_up_parts.size() == 1) {
        run_linear(s, xn, w.gate_up_parts[0].rows(0, c.ffn), gate);
        run_linear(s, xn, w.gate_up_parts[0].rows(c.ffn, c.ffn), up);
      } else {
        run_linear(s, xn, w.gate_up_parts[0], gate);
        run_linear(s, xn, w.gate_up_parts[1], up);
      }
    }
    switch (c.activation) {
      case FfnActivation::silu:
        ops::silu_mul(s, gate, up, act);
        break;
      case FfnActivation::gelu_tanh:
        ops::gelu_mul(s, gate, up, act);
        break;
    }
    run_linear(s, act, w.down, proj);
    if (c.post_norms) ops::rms_norm(s, proj, w.post_ffn_norm, proj, c.norm_eps);
    ops::add(s, x, proj, x);
    ++li;
  }
  if (all_logits) {
    // Every position's logits (perplexity, teacher forcing).
    const TensorView logits = b.all_logits.rows_slice(0, n);
    ops::rms_norm(s, x, output_norm_, xn, c.norm_eps);
    run_linear(s, xn, output_, logits);
    if (c.final_softcap > 0) ops::softcap(s, logits, c.final_softcap, logits);
    s.keep(logits);
    return;
  }
  if (paged) {
    // The rows that need logits, gathered by index before the final norm and the LM head.
    const TensorView chosen = b.proj.rows_slice(0, step_logit_rows);
    const TensorView chosen_norm = b.xn.rows_slice(0, step_logit_rows);
    const TensorView logits = b.step_logits.rows_slice(0, step_logit_rows);
    const TensorView argmax(b.step_argmax.view.slice(0, static_cast<size_t>(step_logit_rows) * 4), DType::i32,
                            Shape{step_logit_rows});
    const TensorView logit_rows(b.batch_field(n, 4).view.slice(0, static_cast<size_t>(step_logit_rows) * 4),
                                DType::i32, Shape{step_logit_rows});
    ops::embedding(s, x, logit_rows, chosen);
    ops::rms_norm(s, chosen, output_norm_, chosen_norm, c.norm_eps);
    run_linear(s, chosen_norm, output_, logits);
    if (c.final_softcap > 0) ops::softcap(s, logits, c.final_softcap, logits);
    s.keep(logits);
    if (step_sample) {
      // Each row's parameters and penalised tokens, written by the host before the launch.
      const size_t bytes = b.sample_bytes(step_logit_rows);
      ops::copy_bytes(s, b.sample_host.slice(0, bytes), b.sample_dev.slice(0, bytes));
      const TensorView tokens(b.step_tokens.view.slice(0, static_cast<size_t>(step_logit_rows) * 4), DType::i32,
                              Shape{step_logit_rows});
      ops::sample(s, logits, b.sample_params(step_logit_rows), b.sample_penalty_rows(step_logit_rows), tokens);
      s.keep(tokens);
    } else {
      ops::argmax(s, logits, argmax);
      s.keep(argmax);
    }
    return;
  }
  // Only the last token's logits are needed.
  const TensorView last = x.rows_slice(n - 1, 1);
  const TensorView last_norm = b.xn.rows_slice(0, 1);
  ops::rms_norm(s, last, output_norm_, last_norm, c.norm_eps);
  run_linear(s, last_norm, output_, b.logits);
  if (c.final_softcap > 0) ops::softcap(s, b.logits, c.final_softcap, b.logits);
  ops::argmax(s, b.logits, b.next_token);
  s.keep(b.logits);
  s.keep(b.next_token);
  if (decode_step) {
    // The next step's inputs, for decode_greedy_run (a step whose inputs come from the
    // host overwrites them).
    ops::feed_token(s, b.next_token, b.ids(1), b.positions(1), b.kv_length(), b.history);
    for (const TensorView& t : {b.ids(1), b.positions(1), b.kv_length(), b.history}) s.keep(t);
  }
}

std::span<const float> LlamaModel::evaluate(std::span<const int32_t> tokens) {
  check(!tokens.empty(), "model", "evaluate of no tokens");
  check(position_ + static_cast<int64_t>(tokens.size()) <= options_.context, "model", "context full: ", position_,
        " + ", tokens.size(), " tokens exceed the context of ", options_.context, " (use --ctx to enlarge it)");
  Buffers& b = *buffers_;
  const int64_t vocab = config_.vocab_size;
  if (!b.all_logits.view) {
    b.all_logits = backend_->alloc_tensor(DType::f32, Shape{std::min(b.max_batch, kEvaluateRows), vocab});
  }
  all_logits_.resize(tokens.size() * static_cast<size_t>(vocab));
  size_t done = 0;
  while (done < tokens.size()) {
    const size_t n = std::min<size_t>(static_cast<size_t>(b.all_logits.rows()), tokens.size() - done);
    set_step(tokens.subspan(done, n));
    GraphSession s = executor_.begin_recorded();
    emit(s, static_cast<int64_t>(n), false, false, true);
    s.finish({.fuse = true, .encoding = Encoding::dataflow});
    b.all_logits.view.read(all_logits_.data() + done * static_cast<size_t>(vocab), n * static_cast<size_t>(vocab) * 4);
    position_ += static_cast<int64_t>(n);
    done += n;
  }
  for (size_t i = 0; i < all_logits_.size(); ++i) {
    if (!std::isfinite(all_logits_[i])) {
      fail("model", source_name_, ": the logits of position ", position_ - static_cast<int64_t>(tokens.size()) +
           static_cast<int64_t>(i / static_cast<size_t>(vocab)), " hold NaN or Inf (token ",
           i % static_cast<size_t>(vocab), "); expected finite logits");
    }
  }
  return all_logits_;
}

void LlamaModel::set_step(std::span<const int32_t> tokens) {
  const Buffers& b = *buffers_;
  const auto n = static_cast<int64_t>(tokens.size());
  auto* step = static_cast<int32_t*>(b.step_host.data());
  step[0] = static_cast<int32_t>(position_ + n);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t t = tokens[static_cast<size_t>(i)];
    check(t >= 0 && t < config_.vocab_size, "model", "token id ", t, " outside the vocabulary (", config_.vocab_size, ")");
    step[1 + i] = t;
    step[1 + b.max_batch + i] = static_cast<int32_t>(position_ + i);
  }
}

void LlamaModel::rewind(int64_t position) {
  check(position >= 0 && position <= position_, "rewind", "position ", position, " is not in the cache of ",
        position_, " tokens");
  position_ = position;
}

std::span<const float> LlamaModel::prefill(std::span<const int32_t> tokens) {
  check(!tokens.empty(), "model", "prefill of no tokens");
  check(position_ + static_cast<int64_t>(tokens.size()) <= options_.context, "model", "context full: ", position_,
        " + ", tokens.size(), " tokens exceed the context of ", options_.context, " (use --ctx to enlarge it)");
  size_t done = 0;
  while (done < tokens.size()) {
    const size_t n = std::min<size_t>(static_cast<size_t>(buffers_->max_batch), tokens.size() - done);
    set_step(tokens.subspan(done, n));
    if (options_.replay) {
      // Positions and token ids come from the step buffer, so a chunk length's graph is
      // recorded once and replayed for every later chunk of that length (recording,
      // the passes and graph building cost ~1-2 ms per chunk on the host).
      prefill_graph(static_cast<int64_t>(n)).run();
    } else {
      GraphSession s = executor_.begin_recorded();
      emit_forward(s, static_cast<int64_t>(n), false);
      s.finish({.fuse = true, .encoding = Encoding::dataflow, .measure = true});
    }
    position_ += static_cast<int64_t>(n);
    done += n;
  }
  buffers_->logits.view.read(logits_.data(), logits_.size() * 4);
  check_logits();
  return logits_;
}

void LlamaModel::check_logits() const {
  // NaN logits would make every argmax token 0 and every sample meaningless.
  for (size_t i = 0; i < logits_.size(); ++i) {
    const float v = logits_[i];
    if (std::isfinite(v)) continue;
    fail("model", source_name_, ": the logits after position ", position_ - 1, " hold ",
         std::isnan(v) ? "NaN" : "Inf", " (token ", i,
         "); the weights likely contain NaN or Inf values, expected finite logits");
  }
}

CapturedGraph& LlamaModel::prefill_graph(int64_t n) {
  auto found = std::find_if(prefill_graphs_.begin(), prefill_graphs_.end(),
                            [n](const PrefillGraph& g) { return g.tokens == n; });
  if (found == prefill_graphs_.end()) {
    // Few lengths recur (full chunks and a prompt's tail): keep the most recent ones.
    if (prefill_graphs_.size() == kPrefillGraphs) prefill_graphs_.erase(prefill_graphs_.begin());
    GraphSession s = executor_.begin_recorded();
    emit_forward(s, n, false);
    prefill_graphs_.push_back({n, std::make_unique<CapturedGraph>(*backend_, s.take_graph(), options_.capture)});
    return *prefill_graphs_.back().graph;
  }
  // Most recently used last.
  std::rotate(found, found + 1, prefill_graphs_.end());
  return *prefill_graphs_.back().graph;
}

void LlamaModel::run_decode(int32_t token) {
  check(position_ < options_.context, "model", "context full: ", options_.context,
        " tokens (use --ctx to enlarge it)");
  if (!options_.replay) {
    const uint64_t t0 = now_ns();
    set_step(std::span<const int32_t>(&token, 1));
    GraphSession s = executor_.begin();
    emit_forward(s, 1, true);
    last_step_host_ns_ = now_ns() - t0;
    s.finish();
    ++position_;
    return;
  }
  launch_decode(token);
  decode_graph_->wait();
  ++position_;
}

void LlamaModel::launch_decode(int32_t token) {
  if (!decode_graph_) {
    GraphSession s = executor_.begin_recorded();
    emit_forward(s, 1, true);
    decode_graph_ = std::make_unique<CapturedGraph>(*backend_, s.take_graph(), options_.capture);
  }
  const uint64_t t0 = now_ns();
  set_step(std::span<const int32_t>(&token, 1));
  decode_graph_->launch();
  last_step_host_ns_ = now_ns() - t0;
}

std::span<const float> LlamaModel::decode(int32_t token) {
  run_decode(token);
  buffers_->logits.view.read(logits_.data(), logits_.size() * 4);
  check_logits();
  return logits_;
}

int32_t LlamaModel::decode_greedy(int32_t token) {
  run_decode(token);
  int32_t next = 0;
  buffers_->next_token.view.read(&next, 4);
  return next;
}

// Fed decode steps per recorded graph where the backend has not been told
// (LoadOptions::fed_steps_per_graph 0) and a launch boundary costs: CUDA.
constexpr int64_t kFedStepsPerGraph = 8;

std::vector<int32_t> LlamaModel::decode_greedy_run(int32_t token, int64_t count) {
  check(count >= 0, "model", "decode_greedy_run of ", count, " tokens");
  check(position_ + count <= options_.context, "model", "context full: ", position_, " + ", count,
        " tokens exceed the context of ", options_.context, " (use --ctx to enlarge it)");
  std::vector<int32_t> out;
  if (!options_.replay || count <= 1) {
    for (int64_t i = 0; i < count; ++i) out.push_back(token = decode_greedy(token));
    return out;
  }
  const int64_t per_graph = options_.fed_steps_per_graph > 0       ? options_.fed_steps_per_graph
                            : backend_->kind() == BackendKind::cpu ? 1
                                                                   : kFedStepsPerGraph;
  const int64_t later = count - 1;
  const int64_t multi = per_graph > 1 ? later / per_graph : 0;
  auto record = [&](int64_t steps) {
    GraphSession s = executor_.begin_recorded();
    for (int64_t i = 0; i < steps; ++i) emit_forward(s, 1, true, true);
    return std::make_unique<CapturedGraph>(*backend_, s.take_graph(), options_.capture);
  };
  if (!fed_decode_graph_) fed_decode_graph_ = record(1);
  if (per_graph > 1 && !fed_decode_steps_) fed_decode_steps_ = record(per_graph);  // once, whatever count
  launch_decode(token);  // the first step's inputs come from the host
  const uint64_t t0 = now_ns();
  for (int64_t i = 0; i < multi; ++i) fed_decode_steps_->launch();
  for (int64_t i = multi * per_graph; i < later; ++i) fed_decode_graph_->launch();
  last_step_host_ns_ = (now_ns() - t0) / static_cast<uint64_t>(later);
  // The steps run in launch order on one stream: waiting for the last graph waits for all.
  if (multi * per_graph < later) {
    fed_decode_graph_->wait();
  } else {
    fed_decode_steps_->wait();
  }
  // Step i fed the token at position first + i + 1 into the history.
  const int64_t first = position_;
  position_ += count;
  out.resize(static_cast<size_t>(count));
  buffers_->history.view.slice(static_cast<size_t>(first + 1) * 4, static_cast<size_t>(count) * 4)
      .read(out.data(), static_cast<size_t>(count) * 4);
  return out;
}

}  // namespace onepass::model

namespace onepass::model {
namespace {

// The smallest power of two >= n, capped at `most`: the row counts of recorded steps.
int64_t bucket(int64_t n, int64_t most) {
  int64_t b = 1;
  while (b < n) b *= 2;
  return std::min(b, most);
}

}  // namespace

CapturedGraph& LlamaModel::step_graph(int64_t rows, int64_t logit_rows, bool sample) {
  auto found = std::find_if(step_graphs_.begin(), step_graphs_.end(), [&](const StepGraph& g) {
    return g.rows == rows && g.logit_rows == logit_rows && g.sample == sample;
  });
  if (found != step_graphs_.end()) return *found->graph;
  GraphSession s = executor_.begin_recorded();
  emit(s, rows, false, false, false, logit_rows, sample);
  step_graphs_.push_back(
      {rows, logit_rows, sample, std::make_unique<CapturedGraph>(*backend_, s.take_graph(), options_.capture)});
  return *step_graphs_.back().graph;
}

BatchResult LlamaModel::step(std::span<const BatchRow> rows, bool download_logits) {
  return run_step(rows, download_logits, nullptr);
}

BatchResult LlamaModel::step(std::span<const BatchRow> rows, std::span<const RowSampling> sampling) {
  return run_step(rows, false, &sampling);
}

BatchResult LlamaModel::run_step(std::span<const BatchRow> rows, bool download_logits,
                                 const std::span<const RowSampling>* sampling) {
  KvBlockPool& pool = kv_pool();
  const Buffers& b = *buffers_;
  const auto n = static_cast<int64_t>(rows.size());
  check(n >= 1 && n <= b.max_batch, "model", "a batched step of ", n, " rows; expected 1..", b.max_batch,
        " (LoadOptions::max_batch)");
  // Check every row, and the positions each sequence must hold, before anything changes.
  std::vector<std::pair<int32_t, int64_t>> lengths;  // (sequence, positions it must hold)
  std::vector<std::pair<int32_t, int32_t>> written;  // (sequence, position) of every row
  int64_t logit_count = 0;
  for (int64_t i = 0; i < n; ++i) {
    const BatchRow& r = rows[static_cast<size_t>(i)];
    check(pool.has_sequence(r.sequence), "model", "row ", i, " of a batched step: sequence ", r.sequence,
          " is not in the KV pool (add it with kv_pool().add_sequence())");
    check(r.token >= 0 && r.token < config_.vocab_size, "model", "row ", i, " of a batched step: token id ", r.token,
          " outside the vocabulary (", config_.vocab_size, ")");
    check(r.position >= 0 && r.position < options_.context, "model", "row ", i, " of a batched step: position ",
          r.position, " outside the context of ", options_.context, " (use --ctx to enlarge it)");
    if (r.logits) ++logit_count;
    written.emplace_back(r.sequence, r.position);
    auto it = std::find_if(lengths.begin(), lengths.end(), [&](const auto& e) { return e.first == r.sequence; });
    if (it == lengths.end()) {
      lengths.emplace_back(r.sequence, r.position + 1);
    } else {
      it->second = std::max<int64_t>(it->second, r.position + 1);
    }
  }
  // Each sequence's rows are distinct, consecutive positions that continue (or rewrite) what
  // its cache holds: a gap would attend to positions never written.
  std::sort(written.begin(), written.end());
  for (size_t i = 0; i < written.size(); ++i) {
    const auto [sequence, position] = written[i];
    const bool first = i == 0 || written[i - 1].first != sequence;
    if (first) {
      check(position <= pool.length(sequence), "model", "a batched step starts sequence ", sequence, " at position ",
            position, " but its cache holds ", pool.length(sequence), " positions; expected rows from at most ",
            pool.length(sequence));
    } else {
      check(position == written[i - 1].second + 1, "model", "a batched step has positions ", written[i - 1].second,
            " and ", position, " of sequence ", sequence, "; expected distinct consecutive positions");
    }
  }
  check(logit_count <= b.step_logits.rows(), "model", "a batched step asks for ", logit_count,
        " rows of logits; at most ", b.step_logits.rows(), " (LoadOptions::sequences)");
  if (sampling != nullptr) {
    check(static_cast<int64_t>(sampling->size()) == logit_count, "model", "a sampled step has ", sampling->size(),
          " row samplings for ", logit_count, " rows with logits; expected one each");
    for (size_t i = 0; i < sampling->size(); ++i) {
      const RowSampling& r = (*sampling)[i];
      check(r.params.penalty_count >= 0 && static_cast<size_t>(r.params.penalty_count) == r.penalties.size() &&
                r.params.penalty_count <= b.sample_penalties,
            "model", "row sampling ", i, " of a sampled step has ", r.penalties.size(), " penalised tokens (penalty_count ",
            r.params.penalty_count, "); expected penalty_count entries, at most ", b.sample_penalties,
            " (LoadOptions::sample_penalties)");
    }
  }
  // The blocks of all sequences, or none.
  int64_t needed = 0;
  for (const auto& [sequence, length] : lengths) needed += pool.blocks_needed(sequence, length);
  if (needed > pool.free_blocks()) {
    throw KvPoolFull("model", cat("KV pool full: a batched step of ", n, " rows needs ", needed, " more blocks, ",
                                  pool.free_blocks(), " of ", pool.blocks(),
                                  " are free; wait for a sequence to finish or release one"));
  }
  for (const auto& [sequence, length] : lengths) pool.reserve(sequence, length);
  for (const auto& [sequence, length] : lengths) pool.set_length(sequence, std::max(pool.length(sequence), length));

  const int64_t padded = bucket(n, b.max_batch);
  const int64_t logit_rows = bucket(std::max<int64_t>(logit_count, 1), std::min(padded, b.step_logits.rows()));
  auto* in = static_cast<int32_t*>(b.batch_host.data());
  int32_t* ids = in;
  int32_t* positions = in + padded;
  int32_t* slots = in + 2 * padded;
  int32_t* kv_lengths = in + 3 * padded;
  int32_t* logit_index = in + 4 * padded;
  int32_t* tables = in + Buffers::kBatchFields * padded;
  int64_t next_logit = 0;
  for (int64_t i = 0; i < padded; ++i) {
    if (i >= n) {  // padding: writes no cache row, attends to nothing
      ids[i] = 0;
      positions[i] = 0;
      slots[i] = -1;
      kv_lengths[i] = 0;
      continue;
    }
    const BatchRow& r = rows[static_cast<size_t>(i)];
    ids[i] = r.token;
    positions[i] = r.position;
    slots[i] = pool.slot(r.sequence, r.position);
    kv_lengths[i] = r.position + 1;
    const std::span<const int32_t> table = pool.block_table(r.sequence);
    std::copy(table.begin(), table.end(), tables + i * b.max_blocks);
    if (r.logits) logit_index[next_logit++] = static_cast<int32_t>(i);
  }
  for (int64_t i = next_logit; i < logit_rows; ++i) logit_index[i] = 0;
  const bool sampled = sampling != nullptr;
  if (sampled) {
    // Parameters of the padded rows are zero: greedy, no penalties.
    auto* bytes = static_cast<uint8_t*>(b.sample_host.data());
    std::memset(bytes, 0, b.sample_bytes(logit_rows));
    auto* params = reinterpret_cast<ops::SampleParams*>(bytes);
    auto* entries = reinterpret_cast<ops::SamplePenalty*>(bytes + static_cast<size_t>(logit_rows) * sizeof(ops::SampleParams));
    for (size_t i = 0; i < sampling->size(); ++i) {
      const RowSampling& r = (*sampling)[i];
      params[i] = r.params;
      std::copy(r.penalties.begin(), r.penalties.end(), entries + static_cast<int64_t>(i) * b.sample_penalties);
    }
  }

  if (options_.replay) {
    step_graph(padded, logit_rows, sampled).run();
  } else {
    GraphSession s = executor_.begin_recorded();
    emit(s, padded, false, false, false, logit_rows, sampled);
    s.finish({.fuse = true, .encoding = Encoding::dataflow});
  }

  const auto vocab = static_cast<size_t>(config_.vocab_size);
  const auto count = static_cast<size_t>(logit_count);
  if (sampled) {
    step_tokens_.resize(count);
    if (count > 0) b.step_tokens.view.read(step_tokens_.data(), count * 4);
    BatchResult result;
    result.tokens = step_tokens_;
    return result;
  }
  step_argmax_.resize(count);
  if (count > 0) b.step_argmax.view.read(step_argmax_.data(), count * 4);
  BatchResult result;
  result.argmax = step_argmax_;
  if (download_logits && count > 0) {
    step_logits_.resize(count * vocab);
    b.step_logits.view.read(step_logits_.data(), step_logits_.size() * 4);
    for (size_t i = 0; i < step_logits_.size(); ++i) {
      if (std::isfinite(step_logits_[i])) continue;
      fail("model", source_name_, ": the logits of row ", i / vocab, " of a batched step hold NaN or Inf (token ",
           i % vocab, "); the weights likely contain NaN or Inf values, expected finite logits");
    }
    result.logits = step_logits_;
  }
  return result;
}

}  // namespace onepass::model
