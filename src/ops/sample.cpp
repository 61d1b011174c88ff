// sample: one token per row of logits, each row with its own sampling parameters.
#include "onepass/ops/sample.h"

#include "onepass/exec/graph_session.h"
#include "op_common.h"

namespace onepass {

void ops::sample(GraphSession& s, const TensorView& logits, const TensorView& params, const TensorView& penalties,
                 const TensorView& out) {
  using namespace ops::detail;
  const char* op = "sample";
  require_data(logits, op, "logits");
  require_data(params, op, "params");
  require_data(out, op, "out");
  require_dtype(logits, DType::f32, op, "logits");
  require_dtype(params, DType::u8, op, "params");
  require_dtype(out, DType::i32, op, "out");
  const int64_t rows = logits.rows();
  check(logits.cols() > 0, op, "logits has no columns");
  check(logits.cols() <= 0x7fffffff, op, "logits has ", logits.cols(), " columns, more than an i32 token id holds");
  check(out.numel() == rows && out.contiguous(), op, "out has shape ", out.shape.str(), ", expected ", rows,
        " contiguous values (one per row of logits ", logits.shape.str(), ")");
  check(params.contiguous() && params.numel() == rows * static_cast<int64_t>(sizeof(SampleParams)), op,
        "params has shape ", params.shape.str(), ", expected ", rows, " x ", sizeof(SampleParams),
        " contiguous bytes (one ops::SampleParams per row of logits ", logits.shape.str(), ")");
  check(reinterpret_cast<uintptr_t>(params.data()) % alignof(SampleParams) == 0, op, "params must be ",
        alignof(SampleParams), "-byte aligned");
  ops::SampleArgs args{};
  args.logits = static_cast<const float*>(logits.data());
  args.logits_stride = element_stride(logits, op, "logits");
  args.params = static_cast<const SampleParams*>(params.data());
  args.out = static_cast<int32_t*>(out.data());
  args.rows = rows;
  args.cols = logits.cols();
  if (penalties.view) {
    require_dtype(penalties, DType::i32, op, "penalties");
    check(penalties.rows() == rows && penalties.cols() % 2 == 0 && penalties.contiguous(), op, "penalties has shape ",
          penalties.shape.str(), ", expected ", rows, " contiguous rows of (token, count) pairs");
    args.penalty_stride = penalties.cols() / 2;
    check(args.penalty_stride <= kSampleMaxPenalties, op, "penalties hold ", args.penalty_stride,
          " entries per row, at most ", kSampleMaxPenalties);
    args.penalties = static_cast<const SamplePenalty*>(penalties.data());
  }
  Dispatch d = plan_dispatch(s.backend(), {op, DType::f32, DType::i32, rows, args.cols}, args, OpKind::argmax);
  d.read(logits).read(params).write(out);
  if (penalties.view) d.read(penalties);
  s.dispatch(std::move(d));
}

}  // namespace onepass
