// CPU kernels: kv_write_<S>_<C>. One source row (token, head) per block.
#include "onepass/ops/kv_cache.h"

#include "../cpu_kernels.h"
#include "float_types.h"

namespace onepass::cpu {
namespace {

template <DType Src, DType Cache>
void kv_write_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  using In = Elem<Src>;
  using Out = Elem<Cache>;
  const auto& a = *static_cast<const ops::KvWriteArgs*>(raw);
  for (uint64_t block = first; block < end; ++block) {
    const auto row = static_cast<int64_t>(block);
    if (row >= a.tokens * a.n_kv_head) break;
    const int64_t token = row / a.n_kv_head;
    const int64_t head = row % a.n_kv_head;
    const int64_t position = a.positions[token];
    // Positions come from device data the host never saw: skip, never write outside.
    if (position < 0 || position >= a.ctx) continue;
    const auto* s = static_cast<const typename In::storage*>(a.src) + row * a.src_stride;
    auto* d =
        static_cast<typename Out::storage*>(a.cache) + (head * a.ctx + position) * a.cache_stride;
    for (int64_t c = 0; c < a.head_dim; ++c) d[c] = Out::store(In::load(s[c]));
  }
}

}  // namespace

void register_kv_cache_kernels(KernelRegistry& registry) {
  for_each_float_type([&]<DType S>() {
    for_each_float_type([&]<DType C>() {
      registry.add(make_cpu_kernel<ops::KvWriteArgs>(
          std::string("kv_write_") + Elem<S>::name + "_" + Elem<C>::name, kv_write_kernel<S, C>));
    });
  });
}

}  // namespace onepass::cpu
