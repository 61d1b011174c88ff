// embedding: gather rows of a (possibly quantized) table.
#include "onepass/ops/embedding.h"

#include "onepass/exec/graph_session.h"
#include "onepass/ops/quant.h"
#include "op_common.h"

namespace onepass {

void ops::embedding(GraphSession& s, const TensorView& table, const TensorView& ids,
                             const TensorView& out) {
  using namespace ops::detail;
  const char* op = "embedding";
  require_data(table, op, "table");
  require_data(ids, op, "ids");
  require_data(out, op, "out");
  require_dtype(ids, DType::i32, op, "ids");
  require_float(out, op, "out");
  check(is_weight_type(table.dtype), op, "table has type ", dtype_name(table.dtype),
        ", expected one of ", weight_type_names());
  check(ids.contiguous(), op, "ids must be contiguous");
  const int64_t tokens = ids.numel();
  const int64_t dim = table.cols();
  check(out.rows() == tokens && out.cols() == dim, op, "out has shape ", out.shape.str(),
        ", expected [", tokens, ", ", dim, "] for ", tokens, " ids and table ", table.shape.str());
  ops::EmbeddingArgs args{};
  args.table = table.data();
  args.ids = static_cast<const int32_t*>(ids.data());
  args.out = out.data();
  args.tokens = tokens;
  args.vocab = table.rows();
  args.dim = dim;
  args.table_row_bytes = static_cast<int64_t>(table.row_stride);
  args.out_stride = element_stride(out, op, "out");
  if (tokens == 0 || dim == 0) return;
  check(tokens <= 0x7fffffff, op, tokens, " ids are too many for one launch");
  Dispatch d = plan_dispatch(s.backend(), {op, table.dtype, out.dtype, tokens, dim}, args, OpKind::gather);
  d.moved_bytes = static_cast<uint64_t>(tokens) * (static_cast<uint64_t>(args.table_row_bytes) + 4) + out.span_bytes();
  d.read(table).read(ids).write(out);
  s.dispatch(std::move(d));
}

}  // namespace onepass
