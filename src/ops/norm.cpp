// rms_norm / rms_norm_no_weight / rms_norm_mul / rms_norm_add / add_rms_norm, and the
// RMS-norm -> mul and RMS-norm -> add fusion rules.
#include "onepass/ops/norm.h"
#include "onepass/ops/fusion_rules.h"

#include "onepass/ops/elementwise.h"
#include "onepass/exec/graph_session.h"
#include "op_common.h"

namespace onepass {
namespace {

using namespace ops::detail;

ops::RmsNormArgs norm_args(const char* op, const TensorView& x, const TensorView* weight,
                           const TensorView* scale, const TensorView& out, float eps) {
  require_data(x, op, "x");
  require_data(out, op, "out");
  require_float(x, op, "x");
  require_same_dtype(x, out, op, "x", "out");
  require_same_shape(x, out, op, "x", "out");
  check(x.cols() > 0, op, "x has no columns");
  check(eps >= 0.0f, op, "eps must be >= 0, got ", eps);
  ops::RmsNormArgs args{};
  args.x = x.data();
  args.out = out.data();
  args.rows = x.rows();
  args.cols = x.cols();
  args.x_stride = element_stride(x, op, "x");
  args.out_stride = element_stride(out, op, "out");
  args.eps = eps;
  if (weight != nullptr) {
    require_data(*weight, op, "weight");
    require_dtype(*weight, DType::f32, op, "weight");
    check(weight->numel() == x.cols() && weight->contiguous(), op, "weight has ",
          weight->numel(), " elements, expected ", x.cols());
    args.weight = static_cast<const float*>(weight->data());
  }
  if (scale != nullptr) {
    require_data(*scale, op, "scale");
    require_same_dtype(x, *scale, op, "x", "scale");
    const bool broadcast = scale->rows() == 1 && x.rows() != 1;
    check(scale->cols() == x.cols() && (broadcast || scale->rows() == x.rows()), op,
          "scale has shape ", scale->shape.str(), ", expected ", x.shape.str(), " or one row");
    args.scale = scale->data();
    args.scale_stride = element_stride(*scale, op, "scale");
    args.scale_row_step = broadcast ? 0 : 1;
  }
  return args;
}

void emit(GraphSession& s, const char* op, ops::RmsNormArgs& args, DType t, OpKind kind,
          std::initializer_list<const TensorView*> reads, const TensorView& out) {
  Dispatch d = plan_dispatch(s.backend(), {op, t, t, args.rows, args.cols}, args, kind);
  for (const TensorView* r : reads) d.read(*r);
  d.write(out);
  s.dispatch(std::move(d));
}

}  // namespace

void ops::rms_norm(GraphSession& s, const TensorView& x, const TensorView& weight, const TensorView& out,
                            float eps) {
  auto args = norm_args("rms_norm", x, &weight, nullptr, out, eps);
  emit(s, "rms_norm", args, x.dtype, OpKind::norm, {&x, &weight}, out);
}

void ops::rms_norm_no_weight(GraphSession& s, const TensorView& x, const TensorView& out, float eps) {
  auto args = norm_args("rms_norm_no_weight", x, nullptr, nullptr, out, eps);
  emit(s, "rms_norm_no_weight", args, x.dtype, OpKind::norm, {&x}, out);
}

void ops::rms_norm_mul(GraphSession& s, const TensorView& x, const TensorView& weight,
                                const TensorView& scale, const TensorView& out, float eps) {
  auto args = norm_args("rms_norm_mul", x, &weight, &scale, out, eps);
  emit(s, "rms_norm_mul", args, x.dtype, OpKind::norm_mul, {&x, &weight, &scale}, out);
}

void ops::rms_norm_add(GraphSession& s, const TensorView& x, const TensorView& weight, const TensorView& residual,
                       const TensorView& out, float eps) {
  const char* op = "rms_norm_add";
  auto args = norm_args(op, x, &weight, nullptr, out, eps);
  require_data(residual, op, "residual");
  require_same_dtype(x, residual, op, "x", "residual");
  require_same_shape(x, residual, op, "x", "residual");
  // Each row is read whole before any of it is written, and each value of the residual
  // just before its own output: in place works, a shifted overlap does not.
  for (const auto& [t, what] : {std::pair{&x, "x"}, {&residual, "residual"}}) {
    check(!out.range().overlaps(t->range()) ||
              (out.data() == t->data() && element_stride(out, op, "out") == element_stride(*t, op, what)),
          op, "out overlaps ", what, " without being it");
  }
  args.residual = residual.data();
  args.residual_stride = element_stride(residual, op, "residual");
  emit(s, op, args, x.dtype, OpKind::norm, {&x, &weight, &residual}, out);
}

void ops::add_rms_norm(GraphSession& s, const TensorView& a, const TensorView& b, const TensorView& sum,
                                const TensorView& weight, const TensorView& out, float eps) {
  const char* op = "add_rms_norm";
  require_data(a, op, "a");
  require_data(b, op, "b");
  require_data(sum, op, "sum");
  require_data(weight, op, "weight");
  require_data(out, op, "out");
  require_float(a, op, "a");
  require_same_dtype(a, b, op, "a", "b");
  require_same_dtype(a, sum, op, "a", "sum");
  require_same_dtype(a, out, op, "a", "out");
  require_same_shape(a, b, op, "a", "b");
  require_same_shape(a, sum, op, "a", "sum");
  require_same_shape(a, out, op, "a", "out");
  check(a.cols() > 0, op, "a has no columns");
  check(eps >= 0.0f, op, "eps must be >= 0, got ", eps);
  require_dtype(weight, DType::f32, op, "weight");
  check(weight.numel() == a.cols() && weight.contiguous(), op, "weight has ", weight.numel(),
        " elements, expected ", a.cols());
  check(!out.range().overlaps(sum.range()), op, "out overlaps sum");
  ops::AddRmsNormArgs args{};
  args.a = a.data();
  args.b = b.data();
  args.sum = sum.data();
  args.weight = static_cast<const float*>(weight.data());
  args.out = out.data();
  args.rows = a.rows();
  args.cols = a.cols();
  args.a_stride = element_stride(a, op, "a");
  args.b_stride = element_stride(b, op, "b");
  args.sum_stride = element_stride(sum, op, "sum");
  args.out_stride = element_stride(out, op, "out");
  args.eps = eps;
  Dispatch d = plan_dispatch(s.backend(), {op, a.dtype, a.dtype, args.rows, args.cols}, args, OpKind::norm);
  d.read(a).read(b).read(weight).write(sum).write(out);
  s.dispatch(std::move(d));
}

namespace ops {
namespace {

// rms_norm(x, w) -> tmp; mul(tmp, s) -> out   ==>   rms_norm_mul(x, w, s) -> out
std::optional<Dispatch> fuse_norm_mul(const Dispatch& norm, const Dispatch& mul, const Backend& backend) {
  if (norm.op != "rms_norm" || mul.op != "mul" || norm.type != mul.type) return std::nullopt;
  const auto n = norm.args_as<RmsNormArgs>();
  const auto m = mul.args_as<BinaryArgs>();
  // The mul must cover the norm's output exactly, row for row.
  const bool tmp_is_a = m.a == n.out && m.a_stride == n.out_stride;
  const bool tmp_is_b = m.b == n.out && m.b_stride == n.out_stride && m.b_row_step == 1;
  if (m.rows != n.rows || m.cols != n.cols || (!tmp_is_a && !tmp_is_b)) return std::nullopt;
  RmsNormArgs f = n;
  f.scale = tmp_is_a ? m.b : m.a;
  f.scale_stride = tmp_is_a ? m.b_stride : m.a_stride;
  f.scale_row_step = tmp_is_a ? m.b_row_step : 1;
  f.out = m.out;
  f.out_stride = m.out_stride;
  return detail::plan_fused(backend, {"rms_norm_mul", norm.type, norm.type, n.rows, n.cols}, f, OpKind::norm_mul);
}

// rms_norm(x, w) -> tmp; add(tmp, r) or add(r, tmp) -> out   ==>   rms_norm_add(x, w, r) -> out
// (Gemma's post-norms: x += rms_norm(proj) * w).
std::optional<Dispatch> fuse_norm_add(const Dispatch& norm, const Dispatch& add, const Backend& backend) {
  if (norm.op != "rms_norm" || add.op != "add" || norm.type != add.type) return std::nullopt;
  const auto n = norm.args_as<RmsNormArgs>();
  const auto b = add.args_as<BinaryArgs>();
  if (b.rows != n.rows || b.cols != n.cols || b.b_row_step != 1) return std::nullopt;
  const bool tmp_is_a = b.a == n.out && b.a_stride == n.out_stride;
  const bool tmp_is_b = b.b == n.out && b.b_stride == n.out_stride;
  if (tmp_is_a == tmp_is_b) return std::nullopt;  // neither, or add(tmp, tmp)
  RmsNormArgs f = n;
  f.residual = tmp_is_a ? b.b : b.a;
  f.residual_stride = tmp_is_a ? b.b_stride : b.a_stride;
  f.out = b.out;
  f.out_stride = b.out_stride;
  // out never overlaps x here: the fuse pass refuses a consumer writing the producer's inputs.
  return detail::plan_fused(backend, {"rms_norm_add", norm.type, norm.type, n.rows, n.cols}, f, OpKind::norm);
}

}  // namespace

void register_fusion_rules(FusionRules& rules) {
  rules.add({"rms_norm+mul", OpKind::norm, OpKind::mul, fuse_norm_mul});
  rules.add({"rms_norm+add", OpKind::norm, OpKind::add, fuse_norm_add});
  register_matmul_fusion_rules(rules);
  register_argmax_fusion_rules(rules);
}

}  // namespace ops
}  // namespace onepass
