// Rotary position embedding (RoPE): normal (interleaved) and NeoX layouts, partial rotary
// dims, per-pair frequency factors, positions read from a device buffer.
#pragma once

#include <cstdint>

#include "onepass/core/tensor.h"
#include "onepass/exec/graph_session.h"

namespace onepass::ops {

/// Which dimensions of a head form the rotated pairs.
enum class RopeLayout : int32_t {
  normal,  // interleaved pairs (2i, 2i+1) (Llama GGUF)
  neox,    // pairs (i, i + rotary_dims/2) (NeoX, Qwen2, MLX/HF checkpoints)
};

/// What rope_kv_write does with RopeParams::cos_sin (one token only).
enum class RopeCosSin : uint8_t {
  none,
  /// Computes the angles as usual and also stores pair i's (cos, sin) at cos_sin[2i],
  /// cos_sin[2i + 1].
  store,
  /// Rotates with the (cos, sin) found in cos_sin instead of computing them: the caller
  /// promises that an earlier dispatch of the pass stored them for the same position and
  /// parameters (a decode step's first layer stores them, the other layers load them:
  /// powf and sincosf once per token instead of once per layer).
  load,
};

/// Options of GraphSession::rope. Pair i (0 <= i < rotary_dims/2) at position p turns by
///   angle = p * freq_scale * theta^(-2i / rotary_dims) / freq_factors[i].
/// Dimensions from rotary_dims to head_dim pass through unchanged.
struct RopeParams {
  RopeLayout layout = RopeLayout::normal;
  int32_t rotary_dims = 0;  // even, <= head_dim; 0 means the whole head
  float theta = 10000.0f;   // frequency base
  TensorView freq_factors;  // optional f32 [rotary_dims/2]; a view without buffer = none
  float freq_scale = 1.0f;  // linear position scaling
  /// rope_kv_write of one token only: f32 [rotary_dims] (cos, sin) per pair, used as
  /// cos_sin_use says (RopeCosSin); a view without buffer = none.
  TensorView cos_sin;
  RopeCosSin cos_sin_use = RopeCosSin::none;
  /// rope_kv_write only: per-head RMS norms of q and k before the rotation (Qwen3, Qwen3
  /// MoE, Gemma 3): f32 [head_dim] weights, both or neither (a view without buffer = none);
  /// each head row becomes x * w / sqrt(mean(x^2) + qk_norm_eps), exactly as rms_norm over
  /// the rows [tokens * heads, head_dim] computes it.
  TensorView q_norm;
  TensorView k_norm;
  float qk_norm_eps = 1e-6f;
};

/// rope and rope_neox (the layouts; x and out share the type, f32/f16/bf16).
/// x and out are [tokens, heads, head_dim] with rows (token, head) `*_stride` elements
/// apart; out may be x itself (in place). Angles are computed in f32 as
///   inv_freq = powf(theta, -(float)(2i) / (float)rotary_dims) * freq_scale
///              [/ freq_factors[i]];   angle = (float)p * inv_freq.
/// freq_factors is null when absent.
struct RopeArgs {
  const void* x;
  void* out;
  const int32_t* positions;
  const float* freq_factors;
  int64_t tokens;
  int64_t heads;
  int64_t head_dim;
  int64_t x_stride;
  int64_t out_stride;
  int32_t rotary_dims;
  float theta;
  float freq_scale;
};

/// The attention inputs of one step in one pass (rope_kv_write and rope_kv_write_neox, the
/// two layouts; any cache type of f32, f16, bf16): RoPE on q in place, RoPE'd k and v written
/// into the caches at the tokens' positions (positions outside [0, ctx) write nothing; k
/// and v are left as they were). Equals rope(q, q); rope(k, k'); kv_write(k', k_cache);
/// kv_write(v, v_cache), preceded, with q_norm and k_norm, by the per-head rms_norm of q and
/// k in place (k is left as it was; the normalised k goes to the cache). q, k, v f32
/// [tokens, heads, head_dim]; caches [kv_heads, ctx, head_dim]. With slots (the paged KV pool
/// of batched steps), token t's cache row is slots[t] instead of its position (slots
/// outside [0, ctx), e.g. -1 for a padding row, write nothing); RoPE still uses positions.
struct RopeKvArgs {
  float* q;
  const float* k;
  const float* v;
  void* k_cache;
  void* v_cache;
  const int32_t* positions;
  const int32_t* slots;  // the cache row of each token; null: its position
  const float* freq_factors;
  int64_t tokens;
  int64_t n_head;
  int64_t n_kv_head;
  int64_t head_dim;
  int64_t ctx;
  int64_t q_stride;      // floats between (token, head) rows of q
  int64_t k_stride;
  int64_t v_stride;
  int64_t cache_stride;  // elements between cache rows
  int32_t rotary_dims;
  float theta;
  float freq_scale;
  float* cos_sin_out;       // RopeCosSin::store, else null
  const float* cos_sin_in;  // RopeCosSin::load, else null
  const float* q_norm;      // [head_dim] per-head RMS norm weights of q, else null
  const float* k_norm;      // [head_dim] of k; set exactly when q_norm is
  float norm_eps;
};

/// Operands of rope_kv_write a backend may read early (KernelChoice::early_operands): the
/// angles a layer loads (RopeCosSin::load) and the position.
inline constexpr uint32_t kRopeKvLoadedAngles = 1u << 0;
inline constexpr uint32_t kRopeKvPositions = 1u << 1;

/// RoPE over x [tokens, heads, head_dim] with positions (i32 [tokens]) from a buffer.
void rope(GraphSession& s, const TensorView& x, const TensorView& out, const TensorView& positions,
                           const RopeParams& params);

/// RoPE on q [tokens, n_head, head_dim] in place, and RoPE'd k and v [tokens, n_kv_head,
/// head_dim] written into the caches at positions (at slots, i32 [tokens], when given):
/// rope + rope + kv_write + kv_write in one dispatch (a step's attention inputs).
void rope_kv_write(GraphSession& s, const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& k_cache,
                                    const TensorView& v_cache, const TensorView& positions, const RopeParams& params,
                                    const TensorView& slots = {});

}  // namespace onepass::ops
