// The fusion rules the ops layer offers to the graph passes.
#pragma once

#include "onepass/exec/fusion.h"

namespace onepass::ops {

/// Adds every fusion rule of the op library (RMS-norm -> mul, ...) to `rules`.
void register_fusion_rules(FusionRules& rules);
/// The rules around matrix-vector products (RMS-norm -> matvec, matvec -> residual add,
/// gate/up matvec -> SiLU x mul, Q/K/V matvec -> RoPE + KV-cache write); part of
/// register_fusion_rules.
void register_matmul_fusion_rules(FusionRules& rules);
/// argmax -> feed_token (the end of a greedy decode step); part of register_fusion_rules.
void register_argmax_fusion_rules(FusionRules& rules);

}  // namespace onepass::ops
