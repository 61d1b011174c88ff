// sdpa and flash_decode.
#include "onepass/ops/attention.h"

#include <algorithm>
#include <cmath>

#include "onepass/exec/graph_session.h"
#include "op_common.h"

namespace onepass {
namespace {

using namespace ops::detail;

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
  check(p.window >= 0, op, "window must be >= 0 (0: none), got ", p.window);
  check(std::isfinite(p.softcap) && p.softcap >= 0.0f, op, "softcap must be finite and >= 0 (0: none), got ",
        p.softcap);
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

void ops::sdpa(GraphSession& s, const TensorView& q, const TensorView& k, const TensorView& v,
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
  args.window = params.window;
  args.softcap = params.softcap;
  Dispatch d = plan_dispatch(s.backend(), {op, k.dtype, k.dtype, tokens * params.n_head, params.head_dim}, args,
                             OpKind::attention);
  d.read(q).read(k).read(v).read(positions).write(out);
  s.dispatch(std::move(d));
}

void ops::flash_decode(GraphSession& s, const TensorView& q, const TensorView& k, const TensorView& v,
                                const TensorView& kv_length, const TensorView& out,
                                const BufferView& scratch, const ops::AttentionParams& params,
                                const BufferView& prefetch_l2, ops::CacheWrites cache_writes) {
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
  args.window = params.window;
  args.softcap = params.softcap;
  args.token_row_only = cache_writes == ops::CacheWrites::token_row_only ? 1 : 0;
  if (prefetch_l2.size() >= 16) {
    args.prefetch = prefetch_l2.data();
    args.prefetch_bytes = static_cast<int64_t>(prefetch_l2.size() / 16 * 16);  // whole 16-byte pieces
  }
  KernelChoice choice;
  Dispatch partial = plan_dispatch(s.backend(), {op, k.dtype, k.dtype, params.n_head, params.head_dim}, args,
                                   OpKind::attention, &choice);
  partial.read(q).read(k).read(v);
  read_operand(partial, choice, ops::kFlashDecodeKvLength, kv_length);
  if ((choice.early_operands & ops::kFlashDecodePrefetch) != 0) partial.read_early(prefetch_l2);
  if (!choice.needs_merge) {
    partial.write(out);
    s.dispatch(std::move(partial));
    return;
  }
  partial.write(partials);
  s.dispatch(std::move(partial));

  // The merge reads the partials: barrier inference orders it (read-after-write on
  // scratch); without auto barriers the op still owes its own internal barrier.
  if (!s.backend().options().auto_barrier) s.barrier();
  Dispatch merge = plan_dispatch(s.backend(), {"flash_decode_merge", k.dtype, k.dtype, params.n_head, params.head_dim},
                                 args, OpKind::attention);
  merge.read(partials).write(out);
  s.dispatch(std::move(merge));
}

}  // namespace onepass
