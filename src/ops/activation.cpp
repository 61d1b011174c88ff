// GraphSession::gelu / silu / silu_mul / softcap.
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
  const Kernel& k = s.backend().registry().get(kernel_name(op, x.dtype));
  Dispatch d(k, elementwise_dims(s.backend(), args.rows * args.cols), args, OpKind::activation, op);
  d.read(x).write(out);
  s.dispatch(std::move(d));
}

}  // namespace

void GraphSession::gelu(const TensorView& x, const TensorView& out) {
  unary(*this, "gelu", x, out, 0.0f);
}

void GraphSession::silu(const TensorView& x, const TensorView& out) {
  unary(*this, "silu", x, out, 0.0f);
}

void GraphSession::softcap(const TensorView& x, float cap, const TensorView& out) {
  check(std::isfinite(cap) && cap > 0.0f, "softcap", "cap must be finite and > 0, got ", cap);
  unary(*this, "softcap", x, out, cap);
}

void GraphSession::silu_mul(const TensorView& a, const TensorView& b, const TensorView& out) {
  const char* op = "silu_mul";
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
  const Kernel& k = backend().registry().get(kernel_name(op, a.dtype));
  Dispatch d(k, elementwise_dims(backend(), args.rows * args.cols), args, OpKind::activation, op);
  d.read(a).read(b).write(out);
  dispatch(std::move(d));
}

}  // namespace onepass
