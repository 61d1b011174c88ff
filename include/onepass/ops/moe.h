// Mixture-of-experts routing and combination, on the device: the router's logits choose
// each token's experts and their weights (moe_route), the experts' outputs are summed with
// those weights (moe_combine). The expert products themselves are ops/matmul_id.h.
#pragma once

#include <cstdint>

#include "onepass/exec/graph_session.h"

namespace onepass::ops {

/// How the selected experts' weights come from the router's logits.
enum class MoeWeighting : uint8_t {
  /// Softmax over the selected experts' logits: the weights sum to 1 (Mixtral, and Qwen3-MoE,
  /// whose softmax over all experts renormalised over the selected ones is the same thing).
  softmax_selected,
  /// Softmax over all experts; the selected ones keep their probabilities (OLMoE).
  softmax_all,
};

/// moe_route: for token t, the `slots` experts with the largest logits[t, :] in descending
/// order, ties to the lower expert index, NaN below every number (never chosen before one),
/// into ids[t, s]; weights[t, s] as MoeWeighting says (exp(l - max) / sum, in f32).
struct MoeRouteArgs {
  const float* logits;
  int32_t* ids;
  float* weights;
  int64_t tokens;
  int64_t n_experts;
  int64_t slots;
  int64_t logits_stride;  // floats between tokens
  MoeWeighting weighting;
};

/// moe_combine: out[t, n] = sum over s of weights[t, s] * y[t, s, n] (slots in order, f32).
struct MoeCombineArgs {
  const float* y;
  const float* weights;
  float* out;
  int64_t tokens;
  int64_t slots;
  int64_t n;
  int64_t y_token_stride;  // floats between tokens of y (y's slots are n floats apart)
  int64_t out_stride;      // floats between tokens of out
};

/// Experts a router may choose among, and experts a token may use at most.
inline constexpr int64_t kMoeMaxExperts = 1024;
inline constexpr int64_t kMoeMaxSlots = 64;

/// logits f32 [T, E] -> ids i32 [T, S], weights f32 [T, S] (both contiguous).
void moe_route(GraphSession& s, const TensorView& logits, const TensorView& ids, const TensorView& weights,
               MoeWeighting weighting);

/// y f32 [T, S, N] (or [T * S, N]), weights f32 [T, S] -> out f32 [T, N].
void moe_combine(GraphSession& s, const TensorView& y, const TensorView& weights, const TensorView& out);

}  // namespace onepass::ops
