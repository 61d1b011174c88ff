// Attention: causal grouped-query SDPA for a batch of queries (prefill), and
// flash-decoding for one query token (split over the KV range, merged by log-sum-exp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace onepass::ops {

/// Options of GraphSession::sdpa and flash_decode. Zero-initialised fields are invalid on
/// purpose, so a forgotten field is an error rather than a silent wrong answer.
/// Query head h reads KV head h / (n_head / n_kv_head) (grouped-query attention).
/// When flash_decode's CUDA kernel may copy the cache's history, the keys below
/// kv_length - 1. A PDL kernel starts while the dispatch before it runs, and every kernel
/// lets its successor launch only after its own wait, so when flash_decode starts every
/// dispatch but its predecessor has completed.
enum class KvHistory : uint8_t {
  /// After the kernel's PDL wait, like every other key: any dispatch may write any row.
  after_wait,
  /// Before the wait: the caller promises that the dispatch recorded just before this one
  /// writes no cache row below kv_length - 1. A decode step's rope_kv_write (or kv_write)
  /// writes only the token's own row, kv_length - 1, which is still copied after the wait.
  before_wait,
};

struct AttentionParams {
  float scale = 0.0f;  // applied to q·k, usually 1/sqrt(head_dim)
  int32_t n_head = 0;
  int32_t n_kv_head = 0;  // divides n_head
  int32_t head_dim = 0;
};

/// Most keys of one flash-decoding partial: a full cache needs at least
/// ctx / kFlashDecodeChunk chunks.
inline constexpr int64_t kFlashDecodeChunk = 256;
/// Fewest keys of a partial worth a block of its own: short caches are still split this
/// finely, so that a few hundred keys are spread over several blocks (and over all four
/// warps of each) instead of one block walking them in sequence.
inline constexpr int64_t kFlashDecodeMinChunk = 64;
/// (head, chunk) blocks that one wave of the CUDA kernel holds on the GPUs we target (4
/// resident blocks per SM, 132 SMs): a cache is split finer only while the blocks fit.
/// A constant, not the device's figure, so the CPU and CUDA kernels split alike.
inline constexpr int64_t kFlashDecodeWave = 512;

/// Number of chunks for n_head query heads over a cache of `ctx` positions: between
/// ctx / kFlashDecodeChunk and ctx / kFlashDecodeMinChunk (rounded up), as many as one
/// wave allows. Depends on the capacity only, never on the valid length, so a recorded
/// graph stays valid as the length grows.
inline int64_t flash_decode_chunks(int64_t n_head, int64_t ctx) {
  const int64_t fewest = (ctx + kFlashDecodeChunk - 1) / kFlashDecodeChunk;
  const int64_t finest = (ctx + kFlashDecodeMinChunk - 1) / kFlashDecodeMinChunk;
  const int64_t wave = kFlashDecodeWave / (n_head > 0 ? n_head : 1);
  const int64_t chunks = finest < wave ? finest : wave;
  return chunks > fewest ? chunks : fewest;
}

/// First key of chunk c when `length` keys are valid: the valid keys are shared evenly
/// among the chunks (chunk c covers [begin(c), begin(c + 1))), so the blocks share the work
/// at any length, and none gets more than kFlashDecodeChunk keys. (Host and device.)
#if defined(__CUDACC__)
__host__ __device__
#endif
inline int64_t flash_decode_chunk_begin(int64_t chunk, int64_t length, int64_t chunks) {
  return chunk * length / chunks;
}

/// Bytes of scratch GraphSession::flash_decode needs: per (head, chunk) a head_dim f32
/// accumulator, a running max and a sum of exponentials.
inline size_t flash_decode_scratch_bytes(int64_t n_head, int64_t ctx, int64_t head_dim) {
  const int64_t partials = n_head * flash_decode_chunks(n_head, ctx);
  return static_cast<size_t>(partials * (head_dim + 2)) * sizeof(float);
}

/// Fewest valid keys per chunk the CUDA cluster kernel hands out: with L valid keys only
/// the first flash_decode_used_chunks(L, chunks, kCudaFlashDecodeChunkKeys) blocks of a
/// head's cluster take keys and the rest exit at once, so that a short cache is attended
/// by one block per head with no hand-off between blocks (the hand-off and its merge cost
/// more than the few keys they spread).
inline constexpr int64_t kCudaFlashDecodeChunkKeys = 64;

/// Chunks that take keys when `length` keys are valid: one per `chunk_keys` keys (rounded
/// up), at least one, at most `chunks`; every chunk when chunk_keys <= 0. (Host and device.)
#if defined(__CUDACC__)
__host__ __device__
#endif
inline int64_t flash_decode_used_chunks(int64_t length, int64_t chunks, int64_t chunk_keys) {
  if (chunk_keys <= 0) return chunks;
  const int64_t used = (length + chunk_keys - 1) / chunk_keys;
  return used < 1 ? 1 : (used > chunks ? chunks : used);
}

/// Kernel sdpa_<C> for the cache type C in f32, f16, bf16; q and out are f32.
/// q, out [tokens, n_head, head_dim]: rows (token, head) q_stride / out_stride elements
/// apart. k, v [n_kv_head, ctx, head_dim]: rows (kv head, position) k_stride / v_stride
/// elements apart. Query t attends to keys 0..min(positions[t], ctx - 1); a negative
/// position sees no key and gives zeros. Scores, softmax and the weighted sum in f32.
/// Work: CUDA grid {n_head, tokens} (head fastest), one block per (query head, token),
/// blockDim a multiple of 32 (128 chosen by the op). CPU grid {n_kv_head, tokens}, one
/// block per (kv head, token) covering the n_head / n_kv_head query heads of that group.
/// CUDA, f16 caches with 16-byte aligned rows of 64 or 128 values: kernel
/// sdpa_tc_f16_hd<head_dim> on tensor cores instead, grid {ceil(tokens / kCudaSdpaTcTokens),
/// n_head}, one block (128 threads, the kernel's max_shared_bytes) per (64 tokens, query head).
inline constexpr int64_t kCudaSdpaTcTokens = 64;
struct SdpaArgs {
  const float* q;
  const void* k;
  const void* v;
  const int32_t* positions;
  float* out;
  int64_t tokens;
  int64_t n_head;
  int64_t n_kv_head;
  int64_t head_dim;
  int64_t ctx;
  int64_t q_stride;
  int64_t k_stride;
  int64_t v_stride;
  int64_t out_stride;
  float scale;
};

/// Most chunks of one head on CUDA: the chunks of a head run as one thread-block cluster
/// of at most 8 blocks (the portable size, kMaxClusterBlocks). Clusters of up to 16 (a
/// non-portable size Hopper allows) measured slower at a 512-position cache.
inline constexpr int64_t kCudaFlashDecodeClusterMax = 8;

/// Chunks flash_decode splits a head's keys into on a backend: flash_decode_chunks, capped
/// at kCudaFlashDecodeClusterMax on CUDA.
inline int64_t flash_decode_backend_chunks(bool cuda, int64_t n_head, int64_t ctx) {
  const int64_t chunks = flash_decode_chunks(n_head, ctx);
  return cuda && chunks > kCudaFlashDecodeClusterMax ? kCudaFlashDecodeClusterMax : chunks;
}

/// Largest head the CUDA attention kernels compute (a larger one gives NaN outputs).
inline constexpr int64_t kCudaAttentionMaxHeadDim = 512;
/// Dynamic shared memory of flash_decode_cluster_<C>: the first block's slots, one partial
/// (head_dim accumulators, m and l) per chunk; a head beyond kCudaAttentionMaxHeadDim keeps
/// only m and l.
inline uint32_t flash_decode_cluster_shared_bytes(int64_t chunks, int64_t head_dim) {
  const int64_t dims = head_dim <= kCudaAttentionMaxHeadDim ? head_dim : 0;
  return static_cast<uint32_t>(chunks * (dims + 2) * 4);
}

/// The dispatches of flash-decoding share this struct. With L = clamp(*kv_length, 0, ctx),
/// chunk c of `chunks` (CUDA: of the used chunks, flash_decode_used_chunks) covers keys
/// [flash_decode_chunk_begin(c, L, chunks), flash_decode_chunk_begin(c + 1, L, chunks)); its
/// partial result is m = max of the scaled scores, l = sum exp(s - m), acc = sum
/// exp(s - m) * v (a chunk with no valid key: m = -inf, l = 0, no acc). The output is
/// out[h] = sum_c acc_c * exp(m_c - M) / sum_c l_c * exp(m_c - M), M = max_c m_c, over the
/// partials with l > 0; a head with no valid key (L = 0) gives zeros.
///
/// CPU, two dispatches. Kernel flash_decode_<C> (C = cache type f32, f16, bf16): grid
/// {chunks, n_kv_head}, one block per (kv head, chunk) covering the group's query heads,
/// writing the partials to scratch (layout below; acc left unwritten for an empty chunk).
/// Kernel flash_decode_merge: grid {n_head}, one block per head; reads only scratch and
/// writes out. Scratch layout (f32): acc [n_head, chunks, head_dim], then m [n_head,
/// chunks], then l [n_head, chunks].
///
/// CUDA, one dispatch. Kernel flash_decode_cluster_<C>: grid {chunks, n_head} (chunks <=
/// kCudaFlashDecodeClusterMax) launched in clusters of {chunks, 1, 1} (Kernel::cluster_rows),
/// 128 threads, flash_decode_cluster_shared_bytes(chunks, head_dim) of dynamic shared
/// memory; each block stores its partial into the cluster's first block (asynchronous
/// stores counted on that block's transaction barrier), which merges them once all have
/// landed (scratch is not used). kv_length is read before the PDL wait.
struct FlashDecodeArgs {
  const float* q;
  const void* k;
  const void* v;
  const int32_t* kv_length;
  float* out;
  float* scratch;
  int64_t n_head;
  int64_t n_kv_head;
  int64_t head_dim;
  int64_t ctx;
  int64_t chunks;
  int64_t q_stride;
  int64_t k_stride;
  int64_t v_stride;
  int64_t out_stride;
  float scale;
  /// CUDA: bytes [prefetch, prefetch + prefetch_bytes) of read-only data a later dispatch
  /// reads (the next products' weights) are requested into L2 by this one, whose own
  /// DRAM traffic is small (GraphSession::flash_decode's prefetch_l2). 16-byte aligned.
  const void* prefetch;
  int64_t prefetch_bytes;
  /// CUDA: fewest valid keys per chunk (flash_decode_used_chunks); 0 uses every chunk.
  int64_t chunk_keys;
  /// CUDA: nonzero when the keys below kv_length - 1 may be copied before the kernel's PDL
  /// wait (KvHistory::before_wait).
  int32_t history_before_wait;
};

}  // namespace onepass::ops
