// paged_attention: attention of many query rows, each over its own sequence in a paged KV cache.
#include "onepass/ops/paged_attention.h"

#include <algorithm>
#include <cmath>

#include "onepass/exec/graph_session.h"
#include "op_common.h"

namespace onepass {

using namespace ops::detail;

void ops::paged_attention(GraphSession& s, const TensorView& q, const TensorView& k, const TensorView& v,
                          const TensorView& block_table, const TensorView& lengths, const TensorView& out,
                          int64_t block_size, const AttentionParams& p) {
  const char* op = "paged_attention";
  require_data(q, op, "q");
  require_data(k, op, "k");
  require_data(v, op, "v");
  require_data(block_table, op, "block_table");
  require_data(lengths, op, "lengths");
  require_data(out, op, "out");
  check(p.n_head > 0 && p.n_kv_head > 0 && p.head_dim > 0, op,
        "params need n_head, n_kv_head and head_dim > 0, got ", p.n_head, ", ", p.n_kv_head, ", ", p.head_dim);
  check(p.n_head % p.n_kv_head == 0, op, "n_head (", p.n_head, ") must be a multiple of n_kv_head (", p.n_kv_head,
        ")");
  check(std::isfinite(p.scale) && p.scale > 0.0f, op, "scale must be finite and > 0, got ", p.scale);
  check(p.window >= 0, op, "window must be >= 0 (0: none), got ", p.window);
  check(std::isfinite(p.softcap) && p.softcap >= 0.0f, op, "softcap must be finite and >= 0 (0: none), got ",
        p.softcap);
  // Positions are i32 (lengths), so a block never needs more than 2^31 - 1 of them.
  check(block_size > 0 && block_size <= 0x7fffffff, op, "block_size must be in [1, 2^31), got ", block_size);

  require_dtype(q, DType::f32, op, "q");
  require_dtype(out, DType::f32, op, "out");
  check(q.shape.ndim() == 3 && q.shape[1] == p.n_head && q.shape[2] == p.head_dim, op, "q has shape ",
        q.shape.str(), ", expected [tokens, n_head = ", p.n_head, ", head_dim = ", p.head_dim, "]");
  check(out.shape == q.shape, op, "out has shape ", out.shape.str(), ", expected ", q.shape.str(), " like q");
  const int64_t tokens = q.shape[0];
  check(tokens > 0, op, "q has no tokens");
  check(tokens <= 65535, op, tokens, " tokens, at most 65535 per call (grid.y)");

  require_float(k, op, "k");
  require_same_dtype(k, v, op, "k", "v");
  check(k.shape.ndim() == 3 && k.shape[0] == p.n_kv_head && k.shape[2] == p.head_dim, op, "k has shape ",
        k.shape.str(), ", expected [n_kv_head = ", p.n_kv_head, ", slots, head_dim = ", p.head_dim, "]");
  check(v.shape == k.shape, op, "v has shape ", v.shape.str(), ", expected ", k.shape.str(), " like k");
  const int64_t slots = k.shape[1];
  check(slots > 0 && slots % block_size == 0, op, "the cache has ", slots,
        " slots per head, expected a positive multiple of block_size = ", block_size);

  require_dtype(block_table, DType::i32, op, "block_table");
  check(block_table.shape.ndim() == 2 && block_table.shape[0] == tokens && block_table.shape[1] > 0 &&
            block_table.contiguous(),
        op, "block_table has shape ", block_table.shape.str(), ", expected [tokens = ", tokens,
        ", max_blocks > 0] contiguous");
  const int64_t max_blocks = block_table.shape[1];
  require_dtype(lengths, DType::i32, op, "lengths");
  check(lengths.numel() == tokens && lengths.contiguous(), op, "lengths has shape ", lengths.shape.str(),
        ", expected ", tokens, " contiguous values (one per token)");
  check(!out.range().overlaps(q.range()) && !out.range().overlaps(k.range()) && !out.range().overlaps(v.range()) &&
            !out.range().overlaps(block_table.range()) && !out.range().overlaps(lengths.range()),
        op, "out overlaps q, k, v, block_table or lengths");

  ops::PagedAttentionArgs args{};
  args.q = static_cast<const float*>(q.data());
  args.k = k.data();
  args.v = v.data();
  args.block_table = static_cast<const int32_t*>(block_table.data());
  args.lengths = static_cast<const int32_t*>(lengths.data());
  args.out = static_cast<float*>(out.data());
  args.tokens = tokens;
  args.n_head = p.n_head;
  args.n_kv_head = p.n_kv_head;
  args.head_dim = p.head_dim;
  args.slots = slots;
  args.block_size = block_size;
  args.max_blocks = max_blocks;
  args.q_stride = element_stride(q, op, "q");
  args.k_stride = element_stride(k, op, "k");
  args.v_stride = element_stride(v, op, "v");
  args.out_stride = element_stride(out, op, "out");
  args.scale = p.scale;
  args.window = p.window;
  args.softcap = p.softcap;
  Dispatch d = plan_dispatch(s.backend(), {op, k.dtype, k.dtype, tokens * p.n_head, p.head_dim}, args,
                             OpKind::attention);
  // Which cache rows are read depends on device data (tables and lengths), so the whole
  // cache is declared read. The bytes moved: per (token, kv head) the K and V rows its
  // table row can name (or its window), an upper bound (shorter sequences read fewer).
  const int64_t keys = std::min(slots, max_blocks * block_size);
  const int64_t window_keys = p.window > 0 ? std::min<int64_t>(keys, p.window) : keys;
  d.moved_bytes = q.span_bytes() + out.span_bytes() + block_table.span_bytes() + lengths.span_bytes() +
                  static_cast<uint64_t>(tokens * p.n_kv_head * window_keys) * 2 * dtype_bytes(k.dtype, p.head_dim);
  d.read(q).read(k).read(v).read(block_table).read(lengths).write(out);
  s.dispatch(std::move(d));
}

}  // namespace onepass
