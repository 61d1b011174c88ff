// kv_write.
#include "onepass/ops/kv_cache.h"

#include <algorithm>

#include "onepass/exec/graph_session.h"
#include "op_common.h"

namespace onepass {

void ops::kv_write(GraphSession& s, const TensorView& src, const TensorView& cache,
                            const TensorView& positions) {
  using namespace ops::detail;
  const char* op = "kv_write";
  require_data(src, op, "src");
  require_data(cache, op, "cache");
  require_data(positions, op, "positions");
  require_float(src, op, "src");
  require_float(cache, op, "cache");
  check(src.shape.ndim() == 3, op, "src has shape ", src.shape.str(),
        ", expected [tokens, n_kv_head, head_dim]");
  check(cache.shape.ndim() == 3, op, "cache has shape ", cache.shape.str(),
        ", expected [n_kv_head, ctx, head_dim]");
  const int64_t tokens = src.shape[0];
  const int64_t n_kv_head = src.shape[1];
  const int64_t head_dim = src.shape[2];
  check(cache.shape[0] == n_kv_head && cache.shape[2] == head_dim, op, "cache has shape ",
        cache.shape.str(), ", expected [", n_kv_head, ", ctx, ", head_dim, "] to match src ",
        src.shape.str());
  require_dtype(positions, DType::i32, op, "positions");
  check(positions.numel() == tokens && positions.contiguous(), op, "positions has shape ",
        positions.shape.str(), ", expected ", tokens, " contiguous values (one per token)");
  check(!src.range().overlaps(cache.range()), op, "src overlaps cache");
  ops::KvWriteArgs args{};
  args.src = src.data();
  args.cache = cache.data();
  args.positions = static_cast<const int32_t*>(positions.data());
  args.tokens = tokens;
  args.n_kv_head = n_kv_head;
  args.head_dim = head_dim;
  args.ctx = cache.shape[1];
  args.src_stride = element_stride(src, op, "src");
  args.cache_stride = element_stride(cache, op, "cache");
  Dispatch d =
      plan_dispatch(s.backend(), {op, src.dtype, cache.dtype, tokens * n_kv_head, head_dim}, args, OpKind::kv_write);
  d.moved_bytes = src.span_bytes() + positions.span_bytes() +
                  static_cast<uint64_t>(tokens * n_kv_head) * dtype_bytes(cache.dtype, head_dim);
  // Which rows change depends on device data, so the whole cache counts as written.
  d.read(src).read(positions).write(cache);
  s.dispatch(std::move(d));
}

}  // namespace onepass
