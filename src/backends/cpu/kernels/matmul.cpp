// CPU kernels: matmul (not yet implemented).
#include "../cpu_kernels.h"

namespace onepass::cpu {

void register_matmul_kernels(KernelRegistry& registry) { (void)registry; }

}  // namespace onepass::cpu
