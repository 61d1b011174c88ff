// Registration functions of the CUDA kernel families (one file each in kernels/ and matmul/).
#pragma once

#include "onepass/exec/kernel.h"

namespace onepass::cuda {

void register_elementwise_cuda_kernels(KernelRegistry& registry);
void register_norm_cuda_kernels(KernelRegistry& registry);
void register_copy_cuda_kernels(KernelRegistry& registry);
void register_activation_cuda_kernels(KernelRegistry& registry);
void register_softmax_cuda_kernels(KernelRegistry& registry);
void register_rope_cuda_kernels(KernelRegistry& registry);
void register_kv_cache_cuda_kernels(KernelRegistry& registry);
void register_argmax_cuda_kernels(KernelRegistry& registry);
void register_sample_cuda_kernels(KernelRegistry& registry);
void register_moe_cuda_kernels(KernelRegistry& registry);
void register_attention_cuda_kernels(KernelRegistry& registry);
void register_paged_attention_cuda_kernels(KernelRegistry& registry);
void register_matmul_cuda_kernels(KernelRegistry& registry);
void register_matmul_tc_cuda_kernels(KernelRegistry& registry);
void register_matmul_split_cuda_kernels(KernelRegistry& registry);
void register_matmul_x8_cuda_kernels(KernelRegistry& registry);
void register_matmul_blas_cuda_kernels(KernelRegistry& registry);
void register_matmul_gemm_x8_cuda_kernels(KernelRegistry& registry);
void register_attention_tc_cuda_kernels(KernelRegistry& registry);
void register_rope_kv_cuda_kernels(KernelRegistry& registry);
void register_embedding_cuda_kernels(KernelRegistry& registry);
void register_affine_cuda_kernels(KernelRegistry& registry);
void register_matmul_id_cuda_kernels(KernelRegistry& registry);

}  // namespace onepass::cuda
