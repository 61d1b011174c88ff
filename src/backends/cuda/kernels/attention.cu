// CUDA kernels: sdpa_<C> and flash_decode_cluster_<C> (flash-decoding: chunk partials
// merged inside a thread-block cluster), for KV caches of type C in f32, f16, bf16. q, out,
// scores and sums are f32.
//
// sdpa and flash_decode share one block-level routine. A block (4 warps) owns one query
// head and a key range; the range's stages (16 keys of a 64-value f16 head) are dealt to
// the warps in turn, and each warp keeps its own online softmax
// state (max m, sum l, accumulator). Each warp streams its keys through a private ring
// of shared-memory stages filled with 16-byte cp.async copies, so that the bytes in
// flight do not depend on registers; `lanes` lanes share one key, each holding 16 bytes
// of the row, and the q . k partial sums of 4 keys are reduced over those lanes with a
// transposed shuffle reduction. At the end the warps' states are merged in shared
// memory. Rows that are not 16-byte words, or longer than 32 words, take a scalar path.
#include <cooperative_groups.h>

#include <cstring>

#include "common.cuh"
#include "onepass/ops/attention.h"
#include "../launch.h"
#include "ptx.cuh"
#include "registration.h"

namespace onepass::cuda {
namespace {

constexpr int kMaxWarps = 4;  // blockDim.x <= 128: the op launches 128 (registered max)
constexpr int kMaxThreads = kMaxWarps * 32;
constexpr int kWarpKeys = 64;  // most keys per stage; keys per tile of the scalar fallback
constexpr int kMaxHeadDim = static_cast<int>(kCudaAttentionMaxHeadDim);
constexpr int kStages = 3;         // depth of each warp's copy ring
constexpr int kStageBytes = 2048;  // K rows of one stage (and as many V bytes)
constexpr int kWarpBytes = kStages * 2 * kStageBytes;
constexpr int kMaxKeysPerGroup = 4;  // keys of one stage per lane group

// Shared memory of one attention block: 12 KB per warp (48 KB, the static limit). While
// a warp walks its keys the region is its ring of K/V stages; afterwards it holds the
// warp's state: acc [0, head_dim) at float 0, m and l at floats kMaxHeadDim and +1.
struct AttentionShared {
  struct alignas(16) Region {
    unsigned char bytes[kWarpBytes];
  };
  Region warp[kMaxWarps];

  __device__ __forceinline__ float* acc(int w) { return reinterpret_cast<float*>(warp[w].bytes); }
  __device__ __forceinline__ float* state(int w) { return acc(w) + kMaxHeadDim; }       // m, l
  __device__ __forceinline__ float* scores(int w) { return acc(w) + kMaxHeadDim + 4; }  // fallback
  __device__ __forceinline__ uint4* ring_k(int w, int slot) {
    return reinterpret_cast<uint4*>(warp[w].bytes + slot * 2 * kStageBytes);
  }
  __device__ __forceinline__ uint4* ring_v(int w, int slot) {
    return reinterpret_cast<uint4*>(warp[w].bytes + slot * 2 * kStageBytes + kStageBytes);
  }
};
static_assert(sizeof(AttentionShared) <= 48 * 1024, "static shared memory limit");
static_assert((kMaxHeadDim + 4 + kWarpKeys) * sizeof(float) <= kWarpBytes,
              "warp state fits its region");

// kVec = 16 / sizeof(S) consecutive cache values as f32, from one 16-byte word.
template <DType C>
struct CacheVec {
  using S = typename Elem<C>::storage;
  static constexpr int kVec = 16 / sizeof(S);

  __device__ __forceinline__ static void convert(const uint4& r, float (&f)[kVec]) {
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

// Asynchronous 16-byte global -> shared copies (sm_80+), in per-thread commit groups.
__device__ __forceinline__ void copy_async_16(void* shared, const void* global) {
  ptx::cp_async16(ptx::smem_addr(shared), global);
}
using ptx::cp_async_commit;
using ptx::cp_async_wait;

// One warp's online softmax over its keys, streamed through a ring of kStages shared
// memory stages filled by cp.async, so that about 8 KB of K and V per warp are in flight
// whatever the register budget. `lanes` lanes share a key, lane `sub` holding 16-byte
// word `sub` of the row (lanes with sub >= vecs idle); a stage holds 2 or 4 keys per
// group, key t of the group being key group + t * groups of the stage.
// A key's score from its q·k: scaled, then capped by softcap * tanh(s / softcap) when
// softcap > 0 (Gemma 2). The cap is uniform over the kernel, so its branch never diverges.
struct ScoreMap {
  float scale;
  float softcap;
  __device__ __forceinline__ float operator()(float dot) const {
    const float s = dot * scale;
    return softcap > 0.0f ? softcap * tanhf(s / softcap) : s;
  }
};

template <DType C>
struct WarpAttention {
  using Vec = CacheVec<C>;
  using S = typename Vec::S;
  static constexpr int kVec = Vec::kVec;
  static constexpr int kCopies = kStageBytes / 16 / 32;  // 16-byte copies per lane and stage

  int lanes;       // lanes per key: the smallest power of two >= vecs (vecs <= 32)
  int groups;      // keys per warp step: 32 / lanes
  int sub;         // lane within its group: the word of the row it holds
  int group;       // which key of a step this lane works on
  int vecs;        // head_dim / kVec: 16-byte words per row
  int stage_keys;  // keys per stage: a power of two, 2 or 4 per group, at most kWarpKeys
  bool active;     // sub < vecs
  float q[kVec];
  float acc[kVec];      // sum of p * v over this group's keys, for this lane's word
  float m = -INFINITY;  // max scaled score so far (the same on every lane)
  float l = 0.0f;       // sum of exp(score - m) over this group's keys
  // Copy i of a stage moves word c = lane + 32 i: word c % vecs of key c / vecs.
  int copy_key[kCopies];
  int64_t copy_k[kCopies];  // its element offset from the stage's first K row
  int64_t copy_v[kCopies];

  // The lane's layout, from the arguments alone: the cluster kernel computes it before its
  // PDL wait, so that these divisions and loops are off the chain's critical path (after
  // the wait, ~350 instructions preceded the first K/V copy). Needs head_dim % kVec == 0
  // and head_dim <= 32 * kVec.
  __device__ __forceinline__ void plan(int head_dim, int64_t k_stride, int64_t v_stride, int lane) {
    vecs = head_dim / kVec;
    lanes = 1;
    while (lanes < vecs) lanes <<= 1;
    groups = 32 / lanes;
    sub = lane & (lanes - 1);
    group = lane / lanes;
    active = sub < vecs;
    // The largest power of two of keys whose rows fit kStageBytes: then
    // stage_keys * lanes is 128 (64 for lanes = 1), i.e. 4 (2) keys per group.
    stage_keys = 1;
    while (stage_keys * 2 <= kWarpKeys && stage_keys * 2 * vecs * 16 <= kStageBytes)
      stage_keys <<= 1;
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      const int c = lane + 32 * i;
      copy_key[i] = c / vecs;
      const int word = c - copy_key[i] * vecs;
      copy_k[i] = copy_key[i] * k_stride + word * kVec;
      copy_v[i] = copy_key[i] * v_stride + word * kVec;
    }
  }

  // The query row (written by the predecessor: after the wait).
  __device__ __forceinline__ void load_q(const float* q_row) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      q[e] = active ? q_row[sub * kVec + e] : 0.0f;
      acc[e] = 0.0f;
    }
  }

  // Starts the copies of `count` K and V rows (count <= stage_keys) from the rows at
  // k_rows / v_rows into one ring slot: word c of the slot is word c % vecs of key c / vecs.
  __device__ __forceinline__ void issue(uint4* ring_k, uint4* ring_v, const S* k_rows,
                                        const S* v_rows, int count, int lane) const {
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      if (copy_key[i] < count) {
        copy_async_16(ring_k + lane + 32 * i, k_rows + copy_k[i]);
        copy_async_16(ring_v + lane + 32 * i, v_rows + copy_v[i]);
      }
    }
  }

  // Folds the `count` keys of a landed stage into the state. One body for full and
  // partial stages: a copy specialised for full stages (no key checks) saves the checks but
  // makes the kernel larger, and the decode chain pays for instruction fetch (bench-gpu).
  __device__ __forceinline__ void fold(const uint4* ring_k, const uint4* ring_v, int count, ScoreMap scale) {
    // This lane's word of key t: base + t * step. An idle lane (sub >= vecs) reads its
    // group's first word instead and discards what it computes. No branch in here: the
    // four keys' loads and sums interleave (with branches, each key's load and chain of
    // FMAs would wait for the previous key's).
    const int base = group * vecs + (active ? sub : 0);
    const int step = groups * vecs;
    bool valid[kMaxKeysPerGroup];
    float part[kMaxKeysPerGroup];  // this lane's share of q . k for each of the keys
#pragma unroll
    for (int t = 0; t < kMaxKeysPerGroup; ++t) {
      valid[t] = group + t * groups < count;
      // Words of keys past `count` still lie inside the slot (stage_keys * vecs <= 128
      // words): reading them is safe, and their dot products are discarded below.
      float kf[kVec];
      Vec::convert(ring_k[base + t * step], kf);
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < kVec; ++e) dot = fmaf(q[e], kf[e], dot);
      part[t] = active ? dot : 0.0f;  // a select: stale words may hold NaN
    }
    float p[kMaxKeysPerGroup];  // exp(score - m) of each key (0 when not valid)
    if (lanes >= 4) {
      // Transposed reduction over the group's lanes: the first two levels halve the
      // values each lane carries, so lane (sub) ends with the whole dot product of key
      // own = 2 * [sub has bit lanes/2] + [sub has bit lanes/4], in 5 shuffles for 4 keys.
      const int half = lanes >> 1;
      const int quarter = lanes >> 2;
      const bool hi = (sub & half) != 0;
      const bool hi2 = (sub & quarter) != 0;
      const float a0 =
          (hi ? part[2] : part[0]) + __shfl_xor_sync(0xffffffffu, hi ? part[0] : part[2], half);
      const float a1 =
          (hi ? part[3] : part[1]) + __shfl_xor_sync(0xffffffffu, hi ? part[1] : part[3], half);
      float dot = (hi2 ? a1 : a0) + __shfl_xor_sync(0xffffffffu, hi2 ? a0 : a1, quarter);
      for (int offset = quarter >> 1; offset > 0; offset >>= 1)
        dot += __shfl_xor_sync(0xffffffffu, dot, offset);
      const int own = (hi ? 2 : 0) + (hi2 ? 1 : 0);
      const bool own_valid = own == 0   ? valid[0]
                             : own == 1 ? valid[1]
                             : own == 2 ? valid[2]
                                        : valid[3];
      const float score = own_valid ? scale(dot) : -INFINITY;
      rescale_to(warp_max(score));
      // One exp per lane, then each key's weight from a lane that owns it. m is finite
      // (the stage has a key): an invalid key's exp(-inf) is 0, with no branch.
      const float mine = expf(score - m);
      const int first_lane = group * lanes;
#pragma unroll
      for (int t = 0; t < kMaxKeysPerGroup; ++t) {
        p[t] = __shfl_sync(0xffffffffu, mine, first_lane + (t >> 1) * half + (t & 1) * quarter);
      }
    } else {
      // One or two lanes per key: plain butterflies, every lane holds every dot.
      float score[kMaxKeysPerGroup];
      float local_max = -INFINITY;
#pragma unroll
      for (int t = 0; t < kMaxKeysPerGroup; ++t) {
        float dot = part[t];
        if (lanes == 2) dot += __shfl_xor_sync(0xffffffffu, dot, 1);
        score[t] = valid[t] ? scale(dot) : -INFINITY;
        local_max = fmaxf(local_max, score[t]);
      }
      rescale_to(warp_max(local_max));
#pragma unroll
      for (int t = 0; t < kMaxKeysPerGroup; ++t) p[t] = expf(score[t] - m);  // 0 for invalid keys
    }
#pragma unroll
    for (int t = 0; t < kMaxKeysPerGroup; ++t) {
      l += p[t];  // p = 0 for an invalid key
      // The V words of invalid keys (and of idle lanes) are replaced by zeros, not
      // multiplied by p = 0: 0 * (stale NaN) would poison acc.
      uint4 word = ring_v[base + t * step];
      if (!(valid[t] && active)) word = make_uint4(0u, 0u, 0u, 0u);
      float vf[kVec];
      Vec::convert(word, vf);
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[e] = fmaf(p[t], vf[e], acc[e]);
    }
  }

  // Raises the running max to include `stage_max` (finite: the stage has a key),
  // rescaling l and acc. exp(-inf) = 0: a fresh state (m = -inf, l and acc 0) just
  // takes the stage. m is the same on every lane, so the branch is uniform.
  __device__ __forceinline__ void rescale_to(float stage_max) {
    if (stage_max > m) {
      const float rescale = expf(m - stage_max);
      m = stage_max;
      l *= rescale;
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[e] *= rescale;
    }
  }

  // Sums l and acc over the key groups (lanes with the same `sub`): afterwards every lane
  // holds the warp's totals for its word.
  __device__ __forceinline__ void reduce_groups() {
    for (int offset = lanes; offset < 32; offset <<= 1) {
      l += __shfl_xor_sync(0xffffffffu, l, offset);
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], offset);
    }
  }
};

// Walks a warp's stages: the stages of the range are dealt to the warps in turn (warp w
// takes stages w, w + warps, ...), so that a short range still keeps every warp busy and
// no warp walks more than its share in sequence. The keys only grow, so the stages are
// valid while first < end.
struct StageCursor {
  int64_t first;

  __device__ __forceinline__ void advance(int stage_keys, int warps) { first += int64_t{warps} * stage_keys; }
};

// Starts the copies of a warp's first kStages - 1 stages of keys [begin, end), of the keys
// below `held` only, one commit group per stage (empty where nothing is copied). `held`
// is end, or end - 1 when the cluster kernel runs this before its PDL wait: the keys
// below it are rows that no dispatch still running can write
// (FlashDecodeArgs::token_row_only), and attend_warps copies the last after the wait.
template <DType C>
__device__ __forceinline__ void attend_prologue(const WarpAttention<C>& w, const typename Elem<C>::storage* k,
                                                const typename Elem<C>::storage* v, int64_t k_stride,
                                                int64_t v_stride, int64_t begin, int64_t end, int64_t held,
                                                AttentionShared& sh) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int warps = static_cast<int>(blockDim.x) >> 5;
  StageCursor ahead{begin + int64_t{warp} * w.stage_keys};
#pragma unroll
  for (int t = 0; t < kStages - 1; ++t) {
    if (ahead.first < end && ahead.first < held) {
      const int64_t stop = end < held ? end : held;
      const int count = static_cast<int>(stop - ahead.first < w.stage_keys ? stop - ahead.first : w.stage_keys);
      w.issue(sh.ring_k(warp, t), sh.ring_v(warp, t), k + ahead.first * k_stride, v + ahead.first * v_stride,
              count, lane);
    }
    cp_async_commit();
    ahead.advance(w.stage_keys, warps);
  }
}

// Every warp attends over its stages of keys [begin, end) of one KV head and leaves its
// state (m, l, acc[0, head_dim)) in shared memory; ends with a barrier. Called by every
// thread of the block. Keys [begin, held) of the first kStages - 1 stages were copied by
// attend_prologue (before the PDL wait, where allowed); held is end or end - 1.
// w: planned (WarpAttention::plan) for this lane.
template <DType C>
__device__ __forceinline__ void attend_warps(WarpAttention<C>& w, const float* q_row,
                                             const typename Elem<C>::storage* k,
                                             const typename Elem<C>::storage* v, int64_t k_stride,
                                             int64_t v_stride, int64_t begin, int64_t end,
                                             ScoreMap scale, AttentionShared& sh, int64_t held) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int warps = static_cast<int>(blockDim.x) >> 5;
  using Warp = WarpAttention<C>;
  constexpr int kVec = Warp::kVec;
  w.load_q(q_row);
  auto count_of = [&](int64_t first) {
    return static_cast<int>(end - first < w.stage_keys ? end - first : w.stage_keys);
  };
  // attend_prologue leaves at most one key, the range's last (held = end - 1, the token's
  // own row): when it lies in one of the first kStages - 1 stages, its K and V words go
  // into their places in the slot (word c of a slot is word c % vecs of key c / vecs) in
  // one more commit group, which the first stage then waits for too.
  bool held_copy = false;
  if (held < end) {
#pragma unroll
    for (int t = 0; t < kStages - 1; ++t) {
      const int64_t first = begin + int64_t{warp + warps * t} * w.stage_keys;
      if (held >= first && held < first + w.stage_keys) {  // the same for the whole warp
        const int word = static_cast<int>(held - first) * w.vecs + lane;
        if (lane < w.vecs) {
          copy_async_16(sh.ring_k(warp, t) + word, k + held * k_stride + lane * kVec);
          copy_async_16(sh.ring_v(warp, t) + word, v + held * v_stride + lane * kVec);
        }
        held_copy = true;
      }
    }
    if (held_copy) cp_async_commit();
  }
  // One commit group per stage from here (empty past the last), so after stage t's own
  // commit wait_group<kStages - 1> means "stage t has landed" (for t = 0 with the held
  // copies one group more is newer than stage 0's: wait_group<kStages - 2>).
  StageCursor ahead{begin + int64_t{warp} * w.stage_keys + int64_t{kStages - 1} * warps * w.stage_keys};
  StageCursor stage{begin + int64_t{warp} * w.stage_keys};
  for (int t = 0; stage.first < end; ++t) {
    // Refills the slot read in iteration t - 1 (every lane passed that iteration's
    // __syncwarp, so it is free).
    if (ahead.first < end) {
      const int slot = (t + kStages - 1) % kStages;
      w.issue(sh.ring_k(warp, slot), sh.ring_v(warp, slot), k + ahead.first * k_stride,
              v + ahead.first * v_stride, count_of(ahead.first), lane);
    }
    cp_async_commit();
    ahead.advance(w.stage_keys, warps);
    if (t == 0 && held_copy) {
      cp_async_wait<kStages - 2>();
    } else {
      cp_async_wait<kStages - 1>();
    }
    __syncwarp();  // every lane's copies of stage t are visible to the warp
    const int count = count_of(stage.first);
    w.fold(sh.ring_k(warp, t % kStages), sh.ring_v(warp, t % kStages), count, scale);
    __syncwarp();  // every lane is done with the slot before it is refilled
    stage.advance(w.stage_keys, warps);
  }
  cp_async_wait<0>();  // nothing is in flight past the last stage; kept for safety
  w.reduce_groups();
  // The ring is done with (last __syncwarp above): the region now takes the state.
  if (w.group == 0 && w.active) {
    float* acc = sh.acc(warp);
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[w.sub * kVec + e] = w.acc[e];
  }
  if (lane == 0) {
    sh.state(warp)[0] = w.m;
    sh.state(warp)[1] = w.l;
  }
  __syncthreads();
}

// Fallback for caches whose rows do not allow 16-byte access: one key per warp step,
// lanes over head values, each warp's accumulator in its shared region (lane owns values
// d = lane + 32 i), so registers stay few. Same result as attend_warps (its state in
// shared memory, a barrier at the end). Needs head_dim <= kMaxHeadDim.
template <DType C>
__device__ __noinline__ void attend_warps_scalar(const float* q_row,
                                                 const typename Elem<C>::storage* k,
                                                 const typename Elem<C>::storage* v,
                                                 int64_t k_stride, int64_t v_stride, int64_t begin,
                                                 int64_t end, ScoreMap scale, int head_dim,
                                                 AttentionShared& sh) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int warps = static_cast<int>(blockDim.x) >> 5;
  float* acc = sh.acc(warp);
  float* scores = sh.scores(warp);
  for (int d = lane; d < head_dim; d += 32) acc[d] = 0.0f;
  float m = -INFINITY;
  float l = 0.0f;  // the same on every lane
  for (int64_t first = begin + int64_t{warp} * kWarpKeys; first < end;
       first += int64_t{warps} * kWarpKeys) {
    const int n = static_cast<int>(end - first < kWarpKeys ? end - first : kWarpKeys);
    float tile_max = -INFINITY;
    for (int key = 0; key < n; ++key) {
      const typename Elem<C>::storage* row = k + (first + key) * k_stride;
      float dot = 0.0f;
      for (int d = lane; d < head_dim; d += 32) dot = fmaf(q_row[d], Elem<C>::load(row[d]), dot);
      const float score = scale(warp_sum(dot));
      if (lane == 0) scores[key] = score;
      tile_max = fmaxf(tile_max, score);
    }
    const float m_new = fmaxf(m, tile_max);
    const float rescale = m == m_new ? 1.0f : expf(m - m_new);
    m = m_new;
    l *= rescale;
    for (int d = lane; d < head_dim; d += 32) acc[d] *= rescale;
    __syncwarp();  // lane 0's scores are visible to the warp
    for (int key = 0; key < n; ++key) {
      const float p = expf(scores[key] - m);
      l += p;
      const typename Elem<C>::storage* row = v + (first + key) * v_stride;
      for (int d = lane; d < head_dim; d += 32) acc[d] = fmaf(p, Elem<C>::load(row[d]), acc[d]);
    }
    __syncwarp();  // every lane has read the scores before the next tile overwrites them
  }
  if (lane == 0) {
    sh.state(warp)[0] = m;
    sh.state(warp)[1] = l;
  }
  __syncthreads();
}

// attend_warps when a row is at most 32 16-byte words (head_dim <= 256 for f16/bf16,
// <= 128 for f32), head_dim and both row strides are whole words and the caches are
// 16-byte aligned (every cache the op allocates for such head sizes, with head_dim a
// multiple of 8); attend_warps_scalar otherwise. Planned from the arguments alone
// (AttendPlan::make, before a PDL wait where the kernel has one), then run after it.
template <DType C>
struct AttendPlan {
  using S = typename Elem<C>::storage;
  bool fits;     // head_dim <= kMaxHeadDim; else run() does nothing (no barrier)
  bool vectors;  // attend_warps (with w planned), else attend_warps_scalar
  int64_t held;  // keys [begin, held) of the first stages were copied by prologue(): end or end - 1
  WarpAttention<C> w;

  // Copies the first stages' keys below `below` (attend_prologue: end, or end - 1 before
  // a PDL wait whose predecessor writes that key); before run().
  __device__ __forceinline__ void prologue(const S* k, const S* v, int64_t k_stride, int64_t v_stride,
                                           int64_t begin, int64_t end, int64_t below, AttentionShared& sh) {
    held = below;
    if (vectors) attend_prologue<C>(w, k, v, k_stride, v_stride, begin, end, below, sh);
  }

  __device__ __forceinline__ void make(const S* k, const S* v, int64_t k_stride, int64_t v_stride, int64_t head_dim) {
    constexpr int kVec = 16 / sizeof(S);
    fits = head_dim <= kMaxHeadDim;
    vectors = fits && head_dim % kVec == 0 && head_dim <= 32 * kVec && k_stride % kVec == 0 &&
              v_stride % kVec == 0 && reinterpret_cast<uintptr_t>(k) % 16 == 0 &&
              reinterpret_cast<uintptr_t>(v) % 16 == 0;
    if (vectors) w.plan(static_cast<int>(head_dim), k_stride, v_stride, static_cast<int>(threadIdx.x) & 31);
  }

  // False (nothing done, no barrier) when head_dim > kMaxHeadDim. The outcome is the same
  // for every thread.
  __device__ __forceinline__ bool run(const float* q_row, const S* k, const S* v, int64_t k_stride, int64_t v_stride,
                                      int64_t begin, int64_t end, ScoreMap scale, int64_t head_dim, AttentionShared& sh) {
    if (!fits) return false;
    if (vectors) {
      attend_warps<C>(w, q_row, k, v, k_stride, v_stride, begin, end, scale, sh, held);
    } else {
      attend_warps_scalar<C>(q_row, k, v, k_stride, v_stride, begin, end, scale, static_cast<int>(head_dim), sh);
    }
    return true;
  }
};

template <DType C>
__device__ __forceinline__ bool attend(const float* q_row, const typename Elem<C>::storage* k,
                                       const typename Elem<C>::storage* v, int64_t k_stride,
                                       int64_t v_stride, int64_t begin, int64_t end, ScoreMap scale,
                                       int64_t head_dim, AttentionShared& sh) {
  AttendPlan<C> plan;
  plan.make(k, v, k_stride, v_stride, head_dim);
  plan.prologue(k, v, k_stride, v_stride, begin, end, end, sh);
  return plan.run(q_row, k, v, k_stride, v_stride, begin, end, scale, head_dim, sh);
}

// Weights that merge the warps' states: weight[w] = exp(m_w - M) with M the largest m
// of the warps that saw a key (0 for the others, whose acc is never read). Returns the
// merged sum L = sum_w l_w * weight[w] (0 when no warp saw a key).
__device__ __forceinline__ float warp_weights(AttentionShared& sh, float& max_out,
                                              float (&weight)[kMaxWarps]) {
  const int warps = static_cast<int>(blockDim.x) >> 5;
  float max = -INFINITY;
  bool seen[kMaxWarps];
  float m[kMaxWarps];
  float l[kMaxWarps];
#pragma unroll
  for (int w = 0; w < kMaxWarps; ++w) {
    m[w] = sh.state(w)[0];  // a warp past `warps` has a region too: a harmless read
    l[w] = sh.state(w)[1];
    seen[w] = w < warps && l[w] > 0.0f;
    if (seen[w]) max = fmaxf(max, m[w]);
  }
  // Selects, not branches: the exps of the warps run side by side (exp(-inf) = 0).
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kMaxWarps; ++w) {
    weight[w] = expf(seen[w] ? m[w] - max : -INFINITY);
    total += (seen[w] ? l[w] : 0.0f) * weight[w];
  }
  max_out = max;
  return total;
}

// sum_w acc_w[d] * weight[w] over the warps with a non-zero weight.
__device__ __forceinline__ float merged_acc(AttentionShared& sh, const float (&weight)[kMaxWarps],
                                            int64_t d) {
  float value = 0.0f;
#pragma unroll
  for (int w = 0; w < kMaxWarps; ++w) {
    // acc of a warp with no key was never written (it may hold NaN): selected away.
    const float acc = sh.acc(w)[d];
    value = fmaf(weight[w] != 0.0f ? acc : 0.0f, weight[w], value);
  }
  return value;
}

// out[d] for d < head_dim: the block's warps' states merged and normalised; zeros when no
// warp saw a key (total = 0: then `weight` is not read).
__device__ __forceinline__ void store_merged(float* out, int64_t head_dim, AttentionShared& sh,
                                             const float (&weight)[kMaxWarps], float total) {
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x)
    out[d] = total > 0.0f ? merged_acc(sh, weight, d) * inv : 0.0f;
}

// Grid {n_head, tokens}: block = (query head, token), keys lo..min(position, ctx - 1), lo the
// window's first key (0 without a window).
template <DType C>
__global__ void __launch_bounds__(kMaxThreads)
    sdpa_kernel(const __grid_constant__ ops::SdpaArgs a) {
  using S = typename Elem<C>::storage;
  __shared__ AttentionShared sh;
  pdl_wait();
  const int64_t head = blockIdx.x;
  const int64_t token = blockIdx.y;
  if (head >= a.n_head || token >= a.tokens) return;  // whole block, before any barrier
  const int64_t kv_head = head / (a.n_head / a.n_kv_head);
  const int64_t position = a.positions[token];
  // A negative position sees no key; past the cache it sees the whole cache.
  const int64_t count = position < 0 ? 0 : (position < a.ctx ? position : a.ctx - 1) + 1;
  const int64_t lo = a.window > 0 && position >= a.window ? position - a.window + 1 : 0;
  const int64_t row = token * a.n_head + head;
  float* out = a.out + row * a.out_stride;
  const S* k = static_cast<const S*>(a.k) + kv_head * a.ctx * a.k_stride;
  const S* v = static_cast<const S*>(a.v) + kv_head * a.ctx * a.v_stride;
  if (!attend<C>(a.q + row * a.q_stride, k, v, a.k_stride, a.v_stride, lo < count ? lo : count, count,
                 ScoreMap{a.scale, a.softcap}, a.head_dim, sh)) {
    // head_dim beyond kMaxHeadDim: make the failure visible rather than silent.
    for (int64_t d = threadIdx.x; d < a.head_dim; d += blockDim.x)
      out[d] = __int_as_float(0x7fc00000);
    return;
  }
  float max;
  float weight[kMaxWarps];
  const float total = warp_weights(sh, max, weight);
  store_merged(out, a.head_dim, sh, weight, total);  // no key (count = 0): zeros
}

// Grid {chunks, n_head} in clusters of {chunks, 1, 1}: block = (chunk, query head), as
// many chunks as a cluster holds (kCudaFlashDecodeClusterMax). The valid keys are shared
// among the first flash_decode_used_chunks blocks (at least a.chunk_keys each; the others
// exit at once); with one such block it writes the head's output alone. Otherwise each
// block with keys attends over its chunk of the valid keys and stores its partial (acc, m,
// l) straight into slot `chunk` of the cluster's first block's dynamic shared memory
// (distributed shared memory) with asynchronous stores that complete the first block's
// transaction barrier; once all the bytes have landed, the first block merges the slots
// from its own shared memory and writes the head's output. No partial goes through global memory, no merge kernel
// follows, and no block but the first waits for another.
// This block's share of the L2 prefetch (FlashDecodeArgs::prefetch): bulk requests of 4 KB,
// fire and forget, dealt to the blocks in turn (piece p to block p mod blocks), so each
// block issues a few. Issued before the PDL wait (the data is read-only for the pass), so
// DRAM starts on them while the Q/K/V product finishes. Dealt in turn rather than in
// consecutive runs of blockDim pieces, so that no block issues most of them and reaches its
// PDL wait after the wait has returned for the others.
__device__ __forceinline__ void prefetch_share(const ops::FlashDecodeArgs& a) {
  if (a.prefetch == nullptr) return;
  constexpr int64_t kPiece = 4096;
  const int64_t blocks = int64_t{gridDim.x} * gridDim.y;
  const int64_t block = int64_t{blockIdx.y} * gridDim.x + blockIdx.x;
  const int64_t pieces = (a.prefetch_bytes + kPiece - 1) / kPiece;
  const auto* base = static_cast<const char*>(a.prefetch);
  for (int64_t p = int64_t{threadIdx.x} * blocks + block; p < pieces; p += blocks * blockDim.x) {
    const int64_t bytes = min(kPiece, a.prefetch_bytes - p * kPiece);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + p * kPiece), "r"(static_cast<uint32_t>(bytes))
                 : "memory");
  }
}

template <DType C>
__global__ void __launch_bounds__(kMaxThreads)
    flash_decode_cluster_kernel(const __grid_constant__ ops::FlashDecodeArgs a) {
  using S = typename Elem<C>::storage;
  namespace cg = cooperative_groups;
  __shared__ AttentionShared sh;
  extern __shared__ float slots[];  // [chunks][head_dim + 2]: acc, then m and l
  __shared__ uint64_t slots_full;    // the first block's: completes when the others' slots land
  const cg::cluster_group cluster = cg::this_cluster();
  const int64_t chunk = blockIdx.x;
  const int64_t head = blockIdx.y;
  const bool fits = a.head_dim <= kMaxHeadDim;
  const int64_t slot_dims = fits ? a.head_dim : 0;  // a NaN head keeps only m and l
  const int64_t slot_floats = slot_dims + 2;
  // kv_length is written before the pass, never by the predecessor (an early read, see
  // the op): the key range is known before the wait, and the K/V copies start right after it.
  const int32_t valid = *a.kv_length;
  const int64_t length = valid < 0 ? 0 : (valid > a.ctx ? a.ctx : valid);
  // Only the first `used` blocks take keys (at least a.chunk_keys each); with one, the
  // first block writes the head's output itself and no block hands anything over. The
  // fewest keys per block trades hand-offs against parallelism (bench-gpu, short decode).
  // A sliding window shares only its keys [lo, length) among the blocks.
  const int64_t lo = a.window > 0 && length > a.window ? length - a.window : 0;
  const int64_t used = ops::flash_decode_used_chunks(length - lo, a.chunks, a.chunk_keys);
  const int64_t begin = lo + ops::flash_decode_chunk_begin(chunk, length - lo, used);
  const int64_t end = lo + ops::flash_decode_chunk_begin(chunk + 1, length - lo, used);
  if (chunk == 0 && threadIdx.x == 0 && used > 1) {
    ptx::mbarrier_init_for_receive(ptx::smem_addr(&slots_full));
    ptx::mbarrier_expect_bytes(ptx::smem_addr(&slots_full), static_cast<uint32_t>((used - 1) * slot_floats * 4));
  }
  // Every block must have started (and the first block's barrier be initialised) before
  // another stores into its shared memory: arrive now, wait just before the stores (long
  // since complete by then). A block without keys arrives too, then leaves. Relaxed: the
  // barrier's initialisation is published by its own fence (mbarrier_init_for_receive),
  // and nothing else is handed over through this arrival; the default release semantics
  // would put a MEMBAR.GPU on every thread's path to the PDL wait.
  ptx::cluster_arrive_relaxed();
  // The head's cache rows and the lanes' layout come from the arguments alone: computed
  // before the wait, so that their divisions stay off the path from the wait to the first
  // K/V copy.
  const int64_t kv_head = head / (a.n_head / a.n_kv_head);
  const S* k = static_cast<const S*>(a.k) + kv_head * a.ctx * a.k_stride;
  const S* v = static_cast<const S*>(a.v) + kv_head * a.ctx * a.v_stride;
  AttendPlan<C> plan;
  plan.make(k, v, a.k_stride, a.v_stride, a.head_dim);
  prefetch_share(a);
  if (chunk >= used) return;  // no keys: nothing to hand over
  // The cache's history (keys below length - 1) may be copied before the wait when the
  // caller says no dispatch still running writes it; the token's own key, length - 1, is
  // the predecessor's (a decode step's rope_kv_write): after the wait.
  // (Or every copy after the wait: then the wait comes first. Either way one copy of the
  // code, and the whole block takes the same branch.)
  const bool early = a.token_row_only != 0;
  if (!early) pdl_wait();
  plan.prologue(k, v, a.k_stride, a.v_stride, begin, end, early && length - 1 < end ? length - 1 : end, sh);
  if (early) pdl_wait();
  // Every thread of a block with keys reaches its barriers (no early return).
  float max = -INFINITY;
  float total = 0.0f;  // 0: no valid key, an empty partial whose acc is never read
  float weight[kMaxWarps];
  if (begin < end && fits) {
    plan.run(a.q + head * a.q_stride, k, v, a.k_stride, a.v_stride, begin, end, ScoreMap{a.scale, a.softcap},
             a.head_dim, sh);
    total = warp_weights(sh, max, weight);
  }
  float* out = a.out + head * a.out_stride;
  if (used == 1) {
    // The whole head in this block: its warps' merge is the output (a head longer than the
    // shared buffers: NaN, not silence).
    if (fits) {
      store_merged(out, a.head_dim, sh, weight, total);
    } else {
      for (int64_t d = threadIdx.x; d < a.head_dim; d += blockDim.x) out[d] = __int_as_float(0x7fc00000);
    }
    return;
  }
  cluster.barrier_wait();
  if (chunk != 0) {
    // The partial goes into slot `chunk` of the first block by asynchronous stores that
    // count themselves on its barrier (st.async ... complete_tx): no block waits for
    // another, and none but the first waits at all (a cluster barrier would hold every block).
    const uint32_t remote_slot = ptx::cluster_shared_addr(ptx::smem_addr(slots + chunk * slot_floats), 0);
    const uint32_t remote_full = ptx::cluster_shared_addr(ptx::smem_addr(&slots_full), 0);
    for (int64_t i = threadIdx.x; i < slot_floats; i += blockDim.x) {
      // An empty partial stores zeros for its acc (never read: l = 0), so that every
      // block stores the bytes the first block expects.
      const float value = i < slot_dims ? (total > 0.0f ? merged_acc(sh, weight, i) : 0.0f)
                          : i == slot_dims ? max : total;
      ptx::st_async_b32(remote_slot + static_cast<uint32_t>(i) * 4, __float_as_uint(value), remote_full);
    }
    return;
  }
  if (total > 0.0f) {
    for (int64_t d = threadIdx.x; d < slot_dims; d += blockDim.x) slots[d] = merged_acc(sh, weight, d);
  }
  if (threadIdx.x == 0) {
    slots[slot_dims] = max;
    slots[slot_dims + 1] = total;
  }
  __syncthreads();  // its own slot
  ptx::mbarrier_wait_phase0(ptx::smem_addr(&slots_full));  // the others' slots have landed
  // The merge: weights exp(m_c - M) over the partials with l > 0, in chunk order. Every
  // thread reads the chunks' states itself (broadcast shared-memory loads, all issued
  // together in loops unrolled to the cluster's largest size), so no barrier separates
  // the weights from the sums (walking the states one dependent load and exp at a time,
  // or publishing per-chunk weights behind a barrier, puts a serial chain on the merge).
  constexpr int kMaxChunks = static_cast<int>(kCudaFlashDecodeClusterMax);
  const int chunks = static_cast<int>(used);
  float chunk_m[kMaxChunks];
  float chunk_l[kMaxChunks];
  float m_all = -INFINITY;
#pragma unroll
  for (int c = 0; c < kMaxChunks; ++c) {
    chunk_m[c] = c < chunks ? slots[c * slot_floats + slot_dims] : -INFINITY;
    chunk_l[c] = c < chunks ? slots[c * slot_floats + slot_dims + 1] : 0.0f;
    if (chunk_l[c] > 0.0f) m_all = fmaxf(m_all, chunk_m[c]);
  }
  float chunk_weight[kMaxChunks];
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < kMaxChunks; ++c) {
    chunk_weight[c] = chunk_l[c] > 0.0f ? expf(chunk_m[c] - m_all) : 0.0f;
    if (chunk_l[c] > 0.0f) sum = fmaf(chunk_l[c], chunk_weight[c], sum);
  }
  const float inv = 1.0f / sum;
  for (int64_t d = threadIdx.x; d < a.head_dim; d += blockDim.x) {
    float value = 0.0f;
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c) {
      // An empty partial is skipped, not multiplied: its acc was never written.
      if (fits && chunk_l[c] > 0.0f) value = fmaf(slots[c * slot_floats + d], chunk_weight[c], value);
    }
    // No valid key: zeros. A head longer than the shared buffers: NaN, not silence.
    out[d] = !fits ? __int_as_float(0x7fc00000) : m_all == -INFINITY ? 0.0f : value * inv;
  }
}

}  // namespace

void register_attention_cuda_kernels(KernelRegistry& registry) {
  for_each_float_type([&]<DType C>() {
    const std::string t = Elem<C>::name;
    registry.add(make_cuda_kernel<ops::SdpaArgs>(
        "sdpa_" + t, reinterpret_cast<const void*>(&sdpa_kernel<C>), kMaxThreads));
    Kernel flash = make_cuda_kernel<ops::FlashDecodeArgs>(
        "flash_decode_cluster_" + t, reinterpret_cast<const void*>(&flash_decode_cluster_kernel<C>), kMaxThreads,
        true, flash_decode_cluster_shared_bytes(kCudaFlashDecodeClusterMax, kMaxHeadDim));
    flash.cluster_rows = true;
    registry.add(std::move(flash));
  });
}

}  // namespace onepass::cuda
