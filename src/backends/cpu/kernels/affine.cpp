// CPU kernels: affine (not yet implemented).
#include "../cpu_kernels.h"

namespace onepass::cpu {

void register_affine_kernels(KernelRegistry& registry) { (void)registry; }

}  // namespace onepass::cpu
