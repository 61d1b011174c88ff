// Embedding gather: out[t] = table[ids[t]], dequantized / converted to out's dtype.
#pragma once

#include <cstdint>
#include "onepass/exec/graph_session.h"

namespace onepass::ops {

/// embedding: table [vocab, dim] of weight type W (f32, f16, bf16 or a GGML
/// block format, rows table_row_bytes apart), ids i32 [tokens], out [tokens, dim] of type
/// O (f32, f16, bf16). An id outside [0, vocab) gives a row of zeros and reads nothing.
/// Values are those of dequantize() (ops/quant.h), rounded once to O.
struct EmbeddingArgs {
  const void* table;
  const int32_t* ids;
  void* out;
  int64_t tokens;
  int64_t vocab;
  int64_t dim;
  int64_t table_row_bytes;
  int64_t out_stride;  // elements between rows of out
};

/// out[t] = table[ids[t]] converted to out's dtype; table may be quantized.
void embedding(GraphSession& s, const TensorView& table, const TensorView& ids, const TensorView& out);

}  // namespace onepass::ops
