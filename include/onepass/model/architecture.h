// The decoder families onepass runs, as data: what a family's GGUF `general.architecture`
// implies beyond the metadata keys every family shares. A new family is an entry here plus
// whatever it needs that the forward pass does not have yet.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "onepass/model/model_source.h"

namespace onepass::model {

struct Architecture {
  std::string_view name;  // general.architecture
  bool rope_neox = false;
  FfnActivation activation = FfnActivation::silu;
  bool qk_norm = false;
  bool post_norms = false;
  bool embedding_scale_sqrt_hidden = false;
  /// Layer l is global when l % period == period - 1 (LlamaConfig::sliding_window_period);
  /// 0 with a sliding window: every layer local.
  int64_t sliding_window_period = 0;
  /// RoPE base of the local layers when the file does not say; 0: rope.freq_base.
  float rope_theta_local = 0.0f;
  /// Softcaps when the file does not say (Gemma 2's defaults); 0: none.
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  bool fused_qkv_tensor = false;
  bool fused_gate_up_tensor = false;
  /// QK norm over the whole Q and K vectors (OLMoE), with qk_norm.
  bool qk_norm_whole = false;
  /// How the router's logits weight the selected experts, when the file has experts.
  ExpertWeighting expert_weighting = ExpertWeighting::softmax_selected;
  /// The chat template used when the file has none (Gemma files often come without).
  std::string_view default_chat_template;
};

/// The supported families, in the order errors list them.
std::span<const Architecture> architectures();
/// The entry named `name`, or nullptr.
const Architecture* find_architecture(std::string_view name);
/// "llama, mistral, qwen2, ..." for error messages.
std::string architecture_names();
/// Sets the fields of `config` that the family implies (config.architecture names it).
void apply_architecture(const Architecture& arch, LlamaConfig& config);

}  // namespace onepass::model
