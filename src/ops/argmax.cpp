// GraphSession::argmax.
#include "onepass/ops/argmax.h"

#include "onepass/exec/graph_session.h"
#include "onepass/ops/fusion_rules.h"
#include "op_common.h"

namespace onepass {

void GraphSession::argmax(const TensorView& x, const TensorView& out) {
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
  // Long rows on CUDA (a vocabulary's logits): a cluster of blocks per row.
  const std::string cluster = cat("argmax_cluster_", dtype_name(x.dtype));
  if (!on_cpu(backend()) && args.cols >= ops::kCudaArgmaxClusterMinCols && args.rows <= 65535 &&
      backend().registry().contains(cluster)) {
    LaunchDims dims;
    dims.grid.x = static_cast<uint32_t>(ops::cuda_argmax_chunks(args.cols));
    dims.grid.y = static_cast<uint32_t>(args.rows);
    dims.block.x = 1024;
    Dispatch d(backend().registry().get(cluster), dims, args, OpKind::argmax, op);
    d.read(x).write(out);
    dispatch(std::move(d));
    return;
  }
  const Kernel& k = backend().registry().get(kernel_name(op, x.dtype));
  Dispatch d(k, row_dims(backend(), args.rows, args.cols), args, OpKind::argmax, op);
  d.read(x).write(out);
  dispatch(std::move(d));
}

void GraphSession::feed_token(const TensorView& token, const TensorView& ids, const TensorView& positions,
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
  LaunchDims dims;  // one block; one thread on CUDA
  Dispatch d(backend().registry().get("feed_token"), dims, args, OpKind::argmax, op);
  d.read(token).read(positions).read(kv_length).write(ids).write(positions).write(kv_length);
  if (history.view) d.write(history);
  dispatch(std::move(d));
}

}  // namespace onepass

namespace onepass::ops {
namespace {

// argmax_<T> or argmax_cluster_<T> of one row -> out; feed_token(out, ...)  ==>  the
// argmax kernel's _feed variant, which feeds its result itself (one kernel fewer at the
// end of every greedy decode step, where feed_token waited for the argmax to finish).
std::optional<Dispatch> fuse_argmax_feed(const Dispatch& argmax, const Dispatch& feed, const KernelRegistry& registry) {
  const std::string& name = argmax.kernel->name;
  if (name.rfind("argmax_", 0) != 0 || name.ends_with("_feed") || feed.kernel->name != "feed_token") {
    return std::nullopt;
  }
  const Kernel* fused = registry.find(name + "_feed");
  if (fused == nullptr) return std::nullopt;
  ArgmaxFeedArgs args{argmax.args_as<ArgmaxArgs>(), feed.args_as<FeedTokenArgs>()};
  if (args.argmax.rows != 1 || args.feed.token != args.argmax.out) return std::nullopt;
  return Dispatch(*fused, argmax.dims, args, OpKind::argmax);
}

}  // namespace

void register_argmax_fusion_rules(FusionRules& rules) {
  // The argmax's output stays written (the host reads it after decode_greedy).
  rules.add({"argmax+feed_token", OpKind::argmax, OpKind::argmax, fuse_argmax_feed, /*keeps_intermediate=*/true});
}

}  // namespace onepass::ops
