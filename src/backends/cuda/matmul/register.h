// Registration of the matrix-vector and f32 matrix-matrix kernel families (one function
// per family file); register_matmul_cuda_kernels (register.cpp) calls them all.
#pragma once

#include "onepass/exec/kernel.h"

namespace onepass::cuda {

void register_mv_general_kernels(KernelRegistry& registry);  // mv_<W>_f32[_fused] (mv_general.cu)
void register_mv1_quant_kernels(KernelRegistry& registry);   // mv1_<W>_f32[_fused], block formats but q6_k
void register_mv1_bulk_kernels(KernelRegistry& registry);    // mv1_bulk_<W>_f32[_fused]
void register_mv1_q6k_kernels(KernelRegistry& registry);     // mv1_q6_k_f32[_fused]
void register_mv1_short_kernels(KernelRegistry& registry);   // mv1_short_<W>_f32[_fused]
void register_mv1_dense_kernels(KernelRegistry& registry);   // mv1_<W>_f32[_fused], W = f32, f16, bf16
void register_mm_f32_kernels(KernelRegistry& registry);      // mm_f32_f32

}  // namespace onepass::cuda
