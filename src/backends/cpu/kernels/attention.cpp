// CPU kernels: sdpa_<C>, flash_decode_<C> (per-chunk partials) and flash_decode_merge,
// for KV caches of type C in f32, f16, bf16. q, out and all arithmetic are f32.
//
// On the CPU a block covers all query heads of one KV group, so each K and V row is
// converted to f32 once per group rather than once per query head. Where the CPU has AVX2
// (with FMA and F16C) and head_dim is a multiple of 8, rows are converted, dotted and
// accumulated 8 values per instruction; elsewhere in portable code.
#include "onepass/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../cpu_kernels.h"
#include "attention_rows.h"
#include "float_types.h"
#include "quant_blocks.h"
#include "simd_x86.h"

namespace onepass::cpu {
namespace {

using namespace attention_rows;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Keys per tile of the online softmax; equal to the flash-decoding chunk so that a
// chunk's partial is exactly one tile.
constexpr int64_t kTile = ops::kFlashDecodeChunk;

// The query heads of one KV group and their running softmax state: per head a max, a
// sum of exponentials and an unnormalised head_dim accumulator.
struct Group {
  const float* q;    // first query head of the group
  int64_t q_stride;  // between consecutive query heads
  int64_t heads;
  float* max;          // [heads]
  float* sum;          // [heads]
  float* acc;          // first head's accumulator
  int64_t acc_stride;  // between consecutive heads' accumulators
};

// Buffers a kernel call uses for all its blocks: one set per thread, sized for the call
// (resizing within the capacity a thread's earlier calls reached allocates nothing, so a
// replayed decode step allocates nothing).
struct Workspace {
  std::vector<float> row;     // one converted K or V row
  std::vector<float> scores;  // [heads, kTile]
  std::vector<float> max;
  std::vector<float> sum;
  std::vector<float> acc;  // [heads, head_dim] (sdpa)

  static Workspace& of_thread(int64_t heads, int64_t head_dim) {
    thread_local Workspace w;
    w.row.resize(static_cast<size_t>(head_dim));
    w.scores.resize(static_cast<size_t>(heads * kTile));
    w.max.resize(static_cast<size_t>(heads));
    w.sum.resize(static_cast<size_t>(heads));
    w.acc.resize(static_cast<size_t>(heads * head_dim));
    return w;
  }
};

// The softmax part of an online-softmax step: scores [heads, kTile] (count of them per
// head) become exp(s - new max) in place, each head's max and sum take the tile, and its
// accumulator is rescaled to the new max.
inline void fold_scores(const Group& g, int64_t count, float softcap, int64_t head_dim, float* scores) {
  if (softcap > 0.0f) {
    const float inv_cap = 1.0f / softcap;
    for (int64_t h = 0; h < g.heads; ++h) {
      for (int64_t j = 0; j < count; ++j) scores[h * kTile + j] = std::tanh(scores[h * kTile + j] * inv_cap) * softcap;
    }
  }
  for (int64_t h = 0; h < g.heads; ++h) {
    float* s = scores + h * kTile;
    float tile_max = kNegInf;
    for (int64_t j = 0; j < count; ++j) tile_max = std::max(tile_max, s[j]);
    const float new_max = std::max(g.max[h], tile_max);
    for (int64_t j = 0; j < count; ++j) s[j] = std::exp(s[j] - new_max);
    // exp(-inf) = 0: a fresh state (max -inf, sum and acc 0) just takes the tile.
    const float rescale = std::exp(g.max[h] - new_max);
    g.sum[h] = g.sum[h] * rescale + sum_of(s, count);
    g.max[h] = new_max;
    if (rescale != 1.0f) {
      float* acc = g.acc + h * g.acc_stride;
      for (int64_t d = 0; d < head_dim; ++d) acc[d] *= rescale;
    }
  }
}

// Online-softmax step: folds keys [first_row, first_row + count) (count <= kTile) of one
// KV head into the state of every query head of the group.
template <DType C>
void attend_tile(const Group& g, const void* k, const void* v, int64_t k_stride, int64_t v_stride,
                 int64_t first_row, int64_t count, float scale, float softcap, int64_t head_dim,
                 Workspace& w) {
  float* scores = w.scores.data();
  for (int64_t j = 0; j < count; ++j) {
    const float* key = cache_row<C>(k, k_stride, first_row + j, w.row.data(), head_dim);
    for (int64_t h = 0; h < g.heads; ++h) {
      scores[h * kTile + j] = dot(g.q + h * g.q_stride, key, head_dim) * scale;
    }
  }
  fold_scores(g, count, softcap, head_dim, scores);
  for (int64_t j = 0; j < count; ++j) {
    const float* value = cache_row<C>(v, v_stride, first_row + j, w.row.data(), head_dim);
    for (int64_t h = 0; h < g.heads; ++h) {
      const float weight = scores[h * kTile + j];
      float* acc = g.acc + h * g.acc_stride;
      for (int64_t d = 0; d < head_dim; ++d) acc[d] += weight * value[d];
    }
  }
}

#if ONEPASS_CPU_X86
ONEPASS_AVX2_BEGIN
namespace avx2 {

// Values d .. d + 7 of a cache row as f32.
template <DType C>
inline __m256 load8(const typename Elem<C>::storage* row, int64_t d) {
  if constexpr (C == DType::f32) {
    return _mm256_loadu_ps(row + d);
  } else if constexpr (C == DType::f16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + d)));
  } else {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + d)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
}

inline float sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// attend_tile with rows of head_dim (a multiple of 8) in 8-value vectors: each K row is
// dotted with the group's query heads as it is converted, each V row converted once into
// the workspace and accumulated into every head.
template <DType C>
void attend_tile(const Group& g, const void* k, const void* v, int64_t k_stride, int64_t v_stride,
                 int64_t first_row, int64_t count, float scale, float softcap, int64_t head_dim,
                 Workspace& w) {
  using S = typename Elem<C>::storage;
  float* scores = w.scores.data();
  for (int64_t j = 0; j < count; ++j) {
    const S* key = static_cast<const S*>(k) + (first_row + j) * k_stride;
    for (int64_t h = 0; h < g.heads; ++h) {
      const float* q = g.q + h * g.q_stride;
      __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps();
      int64_t d = 0;
      for (; d + 16 <= head_dim; d += 16) {
        even = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8<C>(key, d), even);
        odd = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), load8<C>(key, d + 8), odd);
      }
      if (d < head_dim) even = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8<C>(key, d), even);
      scores[h * kTile + j] = sum8(_mm256_add_ps(even, odd)) * scale;
    }
  }
  fold_scores(g, count, softcap, head_dim, scores);
  float* value = w.row.data();
  for (int64_t j = 0; j < count; ++j) {
    const S* row = static_cast<const S*>(v) + (first_row + j) * v_stride;
    for (int64_t d = 0; d < head_dim; d += 8) _mm256_storeu_ps(value + d, load8<C>(row, d));
    for (int64_t h = 0; h < g.heads; ++h) {
      const __m256 weight = _mm256_set1_ps(scores[h * kTile + j]);
      float* acc = g.acc + h * g.acc_stride;
      for (int64_t d = 0; d < head_dim; d += 8) {
        _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(weight, _mm256_loadu_ps(value + d), _mm256_loadu_ps(acc + d)));
      }
    }
  }
}

}  // namespace avx2
ONEPASS_AVX2_END
#endif  // ONEPASS_CPU_X86

// attend_tile in the widest form this CPU and head_dim allow.
template <DType C>
void attend(const Group& g, const void* k, const void* v, int64_t k_stride, int64_t v_stride,
            int64_t first_row, int64_t count, float scale, float softcap, int64_t head_dim,
            Workspace& w) {
#if ONEPASS_CPU_X86
  if (head_dim % 8 == 0 && active_isa() >= Isa::avx2) {
    avx2::attend_tile<C>(g, k, v, k_stride, v_stride, first_row, count, scale, softcap, head_dim, w);
    return;
  }
#endif
  attend_tile<C>(g, k, v, k_stride, v_stride, first_row, count, scale, softcap, head_dim, w);
}

// CPU grid: {n_kv_head, tokens}; block = (kv head, token), all query heads of the group.
template <DType C>
void sdpa_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  const auto& a = *static_cast<const ops::SdpaArgs*>(raw);
  const int64_t group = a.n_head / a.n_kv_head;
  Workspace& w = Workspace::of_thread(group, a.head_dim);
  for (uint64_t block = first; block < end; ++block) {
    const auto kv_head = static_cast<int64_t>(block % static_cast<uint64_t>(a.n_kv_head));
    const auto token = static_cast<int64_t>(block / static_cast<uint64_t>(a.n_kv_head));
    if (token >= a.tokens) break;
    const int64_t first_q = token * a.n_head + kv_head * group;  // row of the group's first head
    const int64_t position = a.positions[token];
    // A negative position sees no key; past the cache it sees the whole cache.
    const int64_t count = position < 0 ? 0 : std::min(position, a.ctx - 1) + 1;
    const int64_t lo = a.window > 0 && position >= 0 ? std::max<int64_t>(0, position - a.window + 1) : 0;
    std::fill(w.max.begin(), w.max.end(), kNegInf);
    std::fill(w.sum.begin(), w.sum.end(), 0.0f);
    std::fill(w.acc.begin(), w.acc.end(), 0.0f);
    const Group g{a.q + first_q * a.q_stride,
                  a.q_stride,
                  group,
                  w.max.data(),
                  w.sum.data(),
                  w.acc.data(),
                  a.head_dim};
    for (int64_t key = lo; key < count; key += kTile) {
      attend<C>(g, a.k, a.v, a.k_stride, a.v_stride, kv_head * a.ctx + key,
                     std::min(kTile, count - key), a.scale, a.softcap, a.head_dim, w);
    }
    for (int64_t h = 0; h < group; ++h) {
      float* o = a.out + (first_q + h) * a.out_stride;
      const float* acc = w.acc.data() + h * a.head_dim;
      const float inv = count > lo ? 1.0f / w.sum[static_cast<size_t>(h)] : 0.0f;
      for (int64_t d = 0; d < a.head_dim; ++d) o[d] = acc[d] * inv;
    }
  }
}

// CPU grid: {chunks, n_kv_head}; block = (chunk, kv head), all query heads of the group.
template <DType C>
void flash_decode_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  const auto& a = *static_cast<const ops::FlashDecodeArgs*>(raw);
  const int64_t group = a.n_head / a.n_kv_head;
  const int64_t partials = a.n_head * a.chunks;
  const int64_t length = std::clamp<int64_t>(*a.kv_length, 0, a.ctx);
  const int64_t lo = a.window > 0 ? std::max<int64_t>(0, length - a.window) : 0;
  Workspace& w = Workspace::of_thread(group, a.head_dim);
  for (uint64_t block = first; block < end; ++block) {
    const auto chunk = static_cast<int64_t>(block % static_cast<uint64_t>(a.chunks));
    const auto kv_head = static_cast<int64_t>(block / static_cast<uint64_t>(a.chunks));
    if (kv_head >= a.n_kv_head) break;
    const int64_t first_head = kv_head * group;
    // Partial (head, chunk) sits at index head * chunks + chunk of each scratch array.
    float* acc = a.scratch + (first_head * a.chunks + chunk) * a.head_dim;
    float* max_out = a.scratch + partials * a.head_dim + first_head * a.chunks + chunk;
    float* sum_out = max_out + partials;
    const int64_t begin = lo + ops::flash_decode_chunk_begin(chunk, length - lo, a.chunks);
    const int64_t stop = lo + ops::flash_decode_chunk_begin(chunk + 1, length - lo, a.chunks);
    if (begin >= stop) {  // empty partial; acc stays unwritten
      for (int64_t h = 0; h < group; ++h) {
        max_out[h * a.chunks] = kNegInf;
        sum_out[h * a.chunks] = 0.0f;
      }
      continue;
    }
    std::fill(w.max.begin(), w.max.end(), kNegInf);
    std::fill(w.sum.begin(), w.sum.end(), 0.0f);
    for (int64_t h = 0; h < group; ++h)
      std::fill_n(acc + h * a.chunks * a.head_dim, a.head_dim, 0.0f);
    const Group g{a.q + first_head * a.q_stride, a.q_stride, group, w.max.data(), w.sum.data(), acc,
                  a.chunks * a.head_dim};
    attend<C>(g, a.k, a.v, a.k_stride, a.v_stride, kv_head * a.ctx + begin, stop - begin,
                   a.scale, a.softcap, a.head_dim, w);
    for (int64_t h = 0; h < group; ++h) {
      max_out[h * a.chunks] = w.max[static_cast<size_t>(h)];
      sum_out[h * a.chunks] = w.sum[static_cast<size_t>(h)];
    }
  }
}

// Grid: {n_head}; block = one head.
void flash_decode_merge_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  const auto& a = *static_cast<const ops::FlashDecodeArgs*>(raw);
  const int64_t partials = a.n_head * a.chunks;
  for (uint64_t block = first; block < end; ++block) {
    const auto head = static_cast<int64_t>(block);
    if (head >= a.n_head) break;
    const float* maxes = a.scratch + partials * a.head_dim + head * a.chunks;
    const float* sums = maxes + partials;
    float* o = a.out + head * a.out_stride;
    float global_max = kNegInf;
    for (int64_t c = 0; c < a.chunks; ++c) {
      if (sums[c] > 0.0f) global_max = std::max(global_max, maxes[c]);
    }
    std::fill(o, o + a.head_dim, 0.0f);
    if (global_max == kNegInf) continue;  // no valid key
    float total = 0.0f;
    for (int64_t c = 0; c < a.chunks; ++c) {
      // Empty partials are skipped, never multiplied: their acc was not written.
      if (!(sums[c] > 0.0f)) continue;
      const float weight = std::exp(maxes[c] - global_max);
      total += sums[c] * weight;
      const float* acc = a.scratch + (head * a.chunks + c) * a.head_dim;
      for (int64_t d = 0; d < a.head_dim; ++d) o[d] += acc[d] * weight;
    }
    const float inv = 1.0f / total;
    for (int64_t d = 0; d < a.head_dim; ++d) o[d] *= inv;
  }
}

}  // namespace

void register_attention_kernels(KernelRegistry& registry) {
  for_each_float_type([&]<DType C>() {
    const std::string t = Elem<C>::name;
    registry.add(make_cpu_kernel<ops::SdpaArgs>("sdpa_" + t, sdpa_kernel<C>));
    registry.add(
        make_cpu_kernel<ops::FlashDecodeArgs>("flash_decode_" + t, flash_decode_kernel<C>));
  });
  registry.add(
      make_cpu_kernel<ops::FlashDecodeArgs>("flash_decode_merge", flash_decode_merge_kernel));
}

}  // namespace onepass::cpu
