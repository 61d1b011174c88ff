// mv_<W>_f32 on the CPU: each block dots its kCpuMvRowsPerBlock weight rows with all M rows
// of x, decoding each weight row once (the row kernels' dot); with one row of x, the block's
// weight rows go through RowDots::rows together.
#include <algorithm>

#include "../../cpu_launch.h"
#include "onepass/ops/matmul.h"
#include "rows.h"

namespace onepass::cpu {
namespace {

template <DType W>
void mv(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  const auto& a = *static_cast<const ops::MatmulArgs*>(raw);
  const RowDots dot(W, active_isa(), a.x, a.x_stride, a.m, a.k);
  const auto* w = static_cast<const uint8_t*>(a.w);
  for (uint64_t b = first; b < end; ++b) {
    const int64_t n0 = static_cast<int64_t>(b) * kCpuMvRowsPerBlock;
    const int64_t n1 = std::min(a.n, n0 + kCpuMvRowsPerBlock);
    if (a.m == 1) {
      dot.rows(w + n0 * a.w_row_bytes, a.w_row_bytes, n1 - n0, a.out + n0);
      continue;
    }
    for (int64_t n = n0; n < n1; ++n) {
      dot(w + n * a.w_row_bytes, a.out + n, a.out_stride);
    }
  }
}

}  // namespace

CpuKernelFn mv_kernel(DType w) {
  CpuKernelFn fn = nullptr;
  for_each_weight_type([&]<DType W>() {
    if (W == w) fn = mv<W>;
  });
  return fn;
}

}  // namespace onepass::cpu
