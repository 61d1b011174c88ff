// CPU kernels mv_<W>_f32, mm_<W>_f32 and mv_fused_<W>_f32 (dense and GGML block formats): registration.
//
// x is f32, or rounded to 16-bit integers per group for the integer row kernels
// (block32_int16.cpp); products accumulate in f32.
#include <string>

#include "../../cpu_kernels.h"
#include "../float_types.h"
#include "onepass/ops/matmul.h"
#include "rows.h"

namespace onepass::cpu {

void register_matmul_kernels(KernelRegistry& registry) {
  for (DType w : kMatmulWeightTypes) {
    const std::string name(dtype_name(w));
    registry.add(make_cpu_kernel<ops::MatmulArgs>("mv_" + name + "_f32", mv_kernel(w)));
    registry.add(make_cpu_kernel<ops::MatmulArgs>("mm_" + name + "_f32", mm_kernel(w)));
    registry.add(make_cpu_kernel<ops::FusedMatvecArgs>("mv_fused_" + name + "_f32", mv_fused_kernel(w)));
  }
}

bool prepares_input_per_call(CpuKernelFn fn) {
  if (fn == nullptr) return false;
  for (DType w : kMatmulWeightTypes) {
    if (fn == mv_kernel(w) || fn == mv_fused_kernel(w)) return true;
    if (fn == mm_kernel(w) && mm_packs_x_per_call(w)) return true;
  }
  return false;
}

}  // namespace onepass::cpu
