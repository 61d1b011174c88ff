// The one list of CUDA kernel families.
#include "cuda_kernels.h"

#include "cuda_backend.h"

namespace onepass::cuda {

void register_cuda_kernels(KernelRegistry& registry) {
  register_elementwise_cuda_kernels(registry);
  register_norm_cuda_kernels(registry);
  register_copy_cuda_kernels(registry);
  register_activation_cuda_kernels(registry);
  register_softmax_cuda_kernels(registry);
  register_rope_cuda_kernels(registry);
  register_kv_cache_cuda_kernels(registry);
  register_argmax_cuda_kernels(registry);
  register_sample_cuda_kernels(registry);
  register_moe_cuda_kernels(registry);
  register_attention_cuda_kernels(registry);
  register_paged_attention_cuda_kernels(registry);
  register_attention_tc_cuda_kernels(registry);
  register_matmul_cuda_kernels(registry);
  register_matmul_tc_cuda_kernels(registry);
  register_matmul_split_cuda_kernels(registry);
  register_matmul_x8_cuda_kernels(registry);
  register_matmul_blas_cuda_kernels(registry);
  register_matmul_gemm_x8_cuda_kernels(registry);
  register_rope_kv_cuda_kernels(registry);
  register_embedding_cuda_kernels(registry);
  register_affine_cuda_kernels(registry);
  register_matmul_id_cuda_kernels(registry);
}

}  // namespace onepass::cuda
