// Row-level building blocks of the CPU matrix kernels (matmul, affine, matmul_id,
// embedding): dot products of one weight row with a few rows of x, row decoding to f32,
// and a small f32 GEMM. Each exists in a portable version and, on x86-64, AVX2 and
// AVX-512 versions chosen at run time. Implemented in matmul/.
#pragma once

#include <cstdint>

#include "onepass/core/dtype.h"

namespace onepass::cpu {

enum class Isa : uint8_t {
  portable,  // plain C++ the compiler may vectorise for the baseline ISA
  avx2,      // AVX2 + FMA + F16C
  avx512,    // AVX-512F on top of avx2 (16-value table lookups decode the 4-bit formats)
};

/// The widest Isa this CPU supports (checked once).
Isa best_isa();
/// Whether `isa` can run on this CPU.
bool isa_supported(Isa isa);
/// The Isa the kernels use: best_isa(), capped by the environment variable
/// ONEPASS_CPU_ISA=portable|avx2|avx512 (read once; for benchmarking and testing the
/// narrower paths), or whatever set_active_isa() chose last.
Isa active_isa();
/// Makes the kernels use `isa` from their next dispatch on (tests run every path this
/// way); call it only while no work is running. Throws Error when the CPU lacks it.
void set_active_isa(Isa isa);

/// out[i * out_stride] = Σ_j x[i * x_stride + j] · w_row[j] for i < m, with the weight row
/// of k values in the function's weight type; f32 accumulation. Rows of x share one decode
/// of the weight row in groups of up to 4 (AVX2) or 8 (portable, AVX-512).
using DotRowsFn = void (*)(const void* w_row, const float* x, int64_t x_stride, int64_t m,
                           int64_t k, float* out, int64_t out_stride);
/// dst[j] = w_row[j] as f32 for j < k.
using DecodeRowFn = void (*)(const void* w_row, int64_t k, float* dst);

struct RowKernels {
  DotRowsFn dot = nullptr;
  DecodeRowFn decode = nullptr;
};

/// Row kernels for a matmul weight type (kMatmulWeightTypes); throws for other types.
const RowKernels& row_kernels(DType weight_type, Isa isa);

/// out_rows[i][j] = Σ_k x_rows[i][k] · w[j * w_stride + k] for i < m, j < n. The value of
/// each element depends only on its two input rows, not on m, n or the position in the
/// tile, so callers may split the work any way.
void gemm_rows_f32(const float* const* x_rows, int64_t m, const float* w, int64_t w_stride,
                   int64_t n, int64_t k, float* const* out_rows, Isa isa);

/// Every f16 bit pattern as f32 (256 KiB). The SIMD decoders read block and group scales
/// through it: a load and a broadcast from memory, where converting in registers takes
/// instructions on the shuffle port that the nibble decode already keeps busy.
extern const float* const kHalfToFloat;

/// A per-thread f32 buffer of at least `count` values (reused across calls).
float* thread_scratch(int64_t count);

/// The weight types of matmul, matmul_id and embedding, in registration order.
inline constexpr DType kMatmulWeightTypes[] = {DType::f32,  DType::f16,  DType::bf16,
                                               DType::q4_0, DType::q4_1, DType::q8_0,
                                               DType::q4_k, DType::q5_k, DType::q6_k,
                                               DType::q5_0, DType::q5_1, DType::q2_k,
                                               DType::q3_k, DType::iq4_nl, DType::iq4_xs};

}  // namespace onepass::cpu
