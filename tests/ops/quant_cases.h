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

/// Float64 reference of x·wᵀ and its tolerance `atol` (see cases_matmul.cpp).
std::vector<double> matmul_reference(const std::vector<double>& x, const std::vector<double>& w,
                                     const std::vector<double>& offsets, int64_t m, int64_t n,
                                     int64_t k, double& atol, bool int8_x = false,
                                     double input_rounding = 0);

}  // namespace onepass::testing::quant_cases
