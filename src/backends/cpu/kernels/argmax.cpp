// CPU kernel: argmax_<T>. One row per block.
#include "onepass/ops/argmax.h"

#include <limits>

#include "../cpu_kernels.h"
#include "float_types.h"

namespace onepass::cpu {
namespace {

template <DType T>
void argmax_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  using E = Elem<T>;
  using S = typename E::storage;
  const auto& a = *static_cast<const ops::ArgmaxArgs*>(raw);
  for (uint64_t block = first; block < end; ++block) {
    const auto r = static_cast<int64_t>(block);
    if (r >= a.rows) break;
    const S* x = static_cast<const S*>(a.x) + r * a.x_stride;
    // Pass 1: the largest non-NaN value (v > max is false for NaN, so NaN never enters).
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < a.cols; ++c) {
      const float v = E::load(x[c]);
      max = v > max ? v : max;
    }
    // Pass 2: its first occurrence, which is the lowest index on ties. A row without any
    // number (all NaN) matches nothing and gives 0.
    int32_t index = 0;
    for (int64_t c = 0; c < a.cols; ++c) {
      if (E::load(x[c]) == max) {
        index = static_cast<int32_t>(c);
        break;
      }
    }
    a.out[r] = index;
  }
}

// argmax_<T>_feed: the argmax of the one row, then feed_token of it.
template <DType T>
void argmax_feed_kernel(const void* raw, const LaunchDims& dims, uint64_t first, uint64_t end) {
  const auto& a = *static_cast<const ops::ArgmaxFeedArgs*>(raw);
  argmax_kernel<T>(&a.argmax, dims, first, end);
  if (first == 0 && first < end) ops::feed_token_store(a.feed, a.argmax.out[0]);
}

void feed_token_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  if (first < end) ops::feed_token_apply(*static_cast<const ops::FeedTokenArgs*>(raw));
}

}  // namespace

void register_argmax_kernels(KernelRegistry& registry) {
  registry.add(make_cpu_kernel<ops::FeedTokenArgs>("feed_token", feed_token_kernel));
  for_each_float_type([&]<DType T>() {
    registry.add(
        make_cpu_kernel<ops::ArgmaxArgs>(std::string("argmax_") + Elem<T>::name, argmax_kernel<T>));
    registry.add(make_cpu_kernel<ops::ArgmaxFeedArgs>(std::string("argmax_") + Elem<T>::name + "_feed",
                                                      argmax_feed_kernel<T>));
  });
}

}  // namespace onepass::cpu
