// The fusion rules the ops layer offers to the graph passes.
#pragma once

#include "onepass/exec/fusion.h"

namespace onepass::ops {

/// Adds every fusion rule of the op library (RMS-norm -> mul, ...) to `rules`.
void register_fusion_rules(FusionRules& rules);

}  // namespace onepass::ops
