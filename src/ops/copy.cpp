// copy (with conversion between f32, f16 and bf16).
#include "onepass/ops/copy.h"

#include "onepass/exec/graph_session.h"
#include "op_common.h"

#include <algorithm>

namespace onepass {

void ops::copy(GraphSession& s, const TensorView& src, const TensorView& dst) {
  using namespace ops::detail;
  const char* op = "copy";
  require_data(src, op, "src");
  require_data(dst, op, "dst");
  require_float(src, op, "src");
  require_float(dst, op, "dst");
  check(src.numel() == dst.numel(), op, "src has ", src.numel(), " elements, dst ", dst.numel());
  // Same element count but another row split: only contiguous tensors can be re-viewed.
  TensorView from = src;
  TensorView to = dst;
  if (src.cols() != dst.cols() || src.rows() != dst.rows()) {
    check(src.contiguous() && dst.contiguous(), op, "shapes ", src.shape.str(), " and ",
          dst.shape.str(), " differ and are not both contiguous");
    from = src.reshaped(Shape{1, src.numel()});
    to = dst.reshaped(Shape{1, dst.numel()});
  }
  ops::CopyArgs args{};
  args.src = from.data();
  args.dst = to.data();
  args.rows = from.rows();
  args.cols = from.cols();
  args.src_stride = element_stride(from, op, "src");
  args.dst_stride = element_stride(to, op, "dst");
  Dispatch dispatch_node =
      plan_dispatch(s.backend(), {op, src.dtype, dst.dtype, args.rows, args.cols}, args, OpKind::copy);
  dispatch_node.read(src).write(dst);
  s.dispatch(std::move(dispatch_node));
}

}  // namespace onepass

namespace onepass {

void ops::copy_bytes(GraphSession& s, const BufferView& src, const BufferView& dst) {
  const char* op = "copy_bytes";
  check(static_cast<bool>(src) && static_cast<bool>(dst), op, "empty view");
  check(src.size() == dst.size(), op, "src has ", src.size(), " bytes, dst ", dst.size());
  check(!src.range().overlaps(dst.range()), op, "src and dst overlap");
  ops::CopyBytesArgs args{src.data(), dst.data(), src.size()};
  Dispatch d = ops::detail::plan_dispatch(s.backend(), {op, DType::u8, DType::u8, 1, static_cast<int64_t>(src.size())},
                                          args, OpKind::copy);
  d.read(src).write(dst);
  s.dispatch(std::move(d));
}

}  // namespace onepass
