// gemm_rows_f32, the small f32 GEMM of the mm kernels (matmul, affine, matmul_id), and
// thread_scratch, the per-thread buffer their decoded weight tiles live in.
#include <cstdlib>
#include <memory>
#include <vector>

#include "onepass/core/error.h"
#include "simd.h"

namespace onepass::cpu {
namespace {

void portable_gemm(const float* const* x_rows, int64_t m, const float* w, int64_t w_stride,
                   int64_t n, int64_t k, float* const* out_rows) {
  const int64_t vec = k / 8 * 8;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const float* xr = x_rows[i];
      const float* wr = w + j * w_stride;
      float acc[8] = {};
      for (int64_t c = 0; c < vec; c += 8) {
        for (int l = 0; l < 8; ++l) acc[l] += xr[c + l] * wr[c + l];
      }
      float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
      for (int64_t c = vec; c < k; ++c) sum += xr[c] * wr[c];
      out_rows[i][j] = sum;
    }
  }
}

}  // namespace
}  // namespace onepass::cpu

#if ONEPASS_CPU_X86
ONEPASS_AVX2_BEGIN
namespace onepass::cpu::avx2 {
namespace {

// One output element: a single accumulator over k in steps of S::kWidth, then the
// horizontal sum, then the scalar tail, whichever tile shape computed it.
template <typename S, int MR, int NR>
inline void gemm_tile(const float* const* x_rows, const float* w, int64_t w_stride, int64_t k,
                      float* const* out_rows, int64_t n0) {
  using V = typename S::V;
  V acc[MR][NR];
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) acc[i][j] = S::zero();
  }
  const int64_t vec = k / S::kWidth * S::kWidth;
  for (int64_t c = 0; c < vec; c += S::kWidth) {
    V wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = S::load(w + (n0 + j) * w_stride + c);
    for (int i = 0; i < MR; ++i) {
      const V xv = S::load(x_rows[i] + c);
      for (int j = 0; j < NR; ++j) acc[i][j] = S::fmadd(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      const float* wr = w + (n0 + j) * w_stride;
      float sum = S::hsum(acc[i][j]);
      for (int64_t c = vec; c < k; ++c) sum += x_rows[i][c] * wr[c];
      out_rows[i][n0 + j] = sum;
    }
  }
}

template <typename S>
void gemm(const float* const* x_rows, int64_t m, const float* w, int64_t w_stride, int64_t n,
          int64_t k, float* const* out_rows) {
  // 2 x 4 accumulators + 4 weight vectors + one x vector fit the 16 AVX2 registers.
  constexpr int kMr = 2;
  constexpr int kNr = 4;
  int64_t i = 0;
  for (; i + kMr <= m; i += kMr) {
    int64_t j = 0;
    for (; j + kNr <= n; j += kNr)
      gemm_tile<S, kMr, kNr>(x_rows + i, w, w_stride, k, out_rows + i, j);
    for (; j < n; ++j) gemm_tile<S, kMr, 1>(x_rows + i, w, w_stride, k, out_rows + i, j);
  }
  for (; i < m; ++i) {
    int64_t j = 0;
    for (; j + kNr <= n; j += kNr)
      gemm_tile<S, 1, kNr>(x_rows + i, w, w_stride, k, out_rows + i, j);
    for (; j < n; ++j) gemm_tile<S, 1, 1>(x_rows + i, w, w_stride, k, out_rows + i, j);
  }
}

}  // namespace
}  // namespace onepass::cpu::avx2
ONEPASS_AVX2_END
#endif  // ONEPASS_CPU_X86

namespace onepass::cpu {

void gemm_rows_f32(const float* const* x_rows, int64_t m, const float* w, int64_t w_stride,
                   int64_t n, int64_t k, float* const* out_rows, Isa isa) {
#if ONEPASS_CPU_X86
  // The AVX2 GEMM serves AVX-512 machines too (the mm path is not where decode time goes).
  if (isa != Isa::portable) return avx2::gemm<avx2::Avx2>(x_rows, m, w, w_stride, n, k, out_rows);
#endif
  (void)isa;
  portable_gemm(x_rows, m, w, w_stride, n, k, out_rows);
}

// 64-byte aligned: the SIMD row kernels read x (the fused products' normalised x lives
// here) in 64-byte vectors, and one that straddles two cache lines costs two loads (16-byte
// aligned x made a q4_1 / q8_0 matrix-vector product ~6% slower on Zen 4).
float* thread_scratch(int64_t count, int slot) {
  constexpr size_t kLine = 64;
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<float, Free> buffers[kThreadScratchSlots];
  thread_local int64_t capacities[kThreadScratchSlots] = {};
  check(slot >= 0 && slot < kThreadScratchSlots, "cpu", "no thread scratch slot ", slot);
  std::unique_ptr<float, Free>& buffer = buffers[slot];
  int64_t& capacity = capacities[slot];
  if (capacity < count) {
    const size_t bytes = (static_cast<size_t>(count) * sizeof(float) + kLine - 1) / kLine * kLine;
    auto* grown = static_cast<float*>(std::aligned_alloc(kLine, bytes));
    check(grown != nullptr, "cpu", "out of memory: no ", bytes, " bytes of per-thread scratch");
    buffer.reset(grown);
    capacity = static_cast<int64_t>(bytes / sizeof(float));
  }
  return buffer.get();
}

}  // namespace onepass::cpu
