// CPU kernels: argmax (not yet implemented).
#include "../cpu_kernels.h"

namespace onepass::cpu {

void register_argmax_kernels(KernelRegistry& registry) { (void)registry; }

}  // namespace onepass::cpu
