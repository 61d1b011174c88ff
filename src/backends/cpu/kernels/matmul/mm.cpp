// mm_<W>_f32 on the CPU: each block decodes its kCpuMmRowsPerBlock weight rows to f32 once
// (f32 rows are used in place) and multiplies them with its kCpuMmColsPerBlock rows of x
// through gemm_rows_f32.
#include <algorithm>

#include "../../cpu_launch.h"
#include "onepass/ops/matmul.h"
#include "rows.h"

namespace onepass::cpu {
namespace {

template <DType W>
void mm(const void* raw, const LaunchDims& dims, uint64_t first, uint64_t end) {
  const auto& a = *static_cast<const ops::MatmulArgs*>(raw);
  const Isa isa = active_isa();
  const DecodeRowFn decode = row_kernels(W, isa).decode;
  const auto* w = static_cast<const uint8_t*>(a.w);
  const float* x_rows[kCpuMmColsPerBlock];
  float* out_rows[kCpuMmColsPerBlock];
  for (uint64_t b = first; b < end; ++b) {
    const int64_t n0 = static_cast<int64_t>(b % dims.grid.x) * kCpuMmRowsPerBlock;
    const int64_t m0 = static_cast<int64_t>(b / dims.grid.x) * kCpuMmColsPerBlock;
    const int64_t n_count = std::min(a.n - n0, kCpuMmRowsPerBlock);
    const int64_t m_count = std::min(a.m - m0, kCpuMmColsPerBlock);
    if (n_count <= 0 || m_count <= 0) continue;
    const float* tile;
    int64_t tile_stride;
    if (W == DType::f32 && a.w_row_bytes % 4 == 0) {
      tile = reinterpret_cast<const float*>(w + n0 * a.w_row_bytes);
      tile_stride = a.w_row_bytes / 4;
    } else {
      float* buffer = thread_scratch(n_count * a.k);
      for (int64_t j = 0; j < n_count; ++j)
        decode(w + (n0 + j) * a.w_row_bytes, a.k, buffer + j * a.k);
      tile = buffer;
      tile_stride = a.k;
    }
    for (int64_t i = 0; i < m_count; ++i) {
      x_rows[i] = a.x + (m0 + i) * a.x_stride;
      out_rows[i] = a.out + (m0 + i) * a.out_stride + n0;
    }
    gemm_rows_f32(x_rows, m_count, tile, tile_stride, n_count, a.k, out_rows, isa);
  }
}

}  // namespace

CpuKernelFn mm_kernel(DType w) {
  CpuKernelFn fn = nullptr;
  for_each_weight_type([&]<DType W>() {
    if (W == w) fn = mm<W>;
  });
  return fn;
}

}  // namespace onepass::cpu
