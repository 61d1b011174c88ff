// The CUDA backend's selectors for the products (matmul, matmul_fused, matmul_affine,
// matmul_id and its steps).
#pragma once

#include "onepass/exec/kernel_choice.h"

namespace onepass::cuda {

void register_matmul_selectors(KernelSelectors& selectors);

}  // namespace onepass::cuda
