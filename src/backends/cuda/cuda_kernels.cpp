// The one list of CUDA kernel families.
#include "cuda_kernels.h"

#include "cuda_backend.h"

namespace onepass::cuda {

void register_cuda_kernels(KernelRegistry& registry) {
  register_elementwise_cuda_kernels(registry);
  register_norm_cuda_kernels(registry);
  register_copy_cuda_kernels(registry);
  register_test_cuda_kernels(registry);
  register_fault_cuda_kernel(registry);
}

}  // namespace onepass::cuda
