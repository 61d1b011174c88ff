// matmul_affine: MLX affine quantized out = x · wᵀ.
#include "onepass/ops/affine.h"

#include "onepass/exec/graph_session.h"
#include "onepass/ops/matmul.h"
#include "onepass/ops/quant.h"
#include "op_common.h"

namespace onepass {

void ops::matmul_affine(GraphSession& s, const TensorView& x, const TensorView& w, const TensorView& scales,
                                 const TensorView& biases, const TensorView& out,
                                 const AffineFormat& format) {
  using namespace ops::detail;
  const char* op = "matmul_affine";
  format.validate(op);
  require_data(x, op, "x");
  require_data(w, op, "w");
  require_data(scales, op, "scales");
  require_data(biases, op, "biases");
  require_data(out, op, "out");
  require_dtype(x, DType::f32, op, "x");
  require_dtype(out, DType::f32, op, "out");
  require_dtype(w, DType::u32, op, "w (packed)");
  check(scales.dtype == format.scale_type && biases.dtype == format.scale_type, op,
        "scales and biases must be ", dtype_name(format.scale_type), " as the format says, got ",
        dtype_name(scales.dtype), " and ", dtype_name(biases.dtype));
  const int64_t n = w.rows();
  const int64_t k = w.cols() * format.values_per_word();
  const int64_t m = x.rows();
  const int64_t groups = k / format.group_size;
  check(k > 0 && k % format.group_size == 0, op, "w ", w.shape.str(), " holds rows of ", k,
        " values, expected a positive multiple of the group size ", format.group_size);
  check(x.cols() == k, op, "x ", x.shape.str(), " has ", x.cols(), " columns, expected K = ", k,
        " (w ", w.shape.str(), " packs ", format.values_per_word(), " values per word)");
  check(scales.rows() == n && scales.cols() == groups, op, "scales have shape ", scales.shape.str(),
        ", expected [", n, ", ", groups, "]");
  check(biases.rows() == n && biases.cols() == groups, op, "biases have shape ", biases.shape.str(),
        ", expected [", n, ", ", groups, "]");
  check(out.rows() == m && out.cols() == n, op, "out has shape ", out.shape.str(), ", expected [",
        m, ", ", n, "]");
  ops::AffineMatmulArgs args{};
  args.x = static_cast<const float*>(x.data());
  args.w = static_cast<const uint32_t*>(w.data());
  args.scales = scales.data();
  args.biases = biases.data();
  args.out = static_cast<float*>(out.data());
  args.m = m;
  args.n = n;
  args.k = k;
  args.x_stride = element_stride(x, op, "x");
  args.w_stride = element_stride(w, op, "w");
  args.scale_stride = element_stride(scales, op, "scales");
  args.bias_stride = element_stride(biases, op, "biases");
  args.out_stride = element_stride(out, op, "out");
  args.bits = format.bits;
  args.group_size = format.group_size;
  if (m == 0 || n == 0) return;
  Dispatch d = plan_dispatch(s.backend(), {op, format.scale_type, format.scale_type, m, n}, args, OpKind::matmul);
  d.read(x).read(w).read(scales).read(biases).write(out);
  s.dispatch(std::move(d));
}

}  // namespace onepass
