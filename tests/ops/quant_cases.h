// Weight inputs and the matmul reference of cases_matmul.cpp, shared with the other op
// cases on quantized weights (matmul_affine, matmul_id, embedding).
#pragma once

#include <cstdint>
#include <vector>

#include "support/op_harness.h"

namespace onepass::testing::quant_cases {

/// Every weight type of the matmul cases (dense and GGML block formats).
const std::vector<DType>& weight_types();

/// Weights of `type` and shape [..., cols] with their dequantized values and the additive
/// term of each value's block (see cases_matmul.cpp).
TensorView weight_input(OpContext& c, DType type, Shape shape, std::vector<double>& values,
                        std::vector<double>& offsets, bool random_bits);

/// How a kernel rounds x before its integer dot products: to signed integers of at most
/// `levels` per `group` values, with a step of the group's largest |x| / levels. levels 0:
/// x stays f32.
struct XRounding {
  int64_t group = 0;
  double levels = 0;
};
inline constexpr XRounding kXF32{};
inline constexpr XRounding kXInt8PerBlock{32, 127};      // CUDA matrix-vector, block formats
inline constexpr XRounding kXInt16PerGroup{256, 32767};  // CPU SIMD matrix-vector (mv_x_rounding)
inline constexpr XRounding kXInt16PerBlock{32, 32767};   // CPU amx matrix-matrix: q4_0, q4_1, q8_0

/// The rounding of x by `backend`'s matrix-vector kernels (m <= ops::kMatmulMvMaxRows) for
/// weights of type t.
XRounding mv_x_rounding(const Backend& backend, DType t);
/// The rounding of x by `backend`'s matrix-matrix kernels (m > ops::kMatmulMvMaxRows) for
/// weights of type t.
XRounding mm_x_rounding(const Backend& backend, DType t);

/// Float64 reference of x·wᵀ and its tolerance `atol` (see cases_matmul.cpp).
std::vector<double> matmul_reference(const std::vector<double>& x, const std::vector<double>& w,
                                     const std::vector<double>& offsets, int64_t m, int64_t n,
                                     int64_t k, double& atol, XRounding x_rounding = kXF32,
                                     double input_rounding = 0);

}  // namespace onepass::testing::quant_cases
