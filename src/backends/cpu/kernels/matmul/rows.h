// Internal interface of the CPU matmul kernels (kernels/matmul/): the row kernels of each
// weight-type family per instruction set, which row_kernels() (dispatch.cpp) collects into
// one table per set, and the mv / mm kernel entry points that register.cpp registers.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <utility>

#include "../quant_blocks.h"
#include "onepass/core/dtype.h"
#include "onepass/exec/kernel.h"

namespace onepass::cpu {

template <typename F, size_t... I>
void for_each_weight_type_at(F& f, std::index_sequence<I...>) {
  (f.template operator()<kMatmulWeightTypes[I]>(), ...);
}

/// Calls f.template operator()<W>() for each W of kMatmulWeightTypes, in order.
template <typename F>
void for_each_weight_type(F&& f) {
  for_each_weight_type_at(f, std::make_index_sequence<std::size(kMatmulWeightTypes)>{});
}

/// One weight type's SIMD row kernels for each x86 instruction set.
struct SimdRowKernels {
  DType type;
  RowKernels avx512;
  RowKernels avx2;
};

/// The kernels of the entry for `w`, for isa = avx2 or avx512; empty (null) when no entry
/// is for `w`.
inline RowKernels pick_row_kernels(DType w, Isa isa,
                                   std::initializer_list<SimdRowKernels> entries) {
  for (const SimdRowKernels& e : entries) {
    if (e.type == w) return isa == Isa::avx512 ? e.avx512 : e.avx2;
  }
  return {};
}

// Row kernels of `w` in the portable version (portable.cpp).
RowKernels portable_row_kernels(DType w);
// Row kernels of `w` for isa = avx2 or avx512, used on x86-64 only; empty (null) when the
// family does not hold `w`.
RowKernels dense_row_kernels(DType w, Isa isa);       // f32, f16, bf16 (dense.cpp)
RowKernels block32_row_kernels(DType w, Isa isa);     // q4_0, q4_1, q8_0 (block32.cpp)
RowKernels kquant_row_kernels(DType w, Isa isa);      // q4_k, q5_k, q6_k (kquant.cpp)
RowKernels q5_blocks_row_kernels(DType w, Isa isa);   // q5_0, q5_1 (q5_blocks.cpp)
RowKernels iq4_row_kernels(DType w, Isa isa);         // iq4_nl, iq4_xs (iq4.cpp)
RowKernels kquant_low_row_kernels(DType w, Isa isa);  // q2_k, q3_k (kquant_low.cpp)

/// The CpuKernelFn of mv_<w>_f32 (mv.cpp), mm_<w>_f32 (mm.cpp) and mv_fused_<w>_f32
/// (mv_fused.cpp).
CpuKernelFn mv_kernel(DType w);
CpuKernelFn mm_kernel(DType w);
CpuKernelFn mv_fused_kernel(DType w);

}  // namespace onepass::cpu
