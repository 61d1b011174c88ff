// The one list of CPU kernel families.
#include "cpu_kernels.h"

#include "cpu_backend.h"

namespace onepass::cpu {

void register_cpu_kernels(KernelRegistry& registry) {
  register_elementwise_kernels(registry);
  register_norm_kernels(registry);
  register_copy_kernels(registry);
  register_test_kernels(registry);
}

}  // namespace onepass::cpu
