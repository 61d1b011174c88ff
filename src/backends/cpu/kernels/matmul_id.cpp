// CPU kernels: matmul_id (not yet implemented).
#include "../cpu_kernels.h"

namespace onepass::cpu {

void register_matmul_id_kernels(KernelRegistry& registry) { (void)registry; }

}  // namespace onepass::cpu
