// matmul_id: expert-routed matmul for mixture-of-experts layers.
#include "onepass/ops/matmul_id.h"

#include <algorithm>

#include "onepass/exec/graph_session.h"
#include "onepass/ops/matmul.h"
#include "onepass/ops/quant.h"
#include "op_common.h"

namespace onepass {
namespace ops {

size_t matmul_id_scratch_bytes(int64_t tokens, int64_t slots, int64_t n_experts) {
  check(tokens >= 0 && slots >= 0 && n_experts >= 0, "matmul_id", "negative size (tokens ", tokens,
        ", slots ", slots, ", experts ", n_experts, ")");
  const auto ints = static_cast<size_t>(n_experts + 2 + tokens * slots);
  return (ints * sizeof(int32_t) + 15) / 16 * 16;
}

}  // namespace ops

namespace {

uint32_t grid_extent(int64_t count, int64_t per_block, const char* what) {
  const int64_t b = std::max<int64_t>(1, (count + per_block - 1) / per_block);
  check(b <= 0xffff, "matmul_id", "launch of ", b, " blocks over ", what, " is too large");
  return static_cast<uint32_t>(b);
}

}  // namespace

void ops::matmul_id(GraphSession& s, const TensorView& x, const TensorView& w, const TensorView& ids,
                             const TensorView& out, const BufferView& scratch,
                             const ops::MatmulIdParams& params) {
  using namespace ops::detail;
  const char* op = "matmul_id";
  require_data(x, op, "x");
  require_data(w, op, "w");
  require_data(ids, op, "ids");
  require_data(out, op, "out");
  require_dtype(x, DType::f32, op, "x");
  require_dtype(ids, DType::i32, op, "ids");
  require_dtype(out, DType::f32, op, "out");
  check(is_weight_type(w.dtype), op, "w has type ", dtype_name(w.dtype),
        ", expected one of ", weight_type_names());
  check(params.n_experts > 0 && params.slots > 0, op, "n_experts (", params.n_experts,
        ") and slots (", params.slots, ") must be positive");
  const int64_t experts = params.n_experts;
  const int64_t slots = params.slots;
  check(w.shape.ndim() == 3 && w.shape[0] == experts, op, "w has shape ", w.shape.str(),
        ", expected [", experts, ", N, K]");
  const int64_t n = w.shape[1];
  const int64_t k = w.shape[2];
  check(k > 0 && n > 0, op, "w ", w.shape.str(), " is empty");
  check(ids.cols() == slots, op, "ids have shape ", ids.shape.str(), ", expected [T, ", slots, "]");
  const int64_t tokens = ids.rows();
  if (params.per_slot_input) {
    check(x.rows() == tokens * slots && x.cols() == k, op, "x has shape ", x.shape.str(),
          ", expected [", tokens, ", ", slots, ", ", k, "] (one input per slot)");
  } else {
    check(x.rows() == tokens && x.cols() == k, op, "x has shape ", x.shape.str(), ", expected [",
          tokens, ", ", k, "] (shared by the slots)");
  }
  check(out.rows() == tokens * slots && out.cols() == n, op, "out has shape ", out.shape.str(),
        ", expected [", tokens, ", ", slots, ", ", n, "]");
  if (!dtype_is_quantized(w.dtype)) {
    const size_t elem = dtype_size(w.dtype);
    check(w.row_stride % elem == 0 && w.view.address() % elem == 0, op,
          "w rows must be aligned to its ", elem, "-byte elements");
  }
  ops::MatmulIdArgs args{};
  args.x = static_cast<const float*>(x.data());
  args.w = w.data();
  args.ids = static_cast<const int32_t*>(ids.data());
  args.out = static_cast<float*>(out.data());
  args.tokens = tokens;
  args.slots = slots;
  args.n_experts = experts;
  args.n = n;
  args.k = k;
  const int64_t x_stride = element_stride(x, op, "x");
  args.x_slot_stride = params.per_slot_input ? x_stride : 0;
  args.x_token_stride = params.per_slot_input ? x_stride * slots : x_stride;
  args.w_row_bytes = static_cast<int64_t>(w.row_stride);
  args.w_expert_bytes = args.w_row_bytes * n;
  args.ids_stride = element_stride(ids, op, "ids");
  const int64_t out_stride = element_stride(out, op, "out");
  args.out_slot_stride = out_stride;
  args.out_token_stride = out_stride * slots;
  if (tokens == 0) return;

  // Slots, tokens and experts index launch dimensions of at most 65535.
  grid_extent(slots, 1, "slots");
  grid_extent(tokens, 1, "tokens");
  grid_extent(experts + 1, 1, "experts");
  if (tokens <= ops::kMatmulIdMvMaxTokens) {
    Dispatch d = plan_dispatch(s.backend(), {op, w.dtype, w.dtype, tokens * slots, n}, args, OpKind::matmul_id);
    d.read(x).read(w).read(ids).write(out);
    s.dispatch(std::move(d));
    return;
  }

  const size_t need = ops::matmul_id_scratch_bytes(tokens, slots, experts);
  check(static_cast<bool>(scratch) && scratch.size() >= need, op, "scratch has ", scratch.size(),
        " bytes, expected at least matmul_id_scratch_bytes(", tokens, ", ", slots, ", ", experts,
        ") = ", need);
  check(scratch.address() % 4 == 0, op, "scratch must be 4-byte aligned");
  const BufferView used = scratch.slice(0, need);
  args.scratch = static_cast<int32_t*>(used.data());

  // Two steps: the (token, slot) pairs grouped by expert, then each expert's product.
  Dispatch group = plan_dispatch(s.backend(), {"matmul_id_group", DType::i32, DType::i32, tokens, slots}, args,
                                 OpKind::matmul_id);
  group.read(ids).write(used);
  s.dispatch(std::move(group));
  Dispatch d = plan_dispatch(s.backend(), {"matmul_id_grouped", w.dtype, w.dtype, tokens * slots, n}, args,
                             OpKind::matmul_id);
  d.read(x).read(w).read(ids).read(used).write(out);
  s.dispatch(std::move(d));
}

}  // namespace onepass
