// Pieces both backends' kernel choices use: kernel names built alike, and grid sizes
// checked against the launch limits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "onepass/core/dtype.h"
#include "onepass/core/error.h"

namespace onepass {

/// The MLX affine products: "mv_affine_q4_g64_bf16_f32" and the like; `mv` selects the
/// matrix-vector kernel.
inline std::string affine_kernel_name(bool mv, int bits, int group_size, DType scale_type) {
  return cat(mv ? "mv" : "mm", "_affine_q", bits, "_g", group_size, "_", dtype_name(scale_type), "_f32");
}

/// Blocks of `per_block` items covering `count` (at least one); `op` names the error.
inline uint32_t grid_blocks(int64_t count, int64_t per_block, std::string_view op) {
  const int64_t b = std::max<int64_t>(1, (count + per_block - 1) / per_block);
  check(b <= 0x7fffffff, op, "launch of ", b, " blocks in one dimension is too large");
  return static_cast<uint32_t>(b);
}

/// One block per item (at least one).
inline uint32_t grid_extent(int64_t count, std::string_view op) {
  check(count <= 0x7fffffff, op, "too many rows: ", count);
  return static_cast<uint32_t>(std::max<int64_t>(count, 1));
}

}  // namespace onepass
