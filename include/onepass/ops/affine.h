// MLX affine quantized matmul: out [M, N] = x [M, K] · wᵀ with w = scale * q + bias per
// group of weights (format and host quantize/dequantize in ops/quant.h).
#pragma once

#include <cstdint>
#include <string>

#include "onepass/core/dtype.h"
#include "onepass/exec/graph_session.h"

namespace onepass::ops {

/// matmul_affine: out [M, N] = x [M, K] · wᵀ for the MLX affine formats (bits 4, 8; group
/// 32, 64, 128; scales and biases f16 or bf16), each weight scale * q + bias per group.
/// f32 accumulation. The CPU kernels decode each weight (scale * q + bias, one FMA) and
/// accumulate x·w; a kernel may instead form scale · Σ x·q + bias · Σ x per group (the
/// op cases' tolerance allows for both).
struct AffineMatmulArgs {
  const float* x;      // [M, K], rows x_stride floats apart
  const uint32_t* w;   // [N, K * bits / 32] packed, rows w_stride words apart
  const void* scales;  // [N, K / group] f16 or bf16, rows scale_stride elements apart
  const void* biases;  // [N, K / group], rows bias_stride elements apart
  float* out;          // [M, N], rows out_stride floats apart
  int64_t m;
  int64_t n;
  int64_t k;  // a multiple of the group size
  int64_t x_stride;
  int64_t w_stride;      // u32 words
  int64_t scale_stride;  // elements
  int64_t bias_stride;   // elements
  int64_t out_stride;
  int32_t bits;        // the format (AffineFormat), which selects the kernel variant
  int32_t group_size;
};


/// MLX affine quantized matmul: w packed u32 [N, K*bits/32], scales and biases
/// [N, K/group] in the format's scale dtype.
void matmul_affine(GraphSession& s, const TensorView& x, const TensorView& w, const TensorView& scales,
                                    const TensorView& biases, const TensorView& out, const AffineFormat& format);

}  // namespace onepass::ops
