// matmul: dense and GGML block-quantized out = x · wᵀ.
#include "onepass/ops/matmul.h"

#include "onepass/exec/graph_session.h"
#include "onepass/ops/quant.h"
#include "op_common.h"

namespace onepass {

void ops::matmul(GraphSession& s, const TensorView& x, const TensorView& w, const TensorView& out) {
  using namespace ops::detail;
  const char* op = "matmul";
  require_data(x, op, "x");
  require_data(w, op, "w");
  require_data(out, op, "out");
  require_dtype(x, DType::f32, op, "x");
  require_dtype(out, DType::f32, op, "out");
  check(is_weight_type(w.dtype), op, "w has type ", dtype_name(w.dtype),
        ", expected one of ", weight_type_names());
  const int64_t k = w.cols();
  const int64_t n = w.rows();
  const int64_t m = x.rows();
  check(k > 0, op, "w ", w.shape.str(), " has no columns");
  check(x.cols() == k, op, "x ", x.shape.str(), " has ", x.cols(), " columns, expected K = ", k,
        " to match w ", w.shape.str());
  check(out.rows() == m && out.cols() == n, op, "out has shape ", out.shape.str(), ", expected [",
        m, ", ", n, "] for x ", x.shape.str(), " and w ", w.shape.str());
  if (!dtype_is_quantized(w.dtype)) {
    const size_t elem = dtype_size(w.dtype);
    check(w.row_stride % elem == 0 && w.view.address() % elem == 0, op,
          "w rows must be aligned to its ", elem, "-byte elements");
  }
  ops::MatmulArgs args{};
  args.x = static_cast<const float*>(x.data());
  args.w = w.data();
  args.out = static_cast<float*>(out.data());
  args.m = m;
  args.n = n;
  args.k = k;
  args.x_stride = element_stride(x, op, "x");
  args.w_row_bytes = static_cast<int64_t>(w.row_stride);
  args.out_stride = element_stride(out, op, "out");
  if (m == 0 || n == 0) return;
  KernelChoice choice;
  Dispatch d = plan_dispatch(s.backend(), {op, w.dtype, w.dtype, m, n}, args, OpKind::matmul, &choice);
  d.read(x);
  read_operand(d, choice, ops::kMatmulWeights, w);
  d.write(out);
  s.dispatch(std::move(d));
}

}  // namespace onepass
