// GraphSession::copy (with conversion between f32, f16 and bf16).
#include "onepass/ops/copy.h"

#include "onepass/exec/graph_session.h"
#include "op_common.h"

#include <algorithm>

namespace onepass {

void GraphSession::copy(const TensorView& src, const TensorView& dst) {
  using namespace ops::detail;
  const char* op = "copy";
  require_data(src, op, "src");
  require_data(dst, op, "dst");
  require_float(src, op, "src");
  require_float(dst, op, "dst");
  check(src.numel() == dst.numel(), op, "src has ", src.numel(), " elements, dst ", dst.numel());
  // Same element count but another row split: only contiguous tensors can be re-viewed.
  TensorView s = src;
  TensorView d = dst;
  if (src.cols() != dst.cols() || src.rows() != dst.rows()) {
    check(src.contiguous() && dst.contiguous(), op, "shapes ", src.shape.str(), " and ",
          dst.shape.str(), " differ and are not both contiguous");
    s = src.reshaped(Shape{1, src.numel()});
    d = dst.reshaped(Shape{1, dst.numel()});
  }
  ops::CopyArgs args{};
  args.src = s.data();
  args.dst = d.data();
  args.rows = s.rows();
  args.cols = s.cols();
  args.src_stride = element_stride(s, op, "src");
  args.dst_stride = element_stride(d, op, "dst");
  const std::string name = cat("copy_", dtype_name(src.dtype), "_", dtype_name(dst.dtype));
  const Kernel& k = backend().registry().get(name);
  Dispatch dispatch_node(k, elementwise_dims(backend(), args.rows * args.cols), args, OpKind::copy, op);
  dispatch_node.read(src).write(dst);
  dispatch(std::move(dispatch_node));
}

}  // namespace onepass

namespace onepass {

void GraphSession::copy_bytes(const BufferView& src, const BufferView& dst) {
  const char* op = "copy_bytes";
  check(static_cast<bool>(src) && static_cast<bool>(dst), op, "empty view");
  check(src.size() == dst.size(), op, "src has ", src.size(), " bytes, dst ", dst.size());
  check(!src.range().overlaps(dst.range()), op, "src and dst overlap");
  ops::CopyBytesArgs args{src.data(), dst.data(), src.size()};
  LaunchDims dims;
  if (ops::detail::on_cpu(backend())) {
    dims.grid.x = static_cast<uint32_t>(std::max<uint64_t>(1, (src.size() + ops::kCpuCopyBytesBlock - 1) /
                                                                   ops::kCpuCopyBytesBlock));
  } else {
    dims.block.x = 256;
    dims.grid.x = static_cast<uint32_t>(std::clamp<uint64_t>((src.size() / 16 + 255) / 256, 1, 4096));
  }
  Dispatch d(backend().registry().get("copy_bytes"), dims, args, OpKind::copy, op);
  d.read(src).write(dst);
  dispatch(std::move(d));
}

}  // namespace onepass
