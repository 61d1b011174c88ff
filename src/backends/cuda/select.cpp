// The CUDA backend's kernel choice for every op but the products (matmul/select.cpp):
// which kernel runs it, its launch shape, and which operands it reads before its
// programmatic-launch wait.
#include "select.h"

#include <algorithm>

#include "../kernel_names.h"
#include "launch.h"
#include "matmul/select.h"
#include "onepass/core/error.h"
#include "onepass/exec/backend.h"
#include "onepass/ops/argmax.h"
#include "onepass/ops/attention.h"
#include "onepass/ops/paged_attention.h"
#include "onepass/ops/rope.h"

namespace onepass::cuda {
namespace {

KernelChoice named(const Backend& b, const std::string& name, LaunchDims dims, uint32_t early = 0) {
  return KernelChoice{&b.registry().get(name), dims, early};
}

std::string typed(std::string_view base, DType t) { return cat(base, "_", dtype_name(t)); }

// Elementwise ops: 256 threads per block, each handling 4 values with a grid-stride loop.
LaunchDims elementwise_dims(int64_t elements) {
  constexpr int64_t kThreads = 256;
  constexpr int64_t kPerThread = 4;
  const int64_t blocks = (elements + kThreads * kPerThread - 1) / (kThreads * kPerThread);
  LaunchDims dims;
  dims.block.x = kThreads;
  dims.grid.x = static_cast<uint32_t>(std::clamp<int64_t>(blocks, 1, 65535 * 16));
  return dims;
}

// Row ops: one block per row, enough threads that each handles a few values, a whole
// number of warps.
LaunchDims row_dims(int64_t rows, int64_t cols, std::string_view op) {
  LaunchDims dims;
  dims.grid.x = grid_extent(rows, op);
  int64_t threads = std::clamp<int64_t>((cols + 3) / 4, 32, 1024);
  threads = (threads + 31) / 32 * 32;
  dims.block.x = static_cast<uint32_t>(threads);
  return dims;
}

KernelChoice elementwise(const Backend& b, const KernelRequest& r) {
  return named(b, typed(r.op, r.type), elementwise_dims(r.rows * r.cols));
}

// rms_norm, rms_norm_mul, rms_norm_add, add_rms_norm, softmax, rope, rope_neox.
KernelChoice per_row(const Backend& b, const KernelRequest& r) {
  return named(b, typed(r.op, r.type), row_dims(r.rows, r.cols, r.op));
}

KernelChoice rms_norm_no_weight(const Backend& b, const KernelRequest& r) {
  return named(b, typed("rms_norm_noweight", r.type), row_dims(r.rows, r.cols, r.op));
}

KernelChoice copy(const Backend& b, const KernelRequest& r) {
  return named(b, cat("copy_", dtype_name(r.type), "_", dtype_name(r.type2)), elementwise_dims(r.rows * r.cols));
}

// Grid-stride over 16-byte words.
KernelChoice copy_bytes(const Backend& b, const KernelRequest& r) {
  LaunchDims dims;
  dims.block.x = 256;
  dims.grid.x = static_cast<uint32_t>(std::clamp<int64_t>((r.cols / 16 + 255) / 256, 1, 4096));
  return named(b, "copy_bytes", dims);
}

KernelChoice kv_write(const Backend& b, const KernelRequest& r) {
  return named(b, cat("kv_write_", dtype_name(r.type), "_", dtype_name(r.type2)), row_dims(r.rows, r.cols, r.op));
}

// One block per (token, head row: q rows, then k rows, then v rows). The angles a layer
// loads (RopeCosSin::load) and the position are read before the PDL wait by the Q/K/V
// product this op is folded into.
KernelChoice rope_kv_write(const Backend& b, const KernelRequest& r) {
  const auto& a = r.args_as<ops::RopeKvArgs>();
  LaunchDims dims;
  dims.grid.x = grid_extent(a.tokens, r.op);
  dims.grid.y = static_cast<uint32_t>(a.n_head + 2 * a.n_kv_head);
  dims.block.x = static_cast<uint32_t>(std::clamp<int64_t>((a.head_dim / 2 + 31) / 32 * 32, 32, 256));
  const uint32_t early = a.cos_sin_in != nullptr ? ops::kRopeKvLoadedAngles | ops::kRopeKvPositions : 0u;
  return named(b, typed(r.op, r.type), dims, early);
}

KernelChoice embedding(const Backend& b, const KernelRequest& r) {
  LaunchDims dims;
  dims.grid.x = grid_extent(r.rows, r.op);
  dims.block.x = 256;
  return named(b, cat("embedding_", dtype_name(r.type), "_", dtype_name(r.type2)), dims);
}

// One block of one thread.
KernelChoice feed_token(const Backend& b, const KernelRequest&) { return named(b, "feed_token", {}); }

// One warp per token.
KernelChoice moe_route(const Backend& b, const KernelRequest& r) {
  LaunchDims dims;
  dims.grid.x = grid_extent(r.rows, r.op);
  dims.block.x = 32;
  return named(b, "moe_route", dims);
}

// 256 outputs per block, one row of blocks per token.
KernelChoice moe_combine(const Backend& b, const KernelRequest& r) {
  LaunchDims dims;
  dims.grid.x = static_cast<uint32_t>((r.cols + 255) / 256);
  check(r.rows <= 65535, r.op, r.rows, " tokens in one dispatch, more than a grid's y extent (65535)");
  dims.grid.y = static_cast<uint32_t>(r.rows);
  dims.block.x = 256;
  return named(b, "moe_combine", dims);
}

// Long rows (a vocabulary): a cluster of chunk blocks per row, merged by its first block.
KernelChoice argmax_named(const Backend& b, const KernelRequest& r, std::string_view suffix) {
  const std::string cluster = cat("argmax_cluster_", dtype_name(r.type), suffix);
  if (r.cols >= kCudaArgmaxClusterMinCols && r.rows <= 65535 && b.registry().contains(cluster)) {
    LaunchDims dims;
    dims.grid.x = static_cast<uint32_t>(cuda_argmax_chunks(r.cols));
    dims.grid.y = static_cast<uint32_t>(r.rows);
    dims.block.x = 1024;
    return named(b, cluster, dims);
  }
  return named(b, cat("argmax_", dtype_name(r.type), suffix), row_dims(r.rows, r.cols, r.op));
}
KernelChoice argmax(const Backend& b, const KernelRequest& r) { return argmax_named(b, r, ""); }
KernelChoice argmax_feed(const Backend& b, const KernelRequest& r) { return argmax_named(b, r, "_feed"); }

// One block of 1024 threads per row, with a bit per column of dynamic shared memory (the
// row's penalised tokens); no kernel for longer rows.
KernelChoice sample(const Backend& b, const KernelRequest& r) {
  const int64_t bitmap_bytes = (r.cols + 31) / 32 * 4;
  if (bitmap_bytes > kCudaSampleMaxBitmapBytes) return {};
  LaunchDims dims;
  dims.grid.x = grid_extent(r.rows, r.op);
  dims.block.x = 1024;
  dims.shared_bytes = static_cast<uint32_t>(bitmap_bytes);
  return named(b, "sample_f32", dims);
}

// One block per (query head, token), or, for f16 caches with 16-byte aligned rows of 64
// or 128 values, the tensor-core kernel: one block per (64 tokens, query head).
KernelChoice sdpa(const Backend& b, const KernelRequest& r) {
  const auto& a = r.args_as<ops::SdpaArgs>();
  // The tensor-core kernel has no sliding window and no softcap: such layers take the
  // per-head kernel.
  const bool tensor_cores = a.window == 0 && a.softcap == 0.0f && r.type == DType::f16 && (a.head_dim == 64 || a.head_dim == 128) && a.k_stride % 8 == 0 &&
                            a.v_stride % 8 == 0 && reinterpret_cast<uint64_t>(a.k) % 16 == 0 &&
                            reinterpret_cast<uint64_t>(a.v) % 16 == 0;
  LaunchDims dims;
  if (tensor_cores) {
    const Kernel& kernel = b.registry().get(cat("sdpa_tc_f16_hd", a.head_dim));
    dims.grid.x = static_cast<uint32_t>(std::max<int64_t>(1, (a.tokens + kCudaSdpaTcTokens - 1) / kCudaSdpaTcTokens));
    dims.grid.y = static_cast<uint32_t>(a.n_head);
    dims.block.x = 128;
    dims.shared_bytes = kernel.max_shared_bytes;
    return KernelChoice{&kernel, dims};
  }
  dims.grid.x = grid_extent(a.n_head, r.op);
  dims.grid.y = grid_extent(a.tokens, r.op);
  dims.block.x = kCudaAttentionThreads;
  return named(b, typed("sdpa", r.type), dims);
}

// One cluster of chunk blocks per query head; the partials never leave the cluster, so
// there is no merge step. kv_length (and the prefetch hint) are read before the PDL wait;
// with CacheWrites::token_row_only so is the cache below the token's row.
KernelChoice flash_decode(const Backend& b, const KernelRequest& r) {
  auto& a = r.args_as<ops::FlashDecodeArgs>();
  a.chunks = cuda_flash_decode_chunks(a.n_head, a.ctx);
  a.chunk_keys = kCudaFlashDecodeChunkKeys;
  LaunchDims dims;
  dims.grid.x = static_cast<uint32_t>(a.chunks);
  dims.grid.y = static_cast<uint32_t>(a.n_head);
  dims.block.x = kCudaAttentionThreads;
  dims.shared_bytes = flash_decode_cluster_shared_bytes(a.chunks, a.head_dim);
  uint32_t early = ops::kFlashDecodeKvLength;
  if (a.prefetch != nullptr) early |= ops::kFlashDecodePrefetch;
  return named(b, typed("flash_decode_cluster", r.type), dims, early);
}

// One block per (token, kv head, pass of up to G query heads of the group), G the smallest
// of 1, 2, 4, 8 that holds the group (passes beyond 8 heads re-read the keys). Rows of 16-byte
// words (at most 32 of them, 16-byte aligned) take the vector kernel, others the scalar one
// (one query head per pass). Warps per block: kCudaPagedAttentionMaxWarps for grids of at
// most kCudaPagedAttentionWideGrid blocks, else 4.
KernelChoice paged_attention(const Backend& b, const KernelRequest& r) {
  const auto& a = r.args_as<ops::PagedAttentionArgs>();
  const int64_t per_word = 16 / static_cast<int64_t>(dtype_size(r.type));
  const bool vector = a.head_dim % per_word == 0 && a.head_dim / per_word <= 32 && a.k_stride % per_word == 0 &&
                      a.v_stride % per_word == 0 && reinterpret_cast<uint64_t>(a.k) % 16 == 0 &&
                      reinterpret_cast<uint64_t>(a.v) % 16 == 0;
  const int64_t group = a.n_head / a.n_kv_head;
  const int64_t g = !vector ? 1 : group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8;
  const int64_t passes = (group + g - 1) / g;
  const int64_t blocks = a.n_kv_head * passes * a.tokens;
  const int64_t warps = blocks <= kCudaPagedAttentionWideGrid ? kCudaPagedAttentionMaxWarps : 4;
  LaunchDims dims;
  dims.grid.x = grid_extent(a.n_kv_head * passes, r.op);
  dims.grid.y = grid_extent(a.tokens, r.op);
  dims.block.x = static_cast<uint32_t>(warps * 32);
  const std::string name = vector ? cat("paged_attention_", dtype_name(r.type), "_g", g)
                                  : typed("paged_attention_scalar", r.type);
  return named(b, name, dims);
}

}  // namespace

void register_cuda_selectors(KernelSelectors& s) {
  for (std::string_view op : {"add", "mul", "scale", "gelu", "silu", "softcap", "silu_mul", "gelu_mul"}) s.add(op, elementwise);
  for (std::string_view op :
       {"rms_norm", "rms_norm_mul", "rms_norm_add", "add_rms_norm", "softmax", "rope", "rope_neox"}) {
    s.add(op, per_row);
  }
  s.add("rms_norm_no_weight", rms_norm_no_weight);
  s.add("copy", copy);
  s.add("copy_bytes", copy_bytes);
  s.add("kv_write", kv_write);
  s.add("rope_kv_write", rope_kv_write);
  s.add("rope_kv_write_neox", rope_kv_write);
  s.add("embedding", embedding);
  s.add("feed_token", feed_token);
  s.add("moe_route", moe_route);
  s.add("moe_combine", moe_combine);
  s.add("argmax", argmax);
  s.add("argmax_feed", argmax_feed);
  s.add("sample", sample);
  s.add("sdpa", sdpa);
  s.add("flash_decode", flash_decode);
  s.add("paged_attention", paged_attention);
  register_matmul_selectors(s);
}

}  // namespace onepass::cuda
