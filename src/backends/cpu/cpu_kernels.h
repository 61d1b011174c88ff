// Registration functions of the CPU kernel families (one file each in kernels/).
#pragma once

#include "onepass/exec/kernel.h"

namespace onepass::cpu {

void register_elementwise_kernels(KernelRegistry& registry);  // add, mul, scale
void register_norm_kernels(KernelRegistry& registry);         // rms_norm*, add_rms_norm
void register_copy_kernels(KernelRegistry& registry);         // copy/convert
void register_activation_kernels(KernelRegistry& registry);   // gelu, silu, silu_mul, softcap
void register_softmax_kernels(KernelRegistry& registry);
void register_rope_kernels(KernelRegistry& registry);
void register_rope_kv_kernels(KernelRegistry& registry);     // rope + kv_write fused
void register_kv_cache_kernels(KernelRegistry& registry);     // kv_write
void register_argmax_kernels(KernelRegistry& registry);
void register_sample_kernels(KernelRegistry& registry);      // per-row token sampling
void register_moe_kernels(KernelRegistry& registry);
void register_attention_kernels(KernelRegistry& registry);    // sdpa, flash_decode (+ merge)
void register_paged_attention_kernels(KernelRegistry& registry);
void register_matmul_kernels(KernelRegistry& registry);       // dense and GGML block formats
void register_affine_kernels(KernelRegistry& registry);       // MLX affine quantized matmul
void register_matmul_id_kernels(KernelRegistry& registry);    // expert-routed matmul
void register_embedding_kernels(KernelRegistry& registry);    // embedding gather

/// True for the kernels whose every call first prepares all of its input for the blocks
/// it runs (the matrix-vector products round x, or normalise it for a fused norm; the AMX
/// matrix-matrix products pack x into tiles): a
/// dispatch of such a kernel is cut into one even run of blocks per thread, so that work
/// is done once per thread rather than once per task.
bool prepares_input_per_call(CpuKernelFn fn);

}  // namespace onepass::cpu
