// register_matmul_cuda_kernels: the mv, mv1 and f32 mm kernel families of this folder. The
// tensor-core, cuBLAS and expert-routed kernels register themselves (cuda_kernels.cpp).
#include "register.h"

#include "../cuda_kernels.h"

namespace onepass::cuda {

void register_matmul_cuda_kernels(KernelRegistry& registry) {
  register_mv_general_kernels(registry);
  register_mv1_quant_kernels(registry);
  register_mv1_bulk_kernels(registry);
  register_mv1_q6k_kernels(registry);
  register_mv1_short_kernels(registry);
  register_mv1_dense_kernels(registry);
  register_mm_f32_kernels(registry);
}

}  // namespace onepass::cuda
