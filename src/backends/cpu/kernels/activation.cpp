// CPU kernels: activation (not yet implemented).
#include "../cpu_kernels.h"

namespace onepass::cpu {

void register_activation_kernels(KernelRegistry& registry) { (void)registry; }

}  // namespace onepass::cpu
