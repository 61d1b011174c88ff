// CUDA kernels: paged_attention_<C>_g<G> and paged_attention_scalar_<C>, attention of
// query rows over their own sequences in a paged KV cache of type C (f32, f16, bf16). q,
// out, scores and sums are f32.
//
// A block owns one (token, kv head) and up to G query heads of its group, so each K and V
// row is read once for all of them (GQA). Its warps share the token's keys in rounds: in
// each round a warp takes `groups` consecutive keys, one per group of `lanes` lanes, each
// lane holding a piece of the row (a 16-byte word in the vector layout, 16 strided values
// in the scalar one). Every lane group keeps its own online-softmax state per head, so no
// reduction crosses groups while the keys stream; a key's slot comes from the block table
// (entries outside the pool skip their keys). At the end the groups of a warp merge by
// shuffles and the warps in shared memory, in a fixed order.
#include <cstring>
#include <string>

#include "common.cuh"
#include "onepass/ops/paged_attention.h"
#include "../launch.h"
#include "registration.h"

namespace onepass::cuda {
namespace {

constexpr int kMaxWarps = static_cast<int>(kCudaPagedAttentionMaxWarps);
constexpr int kMaxThreads = kMaxWarps * 32;
constexpr int kScalarDims = static_cast<int>(kCudaPagedAttentionScalarMaxHeadDim / 32);  // values per lane

// Rows read as 16-byte words: lane `sub` of a key's group holds dims [sub * N, sub * N + N).
// Needs head_dim % N == 0, head_dim <= 32 * N and 16-byte aligned rows.
template <DType C>
struct VectorLayout {
  using S = typename Elem<C>::storage;
  static constexpr int N = 16 / sizeof(S);
  static constexpr int kMaxDims = 32 * N;
  using Raw = uint4;

  int lanes;    // lanes per key: the smallest power of two >= head_dim / N
  int sub;      // this lane's word
  bool active;  // sub < head_dim / N

  __device__ __forceinline__ void plan(int64_t head_dim, int lane) {
    const int vecs = static_cast<int>(head_dim / N);
    lanes = 1;
    while (lanes < vecs) lanes <<= 1;
    sub = lane & (lanes - 1);
    active = sub < vecs;
  }
  __device__ __forceinline__ bool has(int) const { return active; }
  __device__ __forceinline__ int64_t dim(int e) const { return int64_t{sub} * N + e; }
  // Zeros for an invalid key or an idle lane: they are never multiplied into a sum.
  __device__ __forceinline__ Raw fetch(const S* row, bool valid) const {
    return valid && active ? *reinterpret_cast<const uint4*>(row + int64_t{sub} * N) : make_uint4(0u, 0u, 0u, 0u);
  }
  __device__ __forceinline__ static void convert(const Raw& r, float (&f)[N]) {
    const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if constexpr (C == DType::f32) {
        f[k] = __uint_as_float(w[k]);
      } else if constexpr (C == DType::f16) {
        __half2 h;
        std::memcpy(&h, &w[k], sizeof(h));
        const float2 t = __half22float2(h);
        f[2 * k] = t.x;
        f[2 * k + 1] = t.y;
      } else {  // bf16: the value at the lower address sits in the low half-word
        f[2 * k] = __uint_as_float(w[k] << 16);
        f[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
      }
    }
  }
};

// Any row: a warp per key, lane l holding dims l, l + 32, ... (head_dim <= 32 * kScalarDims).
template <DType C>
struct ScalarLayout {
  using S = typename Elem<C>::storage;
  static constexpr int N = kScalarDims;
  static constexpr int kMaxDims = 32 * N;
  struct Raw {
    S v[N];
  };

  int lanes;
  int sub;
  int64_t head_dim;

  __device__ __forceinline__ void plan(int64_t hd, int lane) {
    lanes = 32;
    sub = lane;
    head_dim = hd;
  }
  __device__ __forceinline__ bool has(int e) const { return dim(e) < head_dim; }
  __device__ __forceinline__ int64_t dim(int e) const { return sub + int64_t{32} * e; }
  __device__ __forceinline__ Raw fetch(const S* row, bool valid) const {
    Raw r;
#pragma unroll
    for (int e = 0; e < N; ++e) r.v[e] = valid && has(e) ? row[dim(e)] : Elem<C>::store(0.0f);
    return r;
  }
  __device__ __forceinline__ static void convert(const Raw& r, float (&f)[N]) {
#pragma unroll
    for (int e = 0; e < N; ++e) f[e] = Elem<C>::load(r.v[e]);
  }
};

// A key's score from its q·k: scaled, then capped by softcap * tanh(s / softcap) when
// softcap > 0 (uniform over the kernel, so the branch never diverges).
__device__ __forceinline__ float score_of(float dot, float scale, float softcap) {
  const float s = dot * scale;
  return softcap > 0.0f ? softcap * tanhf(s / softcap) : s;
}

// Grid {n_kv_head * passes, tokens}, blockDim.x = 32 * warps (warps <= kMaxWarps): block =
// (kv head, pass, token), the pass's query heads kv_head * group + pass * G + [0, G).
template <DType C, int G, typename Layout>
__global__ void __launch_bounds__(kMaxThreads, 1) paged_attention_kernel(const __grid_constant__ ops::PagedAttentionArgs a) {
  using S = typename Elem<C>::storage;
  constexpr int N = Layout::N;
  constexpr int kRoundsInFlight = 2;  // rounds whose K and V loads are issued together
  __shared__ float warp_m[kMaxWarps][G];
  __shared__ float warp_l[kMaxWarps][G];
  __shared__ float head_max[G];
  __shared__ float head_sum[G];
  __shared__ float acc_sum[G * Layout::kMaxDims];

  pdl_wait();
  const int64_t group = a.n_head / a.n_kv_head;
  const int64_t passes = (group + G - 1) / G;
  const int64_t kv_head = blockIdx.x / passes;
  const int64_t pass = blockIdx.x % passes;
  const int64_t token = blockIdx.y;
  if (kv_head >= a.n_kv_head || token >= a.tokens) return;  // whole block, before any barrier
  const int heads = static_cast<int>(min(int64_t{G}, group - pass * G));
  const int64_t first_row = token * a.n_head + kv_head * group + pass * G;  // (token, head) row of head 0
  const int hd = static_cast<int>(a.head_dim);
  if (a.head_dim > Layout::kMaxDims) {  // beyond the kernel's buffers: NaN, not silence
    for (int64_t i = threadIdx.x; i < int64_t{heads} * hd; i += blockDim.x)
      a.out[(first_row + i / hd) * a.out_stride + i % hd] = __int_as_float(0x7fc00000);
    return;
  }
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int warps = static_cast<int>(blockDim.x) >> 5;
  Layout layout;
  layout.plan(a.head_dim, lane);
  const int groups = 32 / layout.lanes;    // keys per warp and round
  const int key_of_lane = lane / layout.lanes;

  const int64_t capacity = a.max_blocks * a.block_size;
  const int32_t requested = a.lengths[token];
  const int64_t length = requested < 0 ? 0 : (requested > capacity ? capacity : requested);
  const int64_t lo = a.window > 0 && length > a.window ? length - a.window : 0;
  const int32_t* table = a.block_table + token * a.max_blocks;
  const int64_t cache_blocks = a.slots / a.block_size;
  const auto block_size = static_cast<uint32_t>(a.block_size);
  const S* k_head = static_cast<const S*>(a.k) + kv_head * a.slots * a.k_stride;
  const S* v_head = static_cast<const S*>(a.v) + kv_head * a.slots * a.v_stride;

  float q[G][N];
  float acc[G][N];
  float m[G];
  float l[G];
#pragma unroll
  for (int h = 0; h < G; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int e = 0; e < N; ++e) {
      q[h][e] = h < heads && layout.has(e) ? a.q[(first_row + h) * a.q_stride + layout.dim(e)] : 0.0f;
      acc[h][e] = 0.0f;
    }
  }

  // Round r of warp w covers keys lo + (r * warps + w) * groups + [0, groups); the loop
  // bound is the warp's, so every lane reaches every shuffle.
  const int64_t round_keys = int64_t{groups} * warps;
  for (int64_t first = lo + int64_t{warp} * groups; first < length; first += kRoundsInFlight * round_keys) {
    bool valid[kRoundsInFlight];
    typename Layout::Raw k_raw[kRoundsInFlight];
    typename Layout::Raw v_raw[kRoundsInFlight];
#pragma unroll
    for (int u = 0; u < kRoundsInFlight; ++u) {
      const int64_t pos = first + u * round_keys + key_of_lane;
      // pos < length <= 2^31 - 1 (lengths are i32) and block_size < 2^31 (the op checks):
      // 32-bit division, several times cheaper than 64-bit.
      const uint32_t block = pos < length ? static_cast<uint32_t>(pos) / block_size : 0u;
      const int64_t entry = pos < length ? table[block] : -1;
      valid[u] = entry >= 0 && entry < cache_blocks;
      const int64_t slot = valid[u] ? entry * a.block_size + (pos - int64_t{block} * a.block_size) : 0;
      k_raw[u] = layout.fetch(k_head + slot * a.k_stride, valid[u]);
      v_raw[u] = layout.fetch(v_head + slot * a.v_stride, valid[u]);
    }
#pragma unroll
    for (int u = 0; u < kRoundsInFlight; ++u) {
      float kf[N];
      Layout::convert(k_raw[u], kf);
      float score[G];
#pragma unroll
      for (int h = 0; h < G; ++h) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < N; ++e) dot = fmaf(q[h][e], kf[e], dot);
        for (int offset = layout.lanes >> 1; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
        score[h] = valid[u] ? score_of(dot, a.scale, a.softcap) : -INFINITY;
      }
      float vf[N];
      Layout::convert(v_raw[u], vf);
#pragma unroll
      for (int h = 0; h < G; ++h) {
        if (score[h] > m[h]) {  // a new max: rescale (exp(-inf) = 0 for a fresh state)
          const float rescale = expf(m[h] - score[h]);
          m[h] = score[h];
          l[h] *= rescale;
#pragma unroll
          for (int e = 0; e < N; ++e) acc[h][e] *= rescale;
        }
        const float p = valid[u] ? expf(score[h] - m[h]) : 0.0f;
        l[h] += p;
#pragma unroll
        for (int e = 0; e < N; ++e) acc[h][e] = fmaf(p, vf[e], acc[h][e]);  // vf = 0 for an invalid key
      }
    }
  }

  // The lane groups of the warp merge: afterwards every lane holds the warp's state for
  // its piece of the row.
  for (int offset = layout.lanes; offset < 32; offset <<= 1) {
#pragma unroll
    for (int h = 0; h < G; ++h) {
      const float other_m = __shfl_xor_sync(0xffffffffu, m[h], offset);
      const float other_l = __shfl_xor_sync(0xffffffffu, l[h], offset);
      const float top = fmaxf(m[h], other_m);
      const float mine = m[h] == -INFINITY ? 0.0f : expf(m[h] - top);
      const float theirs = other_m == -INFINITY ? 0.0f : expf(other_m - top);
      l[h] = l[h] * mine + other_l * theirs;
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float other_acc = __shfl_xor_sync(0xffffffffu, acc[h][e], offset);
        acc[h][e] = acc[h][e] * mine + other_acc * theirs;
      }
      m[h] = top;
    }
  }

  // The warps merge in shared memory: weights exp(m_w - M) over the warps that saw a key,
  // their accumulators added one warp after another (a fixed order).
  if (lane == 0) {
#pragma unroll
    for (int h = 0; h < G; ++h) {
      warp_m[warp][h] = m[h];
      warp_l[warp][h] = l[h];
    }
  }
  for (int i = static_cast<int>(threadIdx.x); i < G * hd; i += static_cast<int>(blockDim.x)) acc_sum[i] = 0.0f;
  __syncthreads();
  if (static_cast<int>(threadIdx.x) < G) {
    const int h = static_cast<int>(threadIdx.x);
    float top = -INFINITY;
    for (int w = 0; w < warps; ++w) {
      if (warp_l[w][h] > 0.0f) top = fmaxf(top, warp_m[w][h]);
    }
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) {
      if (warp_l[w][h] > 0.0f) total += warp_l[w][h] * expf(warp_m[w][h] - top);
    }
    head_max[h] = top;
    head_sum[h] = total;
  }
  __syncthreads();
  float weight[G];
#pragma unroll
  for (int h = 0; h < G; ++h) weight[h] = l[h] > 0.0f ? expf(m[h] - head_max[h]) : 0.0f;
  for (int w = 0; w < warps; ++w) {
    if (warp == w && key_of_lane == 0) {
#pragma unroll
      for (int h = 0; h < G; ++h) {
#pragma unroll
        for (int e = 0; e < N; ++e) {
          if (layout.has(e)) acc_sum[h * hd + layout.dim(e)] += acc[h][e] * weight[h];
        }
      }
    }
    __syncthreads();
  }
  for (int i = static_cast<int>(threadIdx.x); i < heads * hd; i += static_cast<int>(blockDim.x)) {
    const int h = i / hd;
    const float total = head_sum[h];
    a.out[(first_row + h) * a.out_stride + (i - h * hd)] = total > 0.0f ? acc_sum[i] / total : 0.0f;  // no key: zeros
  }
}

template <DType C, int G>
void register_vector(KernelRegistry& registry) {
  registry.add(make_cuda_kernel<ops::PagedAttentionArgs>(
      std::string("paged_attention_") + Elem<C>::name + "_g" + std::to_string(G),
      reinterpret_cast<const void*>(&paged_attention_kernel<C, G, VectorLayout<C>>), kMaxThreads));
}

}  // namespace

void register_paged_attention_cuda_kernels(KernelRegistry& registry) {
  for_each_float_type([&]<DType C>() {
    register_vector<C, 1>(registry);
    register_vector<C, 2>(registry);
    register_vector<C, 4>(registry);
    register_vector<C, 8>(registry);
    registry.add(make_cuda_kernel<ops::PagedAttentionArgs>(
        std::string("paged_attention_scalar_") + Elem<C>::name,
        reinterpret_cast<const void*>(&paged_attention_kernel<C, 1, ScalarLayout<C>>), kMaxThreads));
  });
}

}  // namespace onepass::cuda
