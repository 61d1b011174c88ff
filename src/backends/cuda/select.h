// The CUDA backend's kernel selectors (one per op; see select.cpp and matmul/select.cpp).
#pragma once

#include "onepass/exec/kernel_choice.h"

namespace onepass::cuda {

void register_cuda_selectors(KernelSelectors& selectors);

}  // namespace onepass::cuda
