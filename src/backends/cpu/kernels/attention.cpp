// CPU kernels: attention (not yet implemented).
#include "../cpu_kernels.h"

namespace onepass::cpu {

void register_attention_kernels(KernelRegistry& registry) { (void)registry; }

}  // namespace onepass::cpu
