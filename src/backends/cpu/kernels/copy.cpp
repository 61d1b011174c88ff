// CPU kernels: copy_<S>_<D> between f32, f16 and bf16.
#include "onepass/ops/copy.h"

#include <algorithm>
#include <cstring>

#include "onepass/ops/elementwise.h"
#include "../cpu_kernels.h"
#include "../cpu_launch.h"
#include "float_types.h"

namespace onepass::cpu {
namespace {

template <DType Src, DType Dst>
void copy_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  using In = Elem<Src>;
  using Out = Elem<Dst>;
  const auto& a = *static_cast<const ops::CopyArgs*>(raw);
  for_spans(a.rows, a.cols, first, end, [&](int64_t r, int64_t c0, int64_t c1) {
    const auto* s = static_cast<const typename In::storage*>(a.src) + r * a.src_stride;
    auto* d = static_cast<typename Out::storage*>(a.dst) + r * a.dst_stride;
    for (int64_t c = c0; c < c1; ++c) d[c] = Out::store(In::load(s[c]));
  });
}

void copy_bytes_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  const auto& a = *static_cast<const ops::CopyBytesArgs*>(raw);
  const uint64_t begin = first * kCpuCopyBytesBlock;
  const uint64_t stop = std::min<uint64_t>(a.bytes, end * kCpuCopyBytesBlock);
  if (begin < stop) std::memcpy(static_cast<char*>(a.dst) + begin, static_cast<const char*>(a.src) + begin, stop - begin);
}

}  // namespace

void register_copy_kernels(KernelRegistry& registry) {
  registry.add(make_cpu_kernel<ops::CopyBytesArgs>("copy_bytes", copy_bytes_kernel));
  for_each_float_type([&]<DType S>() {
    for_each_float_type([&]<DType D>() {
      registry.add(make_cpu_kernel<ops::CopyArgs>(
          std::string("copy_") + Elem<S>::name + "_" + Elem<D>::name, copy_kernel<S, D>));
    });
  });
}

}  // namespace onepass::cpu
