// The CPU kernel test_mix_u32 (see synthetic.h).
#include <algorithm>
#include <utility>

#include "support/synthetic.h"

namespace onepass::testing {
namespace {

void mix_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  const auto& a = *static_cast<const MixArgs*>(raw);
  const int64_t begin = static_cast<int64_t>(first) * kMixBlock;
  const int64_t stop = std::min<int64_t>(a.n, static_cast<int64_t>(end) * kMixBlock);
  for (int64_t i = begin; i < stop; ++i) {
    const uint32_t b = a.b_len > 0 ? a.b[i % a.b_len] : 0u;
    a.out[i] = mix_u32(a.a[i], b, a.salt);
  }
}

}  // namespace

void add_cpu_synthetic_kernels(Backend& backend) {
  Kernel k;
  k.name = "test_mix_u32";
  k.args_size = sizeof(MixArgs);
  k.cpu = mix_kernel;
  backend.add_kernel(std::move(k));
}

}  // namespace onepass::testing
