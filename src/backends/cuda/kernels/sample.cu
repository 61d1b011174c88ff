// CUDA kernel: sample_f32, one block of 1024 threads per row (ops::SampleParams).
//
// Nothing is sorted. The kept prefix of the order (value desc, index asc) and the drawn
// token are each found as a cut in that order by a radix descent: a pass histograms the
// candidates (count and integer weight per bin) into 255 buckets of distance from the
// max, the bin where the cumulative count or weight crosses the limit is refined by up to
// four passes over the bytes of the value's order key, and a last pass finds the j-th
// lowest index among the values left (ties). Integer weights make every sum exact, so the
// result does not depend on the order of the atomics. A row's penalised tokens are marked
// in a shared-memory bitmap (dynamic shared memory, a bit per column) so every pass reads
// the penalised value.
#include <climits>
#include <cstdint>

#include "../launch.h"
#include "common.cuh"
#include "onepass/ops/sample.h"
#include "registration.h"

namespace onepass::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 256;
constexpr int kBuckets = 255;  // bucket bins; bin 255 stays empty at the first level
constexpr unsigned long long kNoLimit = ~0ull;
constexpr unsigned kFull = 0xffffffffu;

// The prefix of the order that is kept: candidates whose key is above `key`, or equal to
// it at an index up to `index`; `all`: every candidate. count and mass: its size and weight.
struct Cut {
  bool all;
  uint32_t key;
  int64_t index;
  unsigned long long count;
  unsigned long long mass;
};

struct Shared {
  unsigned int count[kBins];
  unsigned long long mass[kBins];
  int32_t tokens[ops::kSampleMaxPenalties];  // the row's penalty entries (-1: ignored)
  float penalised[ops::kSampleMaxPenalties];
  float warp_value[kWarps];
  int32_t warp_index[kWarps];
  float warp_low[kWarps];
  unsigned long long warp_sum[kWarps];
  unsigned int warp_scan[kWarps];
  // find_bin's answer
  bool found;
  int bin;
  unsigned long long before_count;
  unsigned long long before_mass;
  int64_t index;  // find_index's answer
};

struct Row {
  const float* x;
  int64_t cols;
  const uint32_t* marked;  // bit c: column c has a penalty entry
  const int32_t* tokens;
  const float* penalised;
  int entries;
  float max;
  float inv_t;
  float bucket_scale;
};

// The penalised value of column c (the first entry of its token), -0 as +0.
__device__ __forceinline__ float row_value(const Row& row, int64_t c) {
  float v = row.x[c];
  if ((row.marked[c >> 5] >> (c & 31)) & 1u) {
    for (int i = 0; i < row.entries; ++i) {
      if (row.tokens[i] == c) {
        v = row.penalised[i];
        break;
      }
    }
  }
  return ops::sample_canonical(v);
}

// A key whose unsigned order is the order of the (non-NaN) values.
__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Whether v is a candidate (within kSampleNegligibleNats of the max; NaN and -inf are
// not), and its bucket: 0 nearest the max, monotone in the distance.
__device__ __forceinline__ bool candidate(const Row& row, float v, uint32_t& bucket) {
  const float z = ops::sample_distance(v, row.max, row.inv_t);
  if (!(z < ops::kSampleNegligibleNats)) return false;
  bucket = min(static_cast<uint32_t>(kBuckets - 1), static_cast<uint32_t>(z * row.bucket_scale));
  return true;
}

__device__ __forceinline__ bool in_cut(const Cut& cut, uint32_t key, int64_t c) {
  return cut.all || key > cut.key || (key == cut.key && c <= cut.index);
}

// The block's sum (every thread gets it).
__device__ unsigned long long block_sum(unsigned long long v, Shared& sh) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFull, v, offset);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) sh.warp_sum[warp] = v;
  __syncthreads();
  v = lane < kWarps ? sh.warp_sum[lane] : 0;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFull, v, offset);
  return v;
}

// The block's exclusive prefix sum of v in thread order, and the total.
__device__ unsigned int block_exclusive_scan(unsigned int v, unsigned int& total, Shared& sh) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  unsigned int inclusive = v;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const unsigned int other = __shfl_up_sync(kFull, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  __syncthreads();
  if (lane == 31) sh.warp_scan[warp] = inclusive;
  __syncthreads();
  unsigned int warp_before = 0;
  total = 0;
  for (int w = 0; w < kWarps; ++w) {
    const unsigned int s = sh.warp_scan[w];
    if (w < warp) warp_before += s;
    total += s;
  }
  return warp_before + inclusive - v;
}

// True when (v, i) beats (best_v, best_i): larger, or equal at a lower index; NaN never.
__device__ __forceinline__ bool better(float v, int32_t i, float best_v, int32_t best_i) {
  return v > best_v || (v == best_v && i < best_i);
}

// The warp's largest (value, index) by `better` and its smallest value; every lane gets them.
__device__ __forceinline__ void warp_max_min(float& best_v, int32_t& best_i, float& low) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float v = __shfl_xor_sync(kFull, best_v, offset);
    const int32_t i = __shfl_xor_sync(kFull, best_i, offset);
    if (better(v, i, best_v, best_i)) {
      best_v = v;
      best_i = i;
    }
    low = fminf(low, __shfl_xor_sync(kFull, low, offset));
  }
}

// Histogram of the candidates inside `within` at `depth` (0: buckets; d >= 1: byte d - 1
// of the key, from the top, of the candidates in `bucket` whose key starts with the
// 8 (d - 1) bits `prefix`). Returns, when min_p > 0, how many have p >= min_p.
__device__ unsigned int histogram(const Row& row, const Cut& within, int depth, uint32_t bucket, uint32_t prefix,
                                  float min_p, Shared& sh) {
  for (int i = threadIdx.x; i < kBins; i += kThreads) {
    sh.count[i] = 0;
    sh.mass[i] = 0;
  }
  __syncthreads();
  const int known = 8 * (depth - 1);
  unsigned int min_p_count = 0;
  for (int64_t c = threadIdx.x; c < row.cols; c += kThreads) {
    const float v = row_value(row, c);
    uint32_t b;
    if (!candidate(row, v, b)) continue;
    const uint32_t key = order_key(v);
    if (!in_cut(within, key, c)) continue;
    uint32_t bin = b;
    if (depth > 0) {
      if (b != bucket || (known > 0 && (key >> (32 - known)) != prefix)) continue;
      bin = (key >> (24 - known)) & 255u;
    }
    const float probability = ops::sample_probability(v, row.max, row.inv_t);
    if (min_p > 0.0f && probability >= min_p) ++min_p_count;
    atomicAdd(&sh.count[bin], 1u);
    atomicAdd(&sh.mass[bin], static_cast<unsigned long long>(ops::sample_weight(probability)));
  }
  __syncthreads();
  return min_p_count;
}

// Warp 0 walks the bins in order (depth 0: ascending buckets; deeper: descending bytes)
// from (count_before, mass_before) and finds the first bin at whose end the cumulative
// count reaches count_limit or the cumulative weight reaches mass_limit.
__device__ void find_bin(int depth, unsigned long long count_before, unsigned long long mass_before,
                         unsigned long long count_limit, unsigned long long mass_limit, Shared& sh) {
  if (threadIdx.x < 32) {
    const int lane = static_cast<int>(threadIdx.x);
    constexpr int kPerLane = kBins / 32;
    auto bin_at = [&](int s) { return depth == 0 ? s : kBins - 1 - s; };
    unsigned long long c = 0, m = 0;
    for (int k = 0; k < kPerLane; ++k) {
      const int bin = bin_at(lane * kPerLane + k);
      c += sh.count[bin];
      m += sh.mass[bin];
    }
    unsigned long long ci = c, mi = m;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const unsigned long long oc = __shfl_up_sync(kFull, ci, offset);
      const unsigned long long om = __shfl_up_sync(kFull, mi, offset);
      if (lane >= offset) {
        ci += oc;
        mi += om;
      }
    }
    const bool hit = count_before + ci >= count_limit || mass_before + mi >= mass_limit;
    const unsigned ballot = __ballot_sync(kFull, hit);
    if (ballot == 0) {
      if (lane == 0) sh.found = false;
    } else if (lane == __ffs(ballot) - 1) {
      unsigned long long cb = count_before + ci - c, mb = mass_before + mi - m;
      for (int k = 0; k < kPerLane; ++k) {
        const int bin = bin_at(lane * kPerLane + k);
        if (cb + sh.count[bin] >= count_limit || mb + sh.mass[bin] >= mass_limit) {
          sh.bin = bin;
          break;
        }
        cb += sh.count[bin];
        mb += sh.mass[bin];
      }
      sh.before_count = cb;
      sh.before_mass = mb;
      sh.found = true;
    }
  }
  __syncthreads();
}

// The j-th (from 1) lowest column among the candidates inside `within` in `bucket` whose
// key starts with the `known` bits `prefix`. Threads scan contiguous ranges so that a
// prefix sum over threads orders the matches by column.
__device__ int64_t find_index(const Row& row, const Cut& within, uint32_t bucket, int known, uint32_t prefix,
                              unsigned long long j, Shared& sh) {
  const int64_t per_thread = (row.cols + kThreads - 1) / kThreads;
  const int64_t first = static_cast<int64_t>(threadIdx.x) * per_thread;
  const int64_t begin = first < row.cols ? first : row.cols;
  const int64_t end = begin + per_thread < row.cols ? begin + per_thread : row.cols;
  auto matches = [&](int64_t c) {
    const float v = row_value(row, c);
    uint32_t b;
    if (!candidate(row, v, b) || b != bucket) return false;
    const uint32_t key = order_key(v);
    if (known > 0 && (key >> (32 - known)) != prefix) return false;
    return in_cut(within, key, c);
  };
  unsigned int mine = 0;
  for (int64_t c = begin; c < end; ++c) mine += matches(c);
  unsigned int total = 0;
  const unsigned long long before = block_exclusive_scan(mine, total, sh);
  if (threadIdx.x == 0) sh.index = -1;
  __syncthreads();
  if (before < j && j <= before + mine) {
    unsigned long long seen = before;
    for (int64_t c = begin; c < end; ++c) {
      if (matches(c) && ++seen == j) {
        sh.index = c;
        break;
      }
    }
  }
  __syncthreads();
  return sh.index;
}

// The shortest prefix of `within` (in the order) whose count reaches count_limit or whose
// weight reaches mass_limit; `within` itself when neither is reached. `ready`: the
// shared histogram already holds depth 0 of `within`.
__device__ Cut descend(const Row& row, const Cut& within, unsigned long long count_limit,
                       unsigned long long mass_limit, bool ready, Shared& sh) {
  if (!ready) histogram(row, within, 0, 0, 0, 0.0f, sh);
  find_bin(0, 0, 0, count_limit, mass_limit, sh);
  if (!sh.found) return within;
  const uint32_t bucket = static_cast<uint32_t>(sh.bin);
  unsigned long long cb = sh.before_count, mb = sh.before_mass;
  unsigned long long bin_count = sh.count[bucket], bin_mass = sh.mass[bucket];
  uint32_t prefix = 0;
  int depth = 0;
  __syncthreads();  // everyone has read the answer before the next histogram
  while (bin_count > 1 && depth < 4) {
    ++depth;
    histogram(row, within, depth, bucket, prefix, 0.0f, sh);
    find_bin(depth, cb, mb, count_limit, mass_limit, sh);
    const int bin = sh.bin;
    cb = sh.before_count;
    mb = sh.before_mass;
    bin_count = sh.count[bin];
    bin_mass = sh.mass[bin];
    prefix = (prefix << 8) | static_cast<uint32_t>(bin);
    __syncthreads();
  }
  // The bin's candidates end the prefix: one, or ties of one value (equal weights), of
  // which the first j by column are taken.
  unsigned long long j = 1;
  unsigned long long each = bin_mass;
  if (bin_count > 1) {
    each = bin_mass / bin_count;
    const unsigned long long by_count = count_limit - cb;  // > 0: the bin was not passed
    unsigned long long by_mass = kNoLimit;
    if (each > 0) {
      const unsigned long long rest = mass_limit > mb ? mass_limit - mb : 0;
      by_mass = rest / each + (rest % each != 0);
    }
    j = max(1ull, min(min(by_count, by_mass), bin_count));
  }
  const int64_t index = find_index(row, within, bucket, 8 * depth, prefix, j, sh);
  Cut cut;
  cut.all = false;
  cut.index = index;
  cut.key = order_key(row_value(row, index < 0 ? 0 : index));
  cut.count = cb + j;
  cut.mass = mb + j * each;
  return cut;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const __grid_constant__ ops::SampleArgs a) {
  extern __shared__ uint32_t marked[];
  __shared__ Shared sh;
  pdl_wait();
  const int64_t r = blockIdx.x;
  if (r >= a.rows) return;  // whole block, before any barrier
  const ops::SampleParams p = a.params[r];
  const float* x = a.logits + r * a.logits_stride;
  const int64_t words = (a.cols + 31) / 32;
  for (int64_t i = threadIdx.x; i < words; i += kThreads) marked[i] = 0;
  const int64_t listed = p.penalty_count > 0 ? p.penalty_count : 0;
  const int entries = static_cast<int>(listed < a.penalty_stride ? listed : a.penalty_stride);
  __syncthreads();
  for (int i = threadIdx.x; i < entries; i += kThreads) {
    const ops::SamplePenalty e = a.penalties[r * a.penalty_stride + i];
    const bool valid = e.count > 0 && e.token >= 0 && e.token < a.cols;
    sh.tokens[i] = valid ? e.token : -1;
    if (valid) {
      sh.penalised[i] = ops::sample_penalise(x[e.token], e.count, p);
      atomicOr(&marked[e.token >> 5], 1u << (e.token & 31));
    }
  }
  __syncthreads();
  Row row{x, a.cols, marked, sh.tokens, sh.penalised, entries, 0.0f, 0.0f, 0.0f};

  // The max (first index) and the min of the numbers.
  float best_v = -INFINITY, low = INFINITY;
  int32_t best_i = INT_MAX;
  for (int64_t c = threadIdx.x; c < a.cols; c += kThreads) {
    const float v = row_value(row, c);
    if (better(v, static_cast<int32_t>(c), best_v, best_i)) {
      best_v = v;
      best_i = static_cast<int32_t>(c);
    }
    low = fminf(low, v);  // fminf ignores NaN
  }
  warp_max_min(best_v, best_i, low);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  if (lane == 0) {
    sh.warp_value[warp] = best_v;
    sh.warp_index[warp] = best_i;
    sh.warp_low[warp] = low;
  }
  __syncthreads();
  // Every warp combines the warps' results, lane w taking warp w's, by the same shuffles.
  // No loop over the warps: ptxas (13.0, 13.5) compiles `for (w = 1; w < 32; ++w)` over
  // these arrays into code that skips warps 25..27 and reads neighbouring entries instead.
  static_assert(kWarps == 32, "one warp result per lane");
  best_v = sh.warp_value[lane];
  best_i = sh.warp_index[lane];
  low = sh.warp_low[lane];
  warp_max_min(best_v, best_i, low);
  const int32_t argmax = best_i == INT_MAX ? 0 : best_i;  // all NaN: 0
  if (ops::sample_is_greedy(p) || !isfinite(best_v)) {
    if (threadIdx.x == 0) a.out[r] = argmax;
    return;
  }
  row.max = best_v;
  row.inv_t = 1.0f / p.temperature;
  const float span = fminf((best_v - low) * row.inv_t, ops::kSampleNegligibleNats);
  row.bucket_scale = span > 0.0f ? static_cast<float>(kBuckets) / span : 0.0f;

  // Every candidate: the first histogram, the totals, and how many have p >= min_p.
  const unsigned int min_p_mine = histogram(row, Cut{true, 0, 0, 0, 0}, 0, 0, 0, p.min_p, sh);
  const unsigned long long min_p_count = block_sum(min_p_mine, sh);
  unsigned long long bins_count = 0, bins_mass = 0;
  if (threadIdx.x < kBins) {
    bins_count = sh.count[threadIdx.x];
    bins_mass = sh.mass[threadIdx.x];
  }
  Cut kept{true, 0, 0, block_sum(bins_count, sh), 0};
  kept.mass = block_sum(bins_mass, sh);
  const Cut all = kept;

  // Top-k, then top-p of the top-k tokens' weight and min-p (the shorter prefix).
  if (p.top_k > 0 && static_cast<unsigned long long>(p.top_k) < kept.count) {
    kept = descend(row, all, static_cast<unsigned long long>(p.top_k), kNoLimit, true, sh);
  }
  const unsigned long long by_min_p = p.min_p > 0.0f ? max(1ull, min_p_count) : kNoLimit;
  const bool top_p = p.top_p < 1.0f;
  if (top_p || by_min_p < kept.count) {
    const unsigned long long mass_limit = top_p ? ops::sample_top_p_target(p.top_p, kept.mass) : kNoLimit;
    const unsigned long long count_limit = by_min_p < kept.count ? by_min_p : kNoLimit;
    kept = descend(row, kept, count_limit, mass_limit, kept.all, sh);
  }
  // The draw: the first token whose cumulative weight exceeds floor(u x total).
  const unsigned long long target = ops::sample_draw_target(ops::sample_uniform(p.seed, p.counter), kept.mass);
  const Cut drawn = descend(row, kept, kNoLimit, target + 1, kept.all, sh);
  if (threadIdx.x == 0) a.out[r] = drawn.all || drawn.index < 0 ? argmax : static_cast<int32_t>(drawn.index);
}

}  // namespace

void register_sample_cuda_kernels(KernelRegistry& registry) {
  registry.add(make_cuda_kernel<ops::SampleArgs>("sample_f32", reinterpret_cast<const void*>(&sample_kernel),
                                                 kThreads, true, static_cast<uint32_t>(kCudaSampleMaxBitmapBytes)));
}

}  // namespace onepass::cuda
