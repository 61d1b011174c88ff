// CPU kernels mv_<W>_f32, mm_<W>_f32 and mv_fused_<W>_f32 (dense and GGML block formats): registration.
//
// Activations stay f32 throughout (no quantisation of x), so results differ from a float64
// reference only by f32 rounding and accumulation order.
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

}  // namespace onepass::cpu
