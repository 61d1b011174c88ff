// Kernel names both backends register alike, built in one place.
#pragma once

#include <string>

#include "onepass/core/dtype.h"
#include "onepass/core/error.h"

namespace onepass {

/// The MLX affine products: "mv_affine_q4_g64_bf16_f32" and the like; `mv` selects the
/// matrix-vector kernel.
inline std::string affine_kernel_name(bool mv, int bits, int group_size, DType scale_type) {
  return cat(mv ? "mv" : "mm", "_affine_q", bits, "_g", group_size, "_", dtype_name(scale_type), "_f32");
}

}  // namespace onepass
