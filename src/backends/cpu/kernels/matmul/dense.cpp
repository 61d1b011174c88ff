// Row kernels of the dense weight types (f32, f16, bf16) for AVX2 and AVX-512: the Dense
// template of simd_rows.inl over each set's traits.
#include "rows.h"
#include "simd.h"

namespace onepass::cpu {

RowKernels dense_row_kernels(DType w, Isa isa) {
  RowKernels kernels;
#if ONEPASS_CPU_X86
  for_each_weight_type([&]<DType W>() {
    if constexpr (W == DType::f32 || W == DType::f16 || W == DType::bf16) {
      if (W != w) return;
      if (isa == Isa::avx2) {
        kernels = avx2::row_kernels_of<avx2::Avx2, avx2::Dense<avx2::Avx2, W>>();
      } else if (isa >= Isa::avx512) {
        kernels = avx512::row_kernels_of<avx512::Avx512, avx512::Dense<avx512::Avx512, W>>();
      }
    }
  });
#else
  (void)w;
  (void)isa;
#endif
  return kernels;
}

}  // namespace onepass::cpu
