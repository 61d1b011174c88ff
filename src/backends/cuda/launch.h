// Launch constants of the CUDA attention and argmax kernels, shared by their host-side
// choice (select.cpp) and the kernels (kernels/attention.cu, kernels/paged_attention.cu,
// kernels/argmax.cu).
#pragma once

#include <cstdint>

#include "onepass/ops/attention.h"

namespace onepass::cuda {

/// Threads per attention block: four warps share one (head, token) or (head, chunk).
inline constexpr uint32_t kCudaAttentionThreads = 128;

/// sdpa on tensor cores (f16 caches, 16-byte aligned rows of 64 or 128 values): tokens per
/// block, one block per (kCudaSdpaTcTokens tokens, query head).
inline constexpr int64_t kCudaSdpaTcTokens = 64;

/// Largest head the CUDA attention kernels compute (a larger one gives NaN outputs).
inline constexpr int64_t kCudaAttentionMaxHeadDim = 512;

/// Most chunks of one head in flash_decode_cluster_<C>: the chunks of a head run as one
/// thread-block cluster of at most 8 blocks (the portable size, kMaxClusterBlocks).
inline constexpr int64_t kCudaFlashDecodeClusterMax = 8;

/// Fewest valid keys per chunk the cluster kernel hands out (FlashDecodeArgs::chunk_keys):
/// with L valid keys only the first ops::flash_decode_used_chunks(L, chunks, 64) blocks of
/// a head's cluster take keys, so a short cache is attended by one block per head with no
/// hand-off, whose merge costs more than the few keys it spreads.
inline constexpr int64_t kCudaFlashDecodeChunkKeys = 64;

/// Chunks of a head on CUDA: ops::flash_decode_chunks, capped at the cluster size.
inline int64_t cuda_flash_decode_chunks(int64_t n_head, int64_t ctx) {
  const int64_t chunks = ops::flash_decode_chunks(n_head, ctx);
  return chunks > kCudaFlashDecodeClusterMax ? kCudaFlashDecodeClusterMax : chunks;
}

/// Dynamic shared memory of flash_decode_cluster_<C>: the first block's slots, one partial
/// (head_dim accumulators, m and l) per chunk; a head beyond kCudaAttentionMaxHeadDim keeps
/// only m and l.
inline uint32_t flash_decode_cluster_shared_bytes(int64_t chunks, int64_t head_dim) {
  const int64_t dims = head_dim <= kCudaAttentionMaxHeadDim ? head_dim : 0;
  return static_cast<uint32_t>(chunks * (dims + 2) * 4);
}

/// paged_attention: most warps per block (a block is one (token, kv head) and up to G query
/// heads of its group; its warps share the token's keys).
inline constexpr int64_t kCudaPagedAttentionMaxWarps = 8;
/// Grids of at most this many blocks (one per SM of an H100) get kCudaPagedAttentionMaxWarps
/// warps per block, so a small batch keeps more K and V loads in flight on the SMs it has;
/// larger grids get 4, so that several blocks fit each SM (a block of 8 warps of the G = 4
/// kernel takes over half an SM's registers).
inline constexpr int64_t kCudaPagedAttentionWideGrid = 132;
/// Largest head the scalar paged_attention kernel computes (rows that are not 16-byte
/// words, or longer than 32 words); a larger one gives NaN outputs.
inline constexpr int64_t kCudaPagedAttentionScalarMaxHeadDim = 512;

/// argmax over rows of at least kCudaArgmaxClusterMinCols values: argmax_cluster_<T>, grid
/// {chunks, rows} in clusters of {chunks, 1, 1}, chunks = cuda_argmax_chunks(cols), 1024
/// threads; block (c, r) scans [ops::argmax_chunk_begin(c), ops::argmax_chunk_begin(c + 1))
/// of row r and the cluster's first block merges the chunks. One block per row is slower
/// on a vocabulary of 128k values.
inline constexpr int64_t kCudaArgmaxClusterMinCols = 16384;
inline constexpr int64_t kCudaArgmaxClusterMax = 8;
inline int64_t cuda_argmax_chunks(int64_t cols) {
  const int64_t chunks = (cols + 8191) / 8192;
  return chunks < kCudaArgmaxClusterMax ? chunks : kCudaArgmaxClusterMax;
}

/// sample_f32 marks a row's penalised tokens in a shared-memory bitmap of one bit per
/// column: rows of at most 8 x this many columns (1M tokens).
inline constexpr int64_t kCudaSampleMaxBitmapBytes = 128 * 1024;

}  // namespace onepass::cuda
