// Attention: causal grouped-query SDPA for a batch of queries (prefill), and
// flash-decoding for one query token (split over the KV range, merged by log-sum-exp).
#pragma once

#include <cstddef>
#include <cstdint>
#include "onepass/exec/graph_session.h"

namespace onepass::ops {

/// A dataflow fact the caller of flash_decode may state about the dispatch recorded just
/// before it: which rows of the cache it writes. A backend may use it to read the rest of
/// the cache earlier (CUDA: before the programmatic-launch wait).
enum class CacheWrites : uint8_t {
  /// Nothing is promised: the dispatch before may write any row.
  any_row,
  /// The dispatch before writes no cache row below kv_length - 1 (a decode step's
  /// rope_kv_write or kv_write writes only the token's own row, kv_length - 1).
  token_row_only,
};

/// Options of sdpa and flash_decode. Zero-initialised fields are invalid on purpose, so a
/// forgotten field is an error rather than a silent wrong answer. Query head h reads KV
/// head h / (n_head / n_kv_head) (grouped-query attention).
struct AttentionParams {
  float scale = 0.0f;  // applied to q·k, usually 1/sqrt(head_dim)
  int32_t n_head = 0;
  int32_t n_kv_head = 0;  // divides n_head
  int32_t head_dim = 0;
  /// Sliding window: the query at position p sees keys max(0, p - window + 1)..p only;
  /// 0: every key up to p.
  int32_t window = 0;
  /// Scores (after `scale`) pass through softcap * tanh(s / softcap) when > 0 (Gemma 2).
  float softcap = 0.0f;
};

/// Most keys of one flash-decoding partial: a full cache needs at least
/// ctx / kFlashDecodeChunk chunks.
inline constexpr int64_t kFlashDecodeChunk = 256;
/// Fewest keys of a partial worth a block of its own: short caches are still split this
/// finely, so that a few hundred keys are spread over several blocks (and over all four
/// warps of each) instead of one block walking them in sequence.
inline constexpr int64_t kFlashDecodeMinChunk = 64;
/// (head, chunk) partials a cache is split into at most (one wave of blocks on the GPUs we
/// target: 4 resident per SM, 132 SMs): a cache is split finer only while they fit. A
/// constant, not a device's figure, so every backend splits alike.
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

/// Chunks that take keys when `length` keys are valid: one per `chunk_keys` keys (rounded
/// up), at least one, at most `chunks`; every chunk when chunk_keys <= 0 (a backend may
/// leave short caches to fewer blocks this way). (Host and device.)
#if defined(__CUDACC__)
__host__ __device__
#endif
inline int64_t flash_decode_used_chunks(int64_t length, int64_t chunks, int64_t chunk_keys) {
  if (chunk_keys <= 0) return chunks;
  const int64_t used = (length + chunk_keys - 1) / chunk_keys;
  return used < 1 ? 1 : (used > chunks ? chunks : used);
}

/// sdpa: q, out [tokens, n_head, head_dim]: rows (token, head) q_stride / out_stride
/// elements apart. k, v [n_kv_head, ctx, head_dim] of the cache type (f32, f16, bf16):
/// rows (kv head, position) k_stride / v_stride elements apart. Query t attends to keys
/// 0..min(positions[t], ctx - 1); a negative position sees no key and gives zeros. Scores,
/// softmax and the weighted sum in f32.
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
  int64_t window;  // 0: none
  float softcap;   // 0: none
};

/// The steps of flash-decoding share this struct. With L = clamp(*kv_length, 0, ctx) and
/// W = L - lo valid keys from lo = max(0, L - window) (lo = 0 without a window), chunk c of
/// `chunks` (of the used chunks, flash_decode_used_chunks(W, ...)) covers keys
/// lo + [flash_decode_chunk_begin(c, W, chunks), flash_decode_chunk_begin(c + 1, W, chunks)); its
/// partial result is m = max of the scaled scores, l = sum exp(s - m), acc = sum
/// exp(s - m) * v (a chunk with no valid key: m = -inf, l = 0, no acc). The output is
/// out[h] = sum_c acc_c * exp(m_c - M) / sum_c l_c * exp(m_c - M), M = max_c m_c, over the
/// partials with l > 0; a head with no valid key (L = 0) gives zeros.
///
/// The op has two steps: partials per (chunk, head), then their merge ("flash_decode_merge":
/// reads only scratch, writes out). Scratch layout (f32): acc [n_head, chunks, head_dim],
/// then m [n_head, chunks], then l [n_head, chunks]; acc is left unwritten for an empty
/// chunk. A backend may compute both steps in one kernel (KernelChoice::needs_merge false),
/// leaving scratch unused.
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
  /// Read-only data a later dispatch reads (flash_decode's prefetch hint), whole 16-byte
  /// pieces, 16-byte aligned; null when none. A backend may request it into a cache while
  /// the attention, whose own memory traffic is small, runs.
  const void* prefetch;
  int64_t prefetch_bytes;
  /// The backend's: fewest valid keys per chunk (flash_decode_used_chunks); 0 uses every
  /// chunk.
  int64_t chunk_keys;
  /// 1 when the caller states CacheWrites::token_row_only, else 0.
  int32_t token_row_only;
  int64_t window;  // 0: none
  float softcap;   // 0: none
};

/// Operands flash_decode may read early (KernelChoice::early_operands).
inline constexpr uint32_t kFlashDecodeKvLength = 1u << 0;
inline constexpr uint32_t kFlashDecodePrefetch = 1u << 1;

/// Causal grouped-query attention for a batch of queries q [tokens, n_head, head_dim]
/// over caches k, v [n_kv_head, ctx, head_dim]; query t sees keys 0..positions[t].
void sdpa(GraphSession& s, const TensorView& q, const TensorView& k, const TensorView& v,
                           const TensorView& positions, const TensorView& out,
                           const AttentionParams& params);

/// One query token q [n_head, head_dim] over caches k, v [n_kv_head, ctx, head_dim]
/// with the number of valid keys read from kv_length (i32 [1]); split over the KV
/// length, merged with log-sum-exp. `scratch` (flash_decode_scratch_bytes()) holds the
/// partial results where the backend merges in a second step. `prefetch_l2` (optional,
/// read-only for the pass): data later dispatches read, a hint a backend may use to warm
/// its caches while the attention runs. `cache_writes`: what the dispatch recorded just
/// before this one writes of the cache (CacheWrites).
void flash_decode(GraphSession& s, const TensorView& q, const TensorView& k, const TensorView& v,
                                   const TensorView& kv_length, const TensorView& out,
                                   const BufferView& scratch, const AttentionParams& params,
                                   const BufferView& prefetch_l2 = {},
                                   CacheWrites cache_writes = CacheWrites::any_row);

}  // namespace onepass::ops
