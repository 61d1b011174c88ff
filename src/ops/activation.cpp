// gelu / silu / silu_mul / gelu_mul / softcap.
#include "onepass/ops/activation.h"

#include <cmath>

#include "onepass/exec/graph_session.h"
#include "op_common.h"

namespace onepass {
namespace {

using namespace ops::detail;

void unary(GraphSession& s, const char* op, const TensorView& x, const TensorView& out, float cap) {
  require_data(x, op, "x");
  require_data(out, op, "out");
  require_float(x, op, "x");
  require_same_dtype(x, out, op, "x", "out");
  require_same_shape(x, out, op, "x", "out");
  ops::ActivationArgs args{};
  args.x = x.data();
  args.out = out.data();
  args.rows = x.rows();
  args.cols = x.cols();
  args.x_stride = element_stride(x, op, "x");
  args.out_stride = element_stride(out, op, "out");
  args.cap = cap;
  Dispatch d = plan_dispatch(s.backend(), {op, x.dtype, x.dtype, args.rows, args.cols}, args, OpKind::activation);
  d.read(x).write(out);
  s.dispatch(std::move(d));
}

}  // namespace

void ops::gelu(GraphSession& s, const TensorView& x, const TensorView& out) {
  unary(s, "gelu", x, out, 0.0f);
}

void ops::silu(GraphSession& s, const TensorView& x, const TensorView& out) {
  unary(s, "silu", x, out, 0.0f);
}

void ops::softcap(GraphSession& s, const TensorView& x, float cap, const TensorView& out) {
  check(std::isfinite(cap) && cap > 0.0f, "softcap", "cap must be finite and > 0, got ", cap);
  unary(s, "softcap", x, out, cap);
}

namespace {

void gated_mul(GraphSession& s, const char* op, const TensorView& a, const TensorView& b, const TensorView& out) {
  require_data(a, op, "a");
  require_data(b, op, "b");
  require_data(out, op, "out");
  require_float(a, op, "a");
  require_same_dtype(a, b, op, "a", "b");
  require_same_dtype(a, out, op, "a", "out");
  require_same_shape(a, b, op, "a", "b");
  require_same_shape(a, out, op, "a", "out");
  ops::SiluMulArgs args{};
  args.a = a.data();
  args.b = b.data();
  args.out = out.data();
  args.rows = a.rows();
  args.cols = a.cols();
  args.a_stride = element_stride(a, op, "a");
  args.b_stride = element_stride(b, op, "b");
  args.out_stride = element_stride(out, op, "out");
  Dispatch d = plan_dispatch(s.backend(), {op, a.dtype, a.dtype, args.rows, args.cols}, args, OpKind::activation);
  d.read(a).read(b).write(out);
  s.dispatch(std::move(d));
}

}  // namespace

void ops::silu_mul(GraphSession& s, const TensorView& a, const TensorView& b, const TensorView& out) {
  gated_mul(s, "silu_mul", a, b, out);
}

void ops::gelu_mul(GraphSession& s, const TensorView& a, const TensorView& b, const TensorView& out) {
  gated_mul(s, "gelu_mul", a, b, out);
}

}  // namespace onepass
