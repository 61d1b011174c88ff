// KV-cache write: new keys or values into a per-head cache at positions from a buffer.
#pragma once

#include <cstdint>
#include "onepass/exec/graph_session.h"

namespace onepass::ops {

/// kv_write: cache[h, positions[t], :] = convert(src[t, h, :]) for the source and cache
/// types in f32, f16, bf16.
/// src rows (token, head) are src_stride elements apart; cache rows (head, position)
/// cache_stride elements apart. Positions are device data: a position outside [0, ctx)
/// is skipped (nothing written). Two tokens with the same position race: which one
/// lands is unspecified.
struct KvWriteArgs {
  const void* src;
  void* cache;
  const int32_t* positions;
  int64_t tokens;
  int64_t n_kv_head;
  int64_t head_dim;
  int64_t ctx;
  int64_t src_stride;
  int64_t cache_stride;
};

/// Writes src [tokens, n_kv_head, head_dim] into cache [n_kv_head, ctx, head_dim] at
/// the rows given by positions (i32 [tokens]), converting to the cache dtype.
void kv_write(GraphSession& s, const TensorView& src, const TensorView& cache, const TensorView& positions);

}  // namespace onepass::ops
