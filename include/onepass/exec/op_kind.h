// OpKind: what a dispatch computes, as far as the graph passes need to know.
#pragma once

#include <cstdint>

namespace onepass {

enum class OpKind : uint8_t {
  norm,        // rms_norm (with or without weight)
  norm_mul,    // rms_norm fused with an elementwise multiply
  add,         // elementwise add (also residual adds)
  mul,         // elementwise multiply
  scale,       // multiply by a scalar
  activation,  // gelu, silu, silu*mul, softcap
  softmax,
  rope,
  attention,   // sdpa, flash-decoding and its merge
  matmul,      // dense and quantized matrix-vector / matrix-matrix
  matmul_id,   // expert-routed matmul
  copy,        // copy / convert
  gather,      // embedding gather
  kv_write,    // KV-cache write
  argmax,      // sampling helpers
  moe_gate,    // MoE routing (moe_route: the experts of each token and their weights)
  other,
};

inline constexpr int kOpKindCount = 17;

/// Stable lower-case name ("norm", "matmul", ...), used in dumps and profiles.
const char* op_kind_name(OpKind kind);

/// Whether the reorder pass may move this kind of dispatch past others (the seeds'
/// whitelist): attention, softmax, MoE gating and unknown kinds stay in place and stop
/// the lookahead.
bool is_reorderable(OpKind kind);

}  // namespace onepass
