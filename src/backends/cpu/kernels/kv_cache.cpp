// CPU kernels: kv_cache (not yet implemented).
#include "../cpu_kernels.h"

namespace onepass::cpu {

void register_kv_cache_kernels(KernelRegistry& registry) { (void)registry; }

}  // namespace onepass::cpu
