// Registration functions of the CPU kernel families (one per file in kernels/).
#pragma once

#include "onepass/exec/kernel.h"

namespace onepass::cpu {

void register_elementwise_kernels(KernelRegistry& registry);
void register_norm_kernels(KernelRegistry& registry);
void register_copy_kernels(KernelRegistry& registry);
void register_test_kernels(KernelRegistry& registry);

}  // namespace onepass::cpu
