// CPU kernels: paged_attention_<C> for paged KV caches of type C in f32, f16, bf16. q, out
// and all arithmetic are f32.
//
// A block is one (kv head, token) and covers all query heads of the group, so each K and
// V row is converted to f32 once per group. The token's keys are gathered from its block
// table a tile at a time (a list of cache rows) and folded into an online softmax.
#include "onepass/ops/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../cpu_kernels.h"
#include "attention_rows.h"
#include "float_types.h"

namespace onepass::cpu {
namespace {

using namespace attention_rows;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Keys per tile of the online softmax: each tile rescales the accumulators once, and the
// scores of a tile take heads * kTile floats.
constexpr int64_t kTile = 256;

// Buffers of one thread, sized for the call (resizing within the capacity its earlier
// calls reached allocates nothing, so a replayed decode step allocates nothing).
struct PagedWorkspace {
  std::vector<float> row;      // one converted K or V row
  std::vector<float> scores;   // [heads, kTile]
  std::vector<float> max;      // [heads]
  std::vector<float> sum;      // [heads]
  std::vector<float> acc;      // [heads, head_dim]
  std::vector<int64_t> rows;   // [kTile]: cache rows of the tile's keys

  static PagedWorkspace& of_thread(int64_t heads, int64_t head_dim) {
    thread_local PagedWorkspace w;
    w.row.resize(static_cast<size_t>(head_dim));
    w.scores.resize(static_cast<size_t>(heads * kTile));
    w.max.resize(static_cast<size_t>(heads));
    w.sum.resize(static_cast<size_t>(heads));
    w.acc.resize(static_cast<size_t>(heads * head_dim));
    w.rows.resize(static_cast<size_t>(kTile));
    return w;
  }
};

// Online-softmax step: folds the `count` (<= kTile) keys at cache rows w.rows[0, count)
// into the state of the `heads` query heads starting at q (q_stride apart).
template <DType C>
void attend_rows(const ops::PagedAttentionArgs& a, const float* q, int64_t heads, int64_t count,
                 PagedWorkspace& w) {
  const int64_t hd = a.head_dim;
  float* scores = w.scores.data();
  for (int64_t j = 0; j < count; ++j) {
    const float* key = cache_row<C>(a.k, a.k_stride, w.rows[static_cast<size_t>(j)], w.row.data(), hd);
    for (int64_t h = 0; h < heads; ++h) scores[h * kTile + j] = dot(q + h * a.q_stride, key, hd) * a.scale;
  }
  if (a.softcap > 0.0f) {
    const float inv_cap = 1.0f / a.softcap;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t j = 0; j < count; ++j) scores[h * kTile + j] = std::tanh(scores[h * kTile + j] * inv_cap) * a.softcap;
    }
  }
  for (int64_t h = 0; h < heads; ++h) {
    float* s = scores + h * kTile;
    float tile_max = kNegInf;
    for (int64_t j = 0; j < count; ++j) tile_max = std::max(tile_max, s[j]);
    const auto hi = static_cast<size_t>(h);
    const float new_max = std::max(w.max[hi], tile_max);
    for (int64_t j = 0; j < count; ++j) s[j] = std::exp(s[j] - new_max);
    // exp(-inf) = 0: a fresh state (max -inf, sum and acc 0) just takes the tile.
    const float rescale = std::exp(w.max[hi] - new_max);
    w.sum[hi] = w.sum[hi] * rescale + sum_of(s, count);
    w.max[hi] = new_max;
    if (rescale != 1.0f) {
      float* acc = w.acc.data() + h * hd;
      for (int64_t d = 0; d < hd; ++d) acc[d] *= rescale;
    }
  }
  for (int64_t j = 0; j < count; ++j) {
    const float* value = cache_row<C>(a.v, a.v_stride, w.rows[static_cast<size_t>(j)], w.row.data(), hd);
    for (int64_t h = 0; h < heads; ++h) {
      const float weight = scores[h * kTile + j];
      float* acc = w.acc.data() + h * hd;
      for (int64_t d = 0; d < hd; ++d) acc[d] += weight * value[d];
    }
  }
}

// CPU grid: {n_kv_head, tokens}; block = (kv head, token), all query heads of the group.
template <DType C>
void paged_attention_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  const auto& a = *static_cast<const ops::PagedAttentionArgs*>(raw);
  const int64_t group = a.n_head / a.n_kv_head;
  const int64_t cache_blocks = a.slots / a.block_size;
  const int64_t capacity = a.max_blocks * a.block_size;
  PagedWorkspace& w = PagedWorkspace::of_thread(group, a.head_dim);
  for (uint64_t block = first; block < end; ++block) {
    const auto kv_head = static_cast<int64_t>(block % static_cast<uint64_t>(a.n_kv_head));
    const auto token = static_cast<int64_t>(block / static_cast<uint64_t>(a.n_kv_head));
    if (token >= a.tokens) break;
    const int64_t first_q = token * a.n_head + kv_head * group;  // row of the group's first head
    const float* q = a.q + first_q * a.q_stride;
    const int64_t length = std::clamp<int64_t>(a.lengths[token], 0, capacity);
    const int64_t lo = a.window > 0 ? std::max<int64_t>(0, length - a.window) : 0;
    const int32_t* table = a.block_table + token * a.max_blocks;
    std::fill(w.max.begin(), w.max.end(), kNegInf);
    std::fill(w.sum.begin(), w.sum.end(), 0.0f);
    std::fill(w.acc.begin(), w.acc.end(), 0.0f);
    int64_t count = 0;  // keys gathered into the tile
    for (int64_t pos = lo; pos < length;) {
      const int64_t b = pos / a.block_size;
      const int64_t stop = std::min(length, (b + 1) * a.block_size);
      const int64_t entry = table[b];
      if (entry < 0 || entry >= cache_blocks) {  // bad device data: the block's keys are skipped
        pos = stop;
        continue;
      }
      const int64_t base = kv_head * a.slots + (entry - b) * a.block_size;  // cache row of pos: base + pos
      for (; pos < stop; ++pos) {
        w.rows[static_cast<size_t>(count++)] = base + pos;
        if (count == kTile) {
          attend_rows<C>(a, q, group, count, w);
          count = 0;
        }
      }
    }
    if (count > 0) attend_rows<C>(a, q, group, count, w);
    for (int64_t h = 0; h < group; ++h) {
      float* o = a.out + (first_q + h) * a.out_stride;
      const float* acc = w.acc.data() + h * a.head_dim;
      const float total = w.sum[static_cast<size_t>(h)];
      const float inv = total > 0.0f ? 1.0f / total : 0.0f;  // no key: zeros
      for (int64_t d = 0; d < a.head_dim; ++d) o[d] = acc[d] * inv;
    }
  }
}

}  // namespace

void register_paged_attention_kernels(KernelRegistry& registry) {
  for_each_float_type([&]<DType C>() {
    registry.add(make_cpu_kernel<ops::PagedAttentionArgs>(std::string("paged_attention_") + Elem<C>::name,
                                                          paged_attention_kernel<C>));
  });
}

}  // namespace onepass::cpu
