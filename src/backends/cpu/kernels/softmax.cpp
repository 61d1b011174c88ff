// CPU kernels: softmax (not yet implemented).
#include "../cpu_kernels.h"

namespace onepass::cpu {

void register_softmax_kernels(KernelRegistry& registry) { (void)registry; }

}  // namespace onepass::cpu
