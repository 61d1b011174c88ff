// CPU kernels: rope (not yet implemented).
#include "../cpu_kernels.h"

namespace onepass::cpu {

void register_rope_kernels(KernelRegistry& registry) { (void)registry; }

}  // namespace onepass::cpu
