// CPU kernel: test_mix_u32 (synthetic kernel for the execution-core property tests).
#include <algorithm>

#include "onepass/ops/synthetic.h"
#include "../cpu_kernels.h"
#include "float_types.h"

namespace onepass::cpu {
namespace {

void mix_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  const auto& a = *static_cast<const ops::MixArgs*>(raw);
  const int64_t begin = static_cast<int64_t>(first) * ops::kMixBlock;
  const int64_t stop = std::min<int64_t>(a.n, static_cast<int64_t>(end) * ops::kMixBlock);
  for (int64_t i = begin; i < stop; ++i) {
    const uint32_t b = a.b_len > 0 ? a.b[i % a.b_len] : 0u;
    a.out[i] = ops::mix_u32(a.a[i], b, a.salt);
  }
}

}  // namespace

void register_test_kernels(KernelRegistry& registry) {
  registry.add(make_cpu_kernel<ops::MixArgs>("test_mix_u32", mix_kernel));
}

}  // namespace onepass::cpu
