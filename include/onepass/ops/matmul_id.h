// Expert-routed matmul (MoE): out[t, s] = x[t] (or x[t, s]) · w[ids[t, s]]ᵀ.
#pragma once

#include <cstddef>
#include <cstdint>
#include "onepass/exec/graph_session.h"

namespace onepass::ops {

/// What GraphSession::matmul_id computes:
///   x    f32 [T, K] shared by every slot of a token, or [T, S, K] (per_slot_input)
///   w    [E, N, K] in any matmul weight type (ops/matmul.h)
///   ids  i32 [T, S]: the expert of each (token, slot); ids outside [0, E) are allowed in
///        device memory and give a zero output row (never an out-of-bounds read)
///   out  f32 [T, S, N]
struct MatmulIdParams {
  int32_t n_experts = 0;        // E
  int32_t slots = 0;            // S, experts used per token
  bool per_slot_input = false;  // x is [T, S, K] rather than [T, K]
};

/// One argument struct for the op's steps. One token ("matmul_id"): each (token, slot)
/// pair's product, or zeros when ids[t, s] is out of range. More tokens: the pairs are
/// first grouped by expert ("matmul_id_group", into `scratch`: int32 offsets[E + 2] then
/// int32 pairs[T * S]; pairs of expert e are pairs[offsets[e] .. offsets[e + 1]) in
/// ascending pair index t * S + s, pairs with an id outside [0, E) last), then each
/// expert's weight rows are read once for all its pairs ("matmul_id_grouped"), and the
/// pairs with invalid ids get zeros.
struct MatmulIdArgs {
  const float* x;
  const void* w;
  const int32_t* ids;
  float* out;
  int32_t* scratch;   // mm path only (matmul_id_scratch_bytes); null for mv
  int64_t tokens;     // T
  int64_t slots;      // S
  int64_t n_experts;  // E
  int64_t n;
  int64_t k;
  int64_t x_token_stride;    // floats between tokens of x
  int64_t x_slot_stride;     // floats between slots of x; 0 when x is shared by the slots
  int64_t w_expert_bytes;    // bytes between experts of w
  int64_t w_row_bytes;       // bytes between rows of one expert
  int64_t ids_stride;        // i32 elements between tokens of ids
  int64_t out_token_stride;  // floats
  int64_t out_slot_stride;   // floats
};

/// The op takes the mv path up to this many tokens.
inline constexpr int64_t kMatmulIdMvMaxTokens = 1;

/// Scratch bytes the mm path needs for T tokens, S slots, E experts (the mv path needs
/// none; passing this many bytes is always enough).
size_t matmul_id_scratch_bytes(int64_t tokens, int64_t slots, int64_t n_experts);

/// Expert-routed matmul (MoE): see ops/matmul_id.h.
void matmul_id(GraphSession& s, const TensorView& x, const TensorView& w, const TensorView& ids,
                                const TensorView& out, const BufferView& scratch,
                                const MatmulIdParams& params);

}  // namespace onepass::ops
