// Argmax over rows (greedy sampling helper).
#pragma once

#include <cstdint>
#include "onepass/exec/graph_session.h"

namespace onepass::ops {

/// argmax: out[r] = index of the largest value of row r of x [rows, cols] (f32, f16, bf16).
/// Ties go to the lowest index; NaNs never win (an all-NaN row gives 0). x_stride in
/// elements. A backend may scan a long row (a vocabulary) in chunks and merge them.
/// First column of chunk c of `chunks`: a multiple of 8 (whole 16-byte loads of aligned
/// rows). (Host and device.)
#if defined(__CUDACC__)
__host__ __device__
#endif
inline int64_t argmax_chunk_begin(int64_t c, int64_t chunks, int64_t cols) {
  const int64_t per = ((cols + chunks - 1) / chunks + 7) / 8 * 8;
  const int64_t begin = c * per;
  return begin < cols ? begin : cols;
}

struct ArgmaxArgs {
  const void* x;
  int32_t* out;
  int64_t rows;
  int64_t cols;
  int64_t x_stride;
};

/// feed_token (greedy decoding on the device): the next step's inputs from this
/// step's argmax, so that decode steps can follow each other without the host.
///   p = positions[0]; history[p + 1] = token[0] when 0 <= p + 1 < history_size (and
///   history is set); ids[0] = token[0]; positions[0] = p + 1; kv_length[0] += 1.
struct FeedTokenArgs {
  const int32_t* token;
  int32_t* ids;
  int32_t* positions;
  int32_t* kv_length;
  int32_t* history;  // optional
  int64_t history_size;
};

/// What feed_token does with `token`, for the CPU and the CUDA kernels alike (a.token
/// is not read).
#if defined(__CUDACC__)
__host__ __device__
#endif
inline void feed_token_store(const FeedTokenArgs& a, int32_t token) {
  const int64_t next = int64_t{a.positions[0]} + 1;
  if (a.history != nullptr && next >= 0 && next < a.history_size) a.history[next] = token;
  a.ids[0] = token;
  a.positions[0] = static_cast<int32_t>(next);
  a.kv_length[0] += 1;
}

/// What feed_token does.
#if defined(__CUDACC__)
__host__ __device__
#endif
inline void feed_token_apply(const FeedTokenArgs& a) { feed_token_store(a, a.token[0]); }

/// argmax_feed (fusion rule "argmax+feed_token": an argmax of one row followed by the
/// feed_token of its result): the argmax, then feed_token_store of the row's index in the
/// same dispatch, so a greedy decode step ends one dispatch earlier. feed.token is not read.
struct ArgmaxFeedArgs {
  ArgmaxArgs argmax;
  FeedTokenArgs feed;
};

/// out[r] = index of the largest value of row r (i32; lowest index on ties).
void argmax(GraphSession& s, const TensorView& x, const TensorView& out);

/// Greedy decoding on the device (FeedTokenArgs): token [1] (an argmax) becomes
/// the next step's input id, positions and kv_length advance by one, and the token is
/// recorded at history[position + 1]. All i32; history may be empty.
void feed_token(GraphSession& s, const TensorView& token, const TensorView& ids, const TensorView& positions,
                                 const TensorView& kv_length, const TensorView& history);

}  // namespace onepass::ops
