// GraphSession::sdpa and GraphSession::flash_decode.
#include "onepass/ops/attention.h"

#include <algorithm>
#include <cmath>

#include "onepass/exec/graph_session.h"
#include "op_common.h"

namespace onepass {
namespace {

using namespace ops::detail;

// CUDA threads per attention block: four warps share one (head, token) or (head, chunk).
constexpr uint32_t kCudaAttentionThreads = 128;

// Checks the params against themselves and q, k, v; returns ctx.
int64_t check_attention(const char* op, const TensorView& q, const TensorView& k,
                        const TensorView& v, const TensorView& out, const ops::AttentionParams& p) {
  require_data(q, op, "q");
  require_data(k, op, "k");
  require_data(v, op, "v");
  require_data(out, op, "out");
  check(p.n_head > 0 && p.n_kv_head > 0 && p.head_dim > 0, op,
        "params need n_head, n_kv_head and head_dim > 0, got ", p.n_head, ", ", p.n_kv_head, ", ",
        p.head_dim);
  check(p.n_head % p.n_kv_head == 0, op, "n_head (", p.n_head,
        ") must be a multiple of n_kv_head (", p.n_kv_head, ")");
  check(std::isfinite(p.scale) && p.scale > 0.0f, op, "scale must be finite and > 0, got ",
        p.scale);
  require_dtype(q, DType::f32, op, "q");
  require_dtype(out, DType::f32, op, "out");
  require_float(k, op, "k");
  require_same_dtype(k, v, op, "k", "v");
  check(k.shape.ndim() == 3 && k.shape[0] == p.n_kv_head && k.shape[2] == p.head_dim, op,
        "k has shape ", k.shape.str(), ", expected [n_kv_head = ", p.n_kv_head,
        ", ctx, head_dim = ", p.head_dim, "]");
  check(v.shape == k.shape, op, "v has shape ", v.shape.str(), ", expected ", k.shape.str(),
        " like k");
  check(k.shape[1] > 0, op, "the cache has no positions (ctx = 0)");
  check(q.cols() == p.head_dim && out.cols() == p.head_dim, op,
        "q and out rows must hold head_dim = ", p.head_dim, " values, got ", q.cols(), " and ",
        out.cols());
  check(!out.range().overlaps(q.range()) && !out.range().overlaps(k.range()) &&
            !out.range().overlaps(v.range()),
        op, "out overlaps q, k or v");
  return k.shape[1];
}

}  // namespace

void GraphSession::sdpa(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& positions, const TensorView& out,
                        const ops::AttentionParams& params) {
  const char* op = "sdpa";
  const int64_t ctx = check_attention(op, q, k, v, out, params);
  check(q.shape.ndim() == 3 && q.shape[1] == params.n_head, op, "q has shape ", q.shape.str(),
        ", expected [tokens, n_head = ", params.n_head, ", head_dim = ", params.head_dim, "]");
  check(out.shape == q.shape, op, "out has shape ", out.shape.str(), ", expected ", q.shape.str(),
        " like q");
  const int64_t tokens = q.shape[0];
  require_data(positions, op, "positions");
  require_dtype(positions, DType::i32, op, "positions");
  check(positions.numel() == tokens && positions.contiguous(), op, "positions has shape ",
        positions.shape.str(), ", expected ", tokens, " contiguous values (one per token)");
  check(tokens <= 65535, op, tokens, " tokens, at most 65535 per call (grid.y)");
  ops::SdpaArgs args{};
  args.q = static_cast<const float*>(q.data());
  args.k = k.data();
  args.v = v.data();
  args.positions = static_cast<const int32_t*>(positions.data());
  args.out = static_cast<float*>(out.data());
  args.tokens = tokens;
  args.n_head = params.n_head;
  args.n_kv_head = params.n_kv_head;
  args.head_dim = params.head_dim;
  args.ctx = ctx;
  args.q_stride = element_stride(q, op, "q");
  args.k_stride = element_stride(k, op, "k");
  args.v_stride = element_stride(v, op, "v");
  args.out_stride = element_stride(out, op, "out");
  args.scale = params.scale;
  // CPU: one block per (kv head, token) covering the query heads of the group, so each
  // K/V row is converted once per group. CUDA: one block per (query head, token), or, for
  // f16 caches with 16-byte aligned rows of 64 or 128 values, the tensor-core kernel: one
  // block per (64 tokens, query head).
  LaunchDims dims;
  const bool tensor_cores = !on_cpu(backend()) && k.dtype == DType::f16 && v.dtype == DType::f16 &&
                            (params.head_dim == 64 || params.head_dim == 128) && args.k_stride % 8 == 0 &&
                            args.v_stride % 8 == 0 && k.view.address() % 16 == 0 && v.view.address() % 16 == 0;
  const Kernel& kernel = backend().registry().get(
      tensor_cores ? cat("sdpa_tc_f16_hd", params.head_dim) : kernel_name(op, k.dtype));
  if (tensor_cores) {
    dims.grid.x = static_cast<uint32_t>(std::max<int64_t>(1, (tokens + ops::kCudaSdpaTcTokens - 1) / ops::kCudaSdpaTcTokens));
    dims.grid.y = static_cast<uint32_t>(params.n_head);
    dims.block.x = 128;
    dims.shared_bytes = kernel.max_shared_bytes;
  } else {
    dims.grid.x = static_cast<uint32_t>(on_cpu(backend()) ? params.n_kv_head : params.n_head);
    dims.grid.y = static_cast<uint32_t>(std::max<int64_t>(tokens, 1));
    if (!on_cpu(backend())) dims.block.x = kCudaAttentionThreads;
  }
  Dispatch d(kernel, dims, args, OpKind::attention, op);
  d.read(q).read(k).read(v).read(positions).write(out);
  dispatch(std::move(d));
}

void GraphSession::flash_decode(const TensorView& q, const TensorView& k, const TensorView& v,
                                const TensorView& kv_length, const TensorView& out,
                                const BufferView& scratch, const ops::AttentionParams& params,
                                const BufferView& prefetch_l2, ops::KvHistory history) {
  const char* op = "flash_decode";
  const int64_t ctx = check_attention(op, q, k, v, out, params);
  check(q.rows() == params.n_head, op, "q has shape ", q.shape.str(),
        ", expected [n_head = ", params.n_head, ", head_dim = ", params.head_dim, "] (one token)");
  check(out.shape == q.shape, op, "out has shape ", out.shape.str(), ", expected ", q.shape.str(),
        " like q");
  require_data(kv_length, op, "kv_length");
  require_dtype(kv_length, DType::i32, op, "kv_length");
  check(kv_length.numel() == 1, op, "kv_length has shape ", kv_length.shape.str(),
        ", expected one value");
  const int64_t chunks = ops::flash_decode_chunks(params.n_head, ctx);
  const size_t need = ops::flash_decode_scratch_bytes(params.n_head, ctx, params.head_dim);
  check(static_cast<bool>(scratch), op, "scratch has no buffer");
  check(scratch.size() >= need, op, "scratch has ", scratch.size(), " bytes, expected at least ",
        need, " (flash_decode_scratch_bytes(", params.n_head, ", ", ctx, ", ", params.head_dim,
        "))");
  check(scratch.address() % alignof(float) == 0, op, "scratch is not 4-byte aligned");
  const BufferView partials = scratch.slice(0, need);
  check(!partials.range().overlaps(out.range()) && !partials.range().overlaps(q.range()) &&
            !partials.range().overlaps(k.range()) && !partials.range().overlaps(v.range()),
        op, "scratch overlaps q, k, v or out");
  check(params.n_head <= 65535, op, "n_head ", params.n_head, " is more than 65535 (grid.y)");
  check(!prefetch_l2 || prefetch_l2.address() % 16 == 0, op, "prefetch_l2 is not 16-byte aligned");
  ops::FlashDecodeArgs args{};
  args.q = static_cast<const float*>(q.data());
  args.k = k.data();
  args.v = v.data();
  args.kv_length = static_cast<const int32_t*>(kv_length.data());
  args.out = static_cast<float*>(out.data());
  args.scratch = static_cast<float*>(partials.data());
  args.n_head = params.n_head;
  args.n_kv_head = params.n_kv_head;
  args.head_dim = params.head_dim;
  args.ctx = ctx;
  args.chunks = chunks;
  args.q_stride = element_stride(q, op, "q");
  args.k_stride = element_stride(k, op, "k");
  args.v_stride = element_stride(v, op, "v");
  args.out_stride = element_stride(out, op, "out");
  args.scale = params.scale;

  if (!on_cpu(backend())) {
    // One cluster of chunk blocks per query head; the partials never leave the cluster.
    args.chunks = ops::flash_decode_backend_chunks(true, params.n_head, ctx);
    args.chunk_keys = ops::kCudaFlashDecodeChunkKeys;
    args.history_before_wait = history == ops::KvHistory::before_wait ? 1 : 0;
    LaunchDims dims;
    dims.grid.x = static_cast<uint32_t>(args.chunks);
    dims.grid.y = static_cast<uint32_t>(params.n_head);
    dims.block.x = kCudaAttentionThreads;
    dims.shared_bytes = ops::flash_decode_cluster_shared_bytes(args.chunks, params.head_dim);
    const Kernel& kernel = backend().registry().get(kernel_name("flash_decode_cluster", k.dtype));
    if (prefetch_l2.size() >= 16) {
      args.prefetch = prefetch_l2.data();
      args.prefetch_bytes = static_cast<int64_t>(prefetch_l2.size() / 16 * 16);  // whole 16-byte pieces
    }
    Dispatch d(kernel, dims, args, OpKind::attention, "flash_decode");
    d.read(q).read(k).read(v).read_early(kv_length).write(out);
    if (args.prefetch != nullptr) d.read_early(prefetch_l2);
    dispatch(std::move(d));
    return;
  }

  // CPU: one block per (chunk, kv head) covering the group's query heads.
  LaunchDims partial_dims;
  partial_dims.grid.x = static_cast<uint32_t>(chunks);
  partial_dims.grid.y = static_cast<uint32_t>(params.n_kv_head);
  const Kernel& partial_kernel = backend().registry().get(kernel_name(op, k.dtype));
  Dispatch partial(partial_kernel, partial_dims, args, OpKind::attention, "flash_decode");
  partial.read(q).read(k).read(v).read(kv_length).write(partials);
  dispatch(std::move(partial));

  // The merge reads the partials: barrier inference orders it (read-after-write on
  // scratch); without auto barriers the op still owes its own internal barrier.
  if (!backend().options().auto_barrier) barrier();
  const Kernel& merge_kernel = backend().registry().get("flash_decode_merge");
  Dispatch merge(merge_kernel, row_dims(backend(), params.n_head, params.head_dim), args, OpKind::attention,
                 "flash_decode_merge");
  merge.read(partials).write(out);
  dispatch(std::move(merge));
}

}  // namespace onepass
