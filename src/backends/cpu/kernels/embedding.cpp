// CPU kernels: embedding (not yet implemented).
#include "../cpu_kernels.h"

namespace onepass::cpu {

void register_embedding_kernels(KernelRegistry& registry) { (void)registry; }

}  // namespace onepass::cpu
