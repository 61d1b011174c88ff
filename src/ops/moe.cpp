// moe_route and moe_combine: validation, the kernel request, reads and writes.
#include "onepass/ops/moe.h"

#include "op_common.h"

namespace onepass {

void ops::moe_route(GraphSession& s, const TensorView& logits, const TensorView& ids, const TensorView& weights,
                    MoeWeighting weighting) {
  using namespace ops::detail;
  const char* op = "moe_route";
  require_data(logits, op, "logits");
  require_data(ids, op, "ids");
  require_data(weights, op, "weights");
  require_dtype(logits, DType::f32, op, "logits");
  require_dtype(ids, DType::i32, op, "ids");
  require_dtype(weights, DType::f32, op, "weights");
  const int64_t tokens = logits.rows();
  const int64_t experts = logits.cols();
  check(experts >= 1 && experts <= kMoeMaxExperts, op, "logits has ", experts, " experts per token, expected 1..",
        kMoeMaxExperts);
  const int64_t slots = ids.cols();
  check(slots >= 1 && slots <= experts && slots <= kMoeMaxSlots, op, "ids has ", slots,
        " slots per token, expected 1..", std::min(experts, kMoeMaxSlots), " (the experts a token uses)");
  check(ids.rows() == tokens && ids.contiguous(), op, "ids has shape ", ids.shape.str(), ", expected [", tokens,
        ", ", slots, "] contiguous (logits ", logits.shape.str(), ")");
  check(weights.shape == ids.shape && weights.contiguous(), op, "weights has shape ", weights.shape.str(),
        ", expected ", ids.shape.str(), " contiguous (as ids)");
  MoeRouteArgs args{};
  args.logits = static_cast<const float*>(logits.data());
  args.ids = static_cast<int32_t*>(ids.data());
  args.weights = static_cast<float*>(weights.data());
  args.tokens = tokens;
  args.n_experts = experts;
  args.slots = slots;
  args.logits_stride = element_stride(logits, op, "logits");
  args.weighting = weighting;
  Dispatch d = plan_dispatch(s.backend(), {op, DType::f32, DType::f32, tokens, experts}, args, OpKind::moe_gate);
  d.read(logits).write(ids).write(weights);
  s.dispatch(std::move(d));
}

void ops::moe_combine(GraphSession& s, const TensorView& y, const TensorView& weights, const TensorView& out) {
  using namespace ops::detail;
  const char* op = "moe_combine";
  require_data(y, op, "y");
  require_data(weights, op, "weights");
  require_data(out, op, "out");
  require_dtype(y, DType::f32, op, "y");
  require_dtype(weights, DType::f32, op, "weights");
  require_dtype(out, DType::f32, op, "out");
  check(weights.contiguous(), op, "weights must be contiguous");
  const int64_t tokens = weights.rows();
  const int64_t slots = weights.cols();
  const int64_t n = out.cols();
  check(y.contiguous() && y.cols() == n && y.rows() == tokens * slots, op, "y has shape ", y.shape.str(),
        ", expected [", tokens, ", ", slots, ", ", n, "] contiguous (weights ", weights.shape.str(), ", out ",
        out.shape.str(), ")");
  check(out.rows() == tokens, op, "out has ", out.rows(), " rows, expected ", tokens, " (one per token)");
  MoeCombineArgs args{};
  args.y = static_cast<const float*>(y.data());
  args.weights = static_cast<const float*>(weights.data());
  args.out = static_cast<float*>(out.data());
  args.tokens = tokens;
  args.slots = slots;
  args.n = n;
  args.y_token_stride = slots * n;
  args.out_stride = element_stride(out, op, "out");
  Dispatch d = plan_dispatch(s.backend(), {op, DType::f32, DType::f32, tokens, n}, args, OpKind::other);
  d.read(y).read(weights).write(out);
  s.dispatch(std::move(d));
}

}  // namespace onepass
