// The one list of CPU kernel families.
#include "cpu_kernels.h"

#include "cpu_backend.h"

namespace onepass::cpu {

void register_cpu_kernels(KernelRegistry& registry) {
  register_elementwise_kernels(registry);
  register_norm_kernels(registry);
  register_copy_kernels(registry);
  register_activation_kernels(registry);
  register_softmax_kernels(registry);
  register_rope_kernels(registry);
  register_rope_kv_kernels(registry);
  register_kv_cache_kernels(registry);
  register_argmax_kernels(registry);
  register_sample_kernels(registry);
  register_moe_kernels(registry);
  register_attention_kernels(registry);
  register_paged_attention_kernels(registry);
  register_matmul_kernels(registry);
  register_affine_kernels(registry);
  register_matmul_id_kernels(registry);
  register_embedding_kernels(registry);
}

}  // namespace onepass::cpu
