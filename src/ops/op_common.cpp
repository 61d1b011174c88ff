#include "op_common.h"

#include <algorithm>

#include "onepass/ops/elementwise.h"

namespace onepass::ops::detail {

LaunchDims elementwise_dims(const Backend& backend, int64_t elements) {
  LaunchDims dims;
  if (on_cpu(backend)) {
    dims.grid.x = static_cast<uint32_t>(
        std::max<int64_t>(1, (elements + kCpuElementwiseBlock - 1) / kCpuElementwiseBlock));
    return dims;
  }
  constexpr int64_t kThreads = 256;
  constexpr int64_t kPerThread = 4;
  const int64_t blocks = (elements + kThreads * kPerThread - 1) / (kThreads * kPerThread);
  dims.block.x = kThreads;
  dims.grid.x = static_cast<uint32_t>(std::clamp<int64_t>(blocks, 1, 65535 * 16));
  return dims;
}

LaunchDims row_dims(const Backend& backend, int64_t rows, int64_t cols) {
  LaunchDims dims;
  check(rows <= 0x7fffffff, "ops", "too many rows: ", rows);
  dims.grid.x = static_cast<uint32_t>(std::max<int64_t>(rows, 1));
  if (!on_cpu(backend)) {
    // Enough threads that each handles a few values, a whole number of warps.
    int64_t threads = std::clamp<int64_t>((cols + 3) / 4, 32, 1024);
    threads = (threads + 31) / 32 * 32;
    dims.block.x = static_cast<uint32_t>(threads);
  }
  return dims;
}

}  // namespace onepass::ops::detail
