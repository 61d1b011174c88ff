// Registration functions of the CUDA kernel families (one file each in kernels/).
#pragma once

#include "onepass/exec/kernel.h"

namespace onepass::cuda {

void register_elementwise_cuda_kernels(KernelRegistry& registry);
void register_norm_cuda_kernels(KernelRegistry& registry);
void register_copy_cuda_kernels(KernelRegistry& registry);
void register_test_cuda_kernels(KernelRegistry& registry);
void register_fault_cuda_kernel(KernelRegistry& registry);

}  // namespace onepass::cuda
