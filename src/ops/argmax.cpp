// argmax, feed_token, and the argmax -> feed_token fusion rule.
#include "onepass/ops/argmax.h"

#include "onepass/exec/graph_session.h"
#include "onepass/ops/fusion_rules.h"
#include "op_common.h"

namespace onepass {

void ops::argmax(GraphSession& s, const TensorView& x, const TensorView& out) {
  using namespace ops::detail;
  const char* op = "argmax";
  require_data(x, op, "x");
  require_data(out, op, "out");
  require_float(x, op, "x");
  require_dtype(out, DType::i32, op, "out");
  check(x.cols() > 0, op, "x has no columns");
  check(out.numel() == x.rows() && out.contiguous(), op, "out has shape ", out.shape.str(),
        ", expected ", x.rows(), " contiguous values (one per row of x ", x.shape.str(), ")");
  check(x.cols() <= 0x7fffffff, op, "x has ", x.cols(), " columns, more than an i32 index holds");
  ops::ArgmaxArgs args{};
  args.x = x.data();
  args.out = static_cast<int32_t*>(out.data());
  args.rows = x.rows();
  args.cols = x.cols();
  args.x_stride = element_stride(x, op, "x");
  Dispatch d = plan_dispatch(s.backend(), {op, x.dtype, x.dtype, args.rows, args.cols}, args, OpKind::argmax);
  d.read(x).write(out);
  s.dispatch(std::move(d));
}

void ops::feed_token(GraphSession& s, const TensorView& token, const TensorView& ids, const TensorView& positions,
                              const TensorView& kv_length, const TensorView& history) {
  using namespace ops::detail;
  const char* op = "feed_token";
  const std::pair<const TensorView*, const char*> one_value[] = {
      {&token, "token"}, {&ids, "ids"}, {&positions, "positions"}, {&kv_length, "kv_length"}};
  for (const auto& [t, name] : one_value) {
    require_data(*t, op, name);
    require_dtype(*t, DType::i32, op, name);
    check(t->numel() >= 1, op, name, " is empty");
  }
  ops::FeedTokenArgs args{};
  args.token = static_cast<const int32_t*>(token.data());
  args.ids = static_cast<int32_t*>(ids.data());
  args.positions = static_cast<int32_t*>(positions.data());
  args.kv_length = static_cast<int32_t*>(kv_length.data());
  if (history.view) {
    require_dtype(history, DType::i32, op, "history");
    check(history.contiguous(), op, "history must be contiguous");
    args.history = static_cast<int32_t*>(history.data());
    args.history_size = history.numel();
  }
  Dispatch d = plan_dispatch(s.backend(), {op, DType::i32, DType::i32, 1, 1}, args, OpKind::argmax);
  d.read(token).read(positions).read(kv_length).write(ids).write(positions).write(kv_length);
  if (history.view) d.write(history);
  s.dispatch(std::move(d));
}

}  // namespace onepass

namespace onepass::ops {
namespace {

// argmax of one row -> out; feed_token(out, ...)  ==>  argmax_feed, which feeds its result
// itself (one dispatch fewer at the end of every greedy decode step).
std::optional<Dispatch> fuse_argmax_feed(const Dispatch& argmax, const Dispatch& feed, const Backend& backend) {
  if (argmax.op != "argmax" || feed.op != "feed_token") return std::nullopt;
  ArgmaxFeedArgs args{argmax.args_as<ArgmaxArgs>(), feed.args_as<FeedTokenArgs>()};
  if (args.argmax.rows != 1 || args.feed.token != args.argmax.out) return std::nullopt;
  return detail::plan_fused(backend, {"argmax_feed", argmax.type, argmax.type, 1, args.argmax.cols}, args,
                            OpKind::argmax);
}

}  // namespace

void register_argmax_fusion_rules(FusionRules& rules) {
  // The argmax's output stays written (the host reads it after decode_greedy).
  rules.add({"argmax+feed_token", OpKind::argmax, OpKind::argmax, fuse_argmax_feed, /*keeps_intermediate=*/true});
}

}  // namespace onepass::ops
