// add / mul / scale.
#include "onepass/ops/elementwise.h"

#include "onepass/exec/graph_session.h"
#include "op_common.h"

namespace onepass {
namespace {

void binary(GraphSession& s, const char* op, const TensorView& a, const TensorView& b,
            const TensorView& out) {
  using namespace ops::detail;
  require_data(a, op, "a");
  require_data(b, op, "b");
  require_data(out, op, "out");
  require_float(a, op, "a");
  require_same_dtype(a, b, op, "a", "b");
  require_same_dtype(a, out, op, "a", "out");
  require_same_shape(a, out, op, "a", "out");
  const bool broadcast = b.rows() == 1 && a.rows() != 1;
  check(b.cols() == a.cols() && (broadcast || b.rows() == a.rows()), op, "b has shape ",
        b.shape.str(), ", expected ", a.shape.str(), " or one row of ", a.cols());
  ops::BinaryArgs args{};
  args.a = a.data();
  args.b = b.data();
  args.out = out.data();
  args.rows = a.rows();
  args.cols = a.cols();
  args.a_stride = element_stride(a, op, "a");
  args.b_stride = element_stride(b, op, "b");
  args.out_stride = element_stride(out, op, "out");
  args.b_row_step = broadcast ? 0 : 1;
  const OpKind kind = std::string_view(op) == "add" ? OpKind::add : OpKind::mul;
  Dispatch d = plan_dispatch(s.backend(), {op, a.dtype, a.dtype, args.rows, args.cols}, args, kind);
  d.read(a).read(b).write(out);
  s.dispatch(std::move(d));
}

}  // namespace

void ops::add(GraphSession& s, const TensorView& a, const TensorView& b, const TensorView& out) {
  binary(s, "add", a, b, out);
}

void ops::mul(GraphSession& s, const TensorView& a, const TensorView& b, const TensorView& out) {
  binary(s, "mul", a, b, out);
}

void ops::scale(GraphSession& s, const TensorView& x, float factor, const TensorView& out) {
  using namespace ops::detail;
  const char* op = "scale";
  require_data(x, op, "x");
  require_data(out, op, "out");
  require_float(x, op, "x");
  require_same_dtype(x, out, op, "x", "out");
  require_same_shape(x, out, op, "x", "out");
  ops::ScaleArgs args{};
  args.x = x.data();
  args.out = out.data();
  args.rows = x.rows();
  args.cols = x.cols();
  args.x_stride = element_stride(x, op, "x");
  args.out_stride = element_stride(out, op, "out");
  args.factor = factor;
  Dispatch d = plan_dispatch(s.backend(), {op, x.dtype, x.dtype, args.rows, args.cols}, args, OpKind::scale);
  d.read(x).write(out);
  s.dispatch(std::move(d));
}

}  // namespace onepass
