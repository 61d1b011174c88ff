// The CPU backend's kernel choice: for each op, which kernel runs it and how its grid is
// cut into blocks (cpu_launch.h). Blocks run on the pool; block.x stays 1.
#include "select.h"

#include <algorithm>

#include "../kernel_names.h"
#include "cpu_launch.h"
#include "onepass/core/error.h"
#include "onepass/exec/backend.h"
#include "onepass/ops/affine.h"
#include "onepass/ops/attention.h"
#include "onepass/ops/matmul.h"
#include "onepass/ops/matmul_id.h"
#include "onepass/ops/paged_attention.h"

namespace onepass::cpu {
namespace {

KernelChoice named(const Backend& b, const std::string& name, LaunchDims dims) {
  return KernelChoice{&b.registry().get(name), dims};
}

std::string typed(std::string_view base, DType t) { return cat(base, "_", dtype_name(t)); }

// Elementwise ops: blocks of kCpuElementwiseBlock values of the flattened result.
KernelChoice elementwise(const Backend& b, const KernelRequest& r) {
  LaunchDims dims;
  dims.grid.x = grid_blocks(r.rows * r.cols, kCpuElementwiseBlock, r.op);
  return named(b, typed(r.op, r.type), dims);
}

// Row ops (norms, softmax, argmax, sample): one block per row.
LaunchDims row_dims(const KernelRequest& r) {
  LaunchDims dims;
  dims.grid.x = grid_extent(r.rows, r.op);
  return dims;
}
KernelChoice per_row(const Backend& b, const KernelRequest& r) { return named(b, typed(r.op, r.type), row_dims(r)); }

KernelChoice rms_norm_no_weight(const Backend& b, const KernelRequest& r) {
  return named(b, typed("rms_norm_noweight", r.type), row_dims(r));
}

KernelChoice copy(const Backend& b, const KernelRequest& r) {
  LaunchDims dims;
  dims.grid.x = grid_blocks(r.rows * r.cols, kCpuElementwiseBlock, r.op);
  return named(b, cat("copy_", dtype_name(r.type), "_", dtype_name(r.type2)), dims);
}

KernelChoice copy_bytes(const Backend& b, const KernelRequest& r) {
  LaunchDims dims;
  dims.grid.x = grid_blocks(r.cols, static_cast<int64_t>(kCpuCopyBytesBlock), r.op);
  return named(b, "copy_bytes", dims);
}

// Rows of the cache written: (token, kv head).
KernelChoice kv_write(const Backend& b, const KernelRequest& r) {
  return named(b, cat("kv_write_", dtype_name(r.type), "_", dtype_name(r.type2)), row_dims(r));
}

// rope, rope_neox (one block per token), rope_kv_write, rope_kv_write_neox (the cache
// type; one block per token).
KernelChoice rope(const Backend& b, const KernelRequest& r) { return named(b, typed(r.op, r.type), row_dims(r)); }

KernelChoice embedding(const Backend& b, const KernelRequest& r) {
  return named(b, cat("embedding_", dtype_name(r.type), "_", dtype_name(r.type2)), row_dims(r));
}

KernelChoice feed_token(const Backend& b, const KernelRequest&) { return named(b, "feed_token", {}); }

// moe_route, moe_combine: one block per token.
KernelChoice moe(const Backend& b, const KernelRequest& r) { return named(b, std::string(r.op), row_dims(r)); }

KernelChoice argmax_feed(const Backend& b, const KernelRequest& r) {
  return named(b, cat("argmax_", dtype_name(r.type), "_feed"), row_dims(r));
}

// One block per (kv head, token), covering the query heads of the group, so each K/V row
// is converted once per group.
KernelChoice sdpa(const Backend& b, const KernelRequest& r) {
  const auto& a = r.args_as<ops::SdpaArgs>();
  LaunchDims dims;
  dims.grid.x = grid_extent(a.n_kv_head, r.op);
  dims.grid.y = grid_extent(a.tokens, r.op);
  return named(b, typed("sdpa", r.type), dims);
}

// Two dispatches: partials per (chunk, kv head), then a merge per query head.
KernelChoice flash_decode(const Backend& b, const KernelRequest& r) {
  const auto& a = r.args_as<ops::FlashDecodeArgs>();
  LaunchDims dims;
  dims.grid.x = grid_extent(a.chunks, r.op);
  dims.grid.y = grid_extent(a.n_kv_head, r.op);
  KernelChoice choice = named(b, typed("flash_decode", r.type), dims);
  choice.needs_merge = true;
  return choice;
}

// One block per (kv head, token), covering the query heads of the group (as sdpa).
KernelChoice paged_attention(const Backend& b, const KernelRequest& r) {
  const auto& a = r.args_as<ops::PagedAttentionArgs>();
  LaunchDims dims;
  dims.grid.x = grid_extent(a.n_kv_head, r.op);
  dims.grid.y = grid_extent(a.tokens, r.op);
  return named(b, typed("paged_attention", r.type), dims);
}

KernelChoice flash_decode_merge(const Backend& b, const KernelRequest& r) {
  const auto& a = r.args_as<ops::FlashDecodeArgs>();
  LaunchDims dims;
  dims.grid.x = grid_extent(a.n_head, r.op);
  return named(b, "flash_decode_merge", dims);
}

LaunchDims product_dims(bool mv, int64_t m, int64_t n, std::string_view op) {
  LaunchDims dims;
  if (mv) {
    dims.grid.x = grid_blocks(n, kCpuMvRowsPerBlock, op);
  } else {
    dims.grid.x = grid_blocks(n, kCpuMmRowsPerBlock, op);
    dims.grid.y = grid_blocks(m, kCpuMmColsPerBlock, op);
  }
  return dims;
}

KernelChoice matmul(const Backend& b, const KernelRequest& r) {
  const bool mv = r.rows <= ops::kMatmulMvMaxRows;
  return named(b, cat(mv ? "mv_" : "mm_", dtype_name(r.type), "_f32"), product_dims(mv, r.rows, r.cols, r.op));
}

// The matrix-vector product with its fused norm, SiLU x up, residual add or RoPE + KV write
// (mv_fused.cpp). The RoPE epilogue needs each pair (2i, 2i + 1) inside one block: blocks
// start at multiples of kCpuMvRowsPerBlock, which is even.
KernelChoice matmul_fused(const Backend& b, const KernelRequest& r) {
  static_assert(kCpuMvRowsPerBlock % 2 == 0);
  const auto& a = r.args_as<ops::FusedMatvecArgs>();
  if (r.rows > ops::kMatmulMvMaxRows) return {};
  if (a.rope.positions != nullptr) {
    const DType c = a.rope.cache_type;
    if (r.rows != 1 || a.rope.head_dim % 2 != 0 || (c != DType::f32 && c != DType::f16 && c != DType::bf16)) return {};
  }
  return named(b, cat("mv_fused_", dtype_name(r.type), "_f32"), product_dims(true, r.rows, r.cols, r.op));
}

KernelChoice matmul_affine(const Backend& b, const KernelRequest& r) {
  const auto& a = r.args_as<ops::AffineMatmulArgs>();
  const bool mv = r.rows <= ops::kMatmulMvMaxRows;
  return named(b, affine_kernel_name(mv, a.bits, a.group_size, r.type), product_dims(mv, r.rows, r.cols, r.op));
}

// One token: a block per (kCpuMvRowsPerBlock columns, slot, token).
KernelChoice matmul_id(const Backend& b, const KernelRequest& r) {
  const auto& a = r.args_as<ops::MatmulIdArgs>();
  LaunchDims dims;
  dims.grid.x = grid_blocks(a.n, kCpuMvRowsPerBlock, r.op);
  dims.grid.y = grid_extent(a.slots, r.op);
  dims.grid.z = grid_extent(a.tokens, r.op);
  return named(b, typed("mv_id", r.type) + "_f32", dims);
}

KernelChoice matmul_id_group(const Backend& b, const KernelRequest&) { return named(b, "matmul_id_group", {}); }

// Many tokens: a block per (kCpuMmRowsPerBlock columns, expert), y == E for invalid ids.
KernelChoice matmul_id_grouped(const Backend& b, const KernelRequest& r) {
  const auto& a = r.args_as<ops::MatmulIdArgs>();
  LaunchDims dims;
  dims.grid.x = grid_blocks(a.n, kCpuMmRowsPerBlock, r.op);
  dims.grid.y = grid_extent(a.n_experts + 1, r.op);
  return named(b, typed("mm_id", r.type) + "_f32", dims);
}

}  // namespace

void register_cpu_selectors(KernelSelectors& s) {
  for (std::string_view op : {"add", "mul", "scale", "gelu", "silu", "softcap", "silu_mul", "gelu_mul"}) s.add(op, elementwise);
  for (std::string_view op : {"rms_norm", "rms_norm_mul", "rms_norm_add", "add_rms_norm", "softmax", "argmax", "sample"}) {
    s.add(op, per_row);
  }
  s.add("rms_norm_no_weight", rms_norm_no_weight);
  s.add("copy", copy);
  s.add("copy_bytes", copy_bytes);
  s.add("kv_write", kv_write);
  for (std::string_view op : {"rope", "rope_neox", "rope_kv_write", "rope_kv_write_neox"}) s.add(op, rope);
  s.add("embedding", embedding);
  s.add("feed_token", feed_token);
  s.add("moe_route", moe);
  s.add("moe_combine", moe);
  s.add("argmax_feed", argmax_feed);
  s.add("sdpa", sdpa);
  s.add("flash_decode", flash_decode);
  s.add("flash_decode_merge", flash_decode_merge);
  s.add("paged_attention", paged_attention);
  s.add("matmul", matmul);
  s.add("matmul_fused", matmul_fused);
  s.add("matmul_affine", matmul_affine);
  s.add("matmul_id", matmul_id);
  s.add("matmul_id_group", matmul_id_group);
  s.add("matmul_id_grouped", matmul_id_grouped);
}

}  // namespace onepass::cpu
