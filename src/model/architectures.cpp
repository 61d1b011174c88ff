#include "onepass/model/architecture.h"

#include <cmath>

#include "onepass/core/error.h"

namespace onepass::model {
namespace {

// Gemma's turn format: a system message opens the first user turn; the assistant's role
// is "model".
constexpr std::string_view kGemmaTemplate =
    "{{ bos_token }}"
    "{% if messages[0]['role'] == 'system' %}"
    "{% set system = messages[0]['content'] + '\\n\\n' %}{% set turns = messages[1:] %}"
    "{% else %}{% set system = '' %}{% set turns = messages %}{% endif %}"
    "{% for message in turns %}"
    "{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
    "<start_of_turn>{{ role }}\n"
    "{% if loop.first %}{{ system }}{% endif %}{{ message['content'] | trim }}<end_of_turn>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}";

constexpr Architecture kTable[] = {
    {.name = "llama"},
    {.name = "mistral"},
    {.name = "qwen2", .rope_neox = true},
    {.name = "qwen3", .rope_neox = true, .qk_norm = true},
    // Mixtral is "llama" with <arch>.expert_count > 0. Qwen3-MoE renormalises its top-k
    // probabilities (norm_topk_prob): a softmax over the selected experts.
    {.name = "qwen3moe", .rope_neox = true, .qk_norm = true},
    {.name = "olmoe",
     .rope_neox = true,
     .qk_norm = true,
     .qk_norm_whole = true,
     .expert_weighting = ExpertWeighting::softmax_all},
    {.name = "gemma2",
     .rope_neox = true,
     .activation = FfnActivation::gelu_tanh,
     .post_norms = true,
     .embedding_scale_sqrt_hidden = true,
     .sliding_window_period = 2,
     .attn_softcap = 50.0f,
     .final_softcap = 30.0f,
     .default_chat_template = kGemmaTemplate},
    {.name = "gemma3",
     .rope_neox = true,
     .activation = FfnActivation::gelu_tanh,
     .qk_norm = true,
     .post_norms = true,
     .embedding_scale_sqrt_hidden = true,
     .sliding_window_period = 6,
     .rope_theta_local = 10000.0f,
     .default_chat_template = kGemmaTemplate},
    {.name = "phi3", .rope_neox = true, .fused_qkv_tensor = true, .fused_gate_up_tensor = true},
};

}  // namespace

std::span<const Architecture> architectures() { return kTable; }

const Architecture* find_architecture(std::string_view name) {
  for (const Architecture& a : architectures()) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

std::string architecture_names() {
  std::string out;
  for (const Architecture& a : architectures()) out += (out.empty() ? "" : ", ") + std::string(a.name);
  return out;
}

void apply_architecture(const Architecture& arch, LlamaConfig& c) {
  c.architecture = std::string(arch.name);
  c.rope_neox = arch.rope_neox;
  c.activation = arch.activation;
  c.qk_norm = arch.qk_norm;
  c.post_norms = arch.post_norms;
  c.embedding_scale = arch.embedding_scale_sqrt_hidden ? std::sqrt(static_cast<float>(c.hidden)) : 1.0f;
  c.sliding_window_period = arch.sliding_window_period;
  c.rope_theta_local = arch.rope_theta_local;
  c.attn_softcap = arch.attn_softcap;
  c.final_softcap = arch.final_softcap;
  c.fused_qkv_tensor = arch.fused_qkv_tensor;
  c.fused_gate_up_tensor = arch.fused_gate_up_tensor;
  c.qk_norm_whole = arch.qk_norm_whole;
  c.expert_weighting = arch.expert_weighting;
}

}  // namespace onepass::model
