// Attention over a paged KV cache shared by many sequences: each query row names its own
// sequence through a row of a block table, so one dispatch serves a batched decode step
// (one token of each of B sequences) or a mix of decode tokens and prefill chunks.
//
// The cache of one layer is a pool of blocks of `block_size` positions, laid out head-major
// as k, v [n_kv_head, slots, head_dim] with slots = blocks * block_size: block b owns rows
// [b * block_size, (b + 1) * block_size) of every head. Position p of a sequence lives in
// row block_table[p / block_size] * block_size + p % block_size (its "slot"). ops::kv_write
// writes such a cache unchanged, with the token's slot as its position.
#pragma once

#include <cstdint>

#include "onepass/exec/graph_session.h"
#include "onepass/ops/attention.h"

namespace onepass::ops {

/// paged_attention: q, out [tokens, n_head, head_dim] (rows (token, head) q_stride /
/// out_stride elements apart); k, v [n_kv_head, slots, head_dim] of the cache type (f32,
/// f16, bf16), rows (kv head, slot) k_stride / v_stride elements apart. Query row t sees the
/// first L = lengths[t] positions of its sequence (its own among them: L = position + 1),
/// from lo = max(0, L - window) (lo = 0 without a window); position p is read from slot
/// block_table[t * max_blocks + p / block_size] * block_size + p % block_size. L <= 0
/// gives zeros. Scores, softmax and the weighted sum in f32, as sdpa. Query head h reads
/// KV head h / (n_head / n_kv_head).
struct PagedAttentionArgs {
  const float* q;
  const void* k;
  const void* v;
  const int32_t* block_table;  // [tokens, max_blocks]
  const int32_t* lengths;      // [tokens]
  float* out;
  int64_t tokens;
  int64_t n_head;
  int64_t n_kv_head;
  int64_t head_dim;
  int64_t slots;       // rows per head in k and v (blocks * block_size)
  int64_t block_size;  // in [1, 2^31)
  int64_t max_blocks;  // entries per block-table row
  int64_t q_stride;
  int64_t k_stride;
  int64_t v_stride;
  int64_t out_stride;
  float scale;
  int64_t window;  // 0: none
  float softcap;   // 0: none
};

/// Attention of every query row of q [tokens, n_head, head_dim] over its own sequence in
/// the paged caches k, v [n_kv_head, slots, head_dim]: block_table i32 [tokens, max_blocks]
/// (the row of the query's sequence; entries past the sequence's blocks are not read),
/// lengths i32 [tokens] (keys the query sees). Block-table entries and lengths are device
/// data: a length is clamped to [0, max_blocks * block_size], and the keys of an entry
/// outside [0, slots / block_size) are skipped, so bad device data never reads outside the
/// cache.
void paged_attention(GraphSession& s, const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& block_table, const TensorView& lengths, const TensorView& out,
                     int64_t block_size, const AttentionParams& params);

}  // namespace onepass::ops
