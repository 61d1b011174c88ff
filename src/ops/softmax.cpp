// softmax.
#include "onepass/ops/softmax.h"

#include <algorithm>
#include <cmath>

#include "onepass/exec/graph_session.h"
#include "op_common.h"

namespace onepass {

void ops::softmax(GraphSession& s, const TensorView& x, const TensorView& out,
                           const ops::SoftmaxParams& params) {
  using namespace ops::detail;
  const char* op = "softmax";
  require_data(x, op, "x");
  require_data(out, op, "out");
  require_float(x, op, "x");
  require_same_dtype(x, out, op, "x", "out");
  require_same_shape(x, out, op, "x", "out");
  check(x.cols() > 0, op, "x has no columns");
  check(std::isfinite(params.scale), op, "scale must be finite, got ", params.scale);
  check(params.queries >= 0, op, "queries must be >= 0 (0 = all rows), got ", params.queries);
  const int64_t queries = params.queries == 0 ? std::max<int64_t>(x.rows(), 1) : params.queries;
  check(x.rows() % queries == 0, op, "x has ", x.rows(), " rows, expected a multiple of queries (",
        queries, ")");
  ops::SoftmaxArgs args{};
  args.x = x.data();
  args.out = out.data();
  args.rows = x.rows();
  args.cols = x.cols();
  args.x_stride = element_stride(x, op, "x");
  args.out_stride = element_stride(out, op, "out");
  args.queries = queries;
  args.scale = params.scale;
  args.causal = params.causal ? 1 : 0;
  args.position_offset = params.position_offset;
  Dispatch d = plan_dispatch(s.backend(), {op, x.dtype, x.dtype, args.rows, args.cols}, args, OpKind::softmax);
  d.read(x).write(out);
  s.dispatch(std::move(d));
}

}  // namespace onepass
