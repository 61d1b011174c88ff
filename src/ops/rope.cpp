// rope.
#include "onepass/ops/rope.h"

#include <cmath>

#include "onepass/exec/graph_session.h"
#include "op_common.h"

namespace onepass {

void ops::rope(GraphSession& s, const TensorView& x, const TensorView& out, const TensorView& positions,
                        const ops::RopeParams& params) {
  using namespace ops::detail;
  const char* op = "rope";
  require_data(x, op, "x");
  require_data(out, op, "out");
  require_data(positions, op, "positions");
  require_float(x, op, "x");
  require_same_dtype(x, out, op, "x", "out");
  check(x.shape.ndim() == 3, op, "x has shape ", x.shape.str(),
        ", expected [tokens, heads, head_dim]");
  check(out.shape == x.shape, op, "out has shape ", out.shape.str(), ", expected ", x.shape.str(),
        " like x");
  const int64_t tokens = x.shape[0];
  const int64_t heads = x.shape[1];
  const int64_t head_dim = x.shape[2];
  require_dtype(positions, DType::i32, op, "positions");
  check(positions.numel() == tokens && positions.contiguous(), op, "positions has shape ",
        positions.shape.str(), ", expected ", tokens, " contiguous values (one per token)");
  check(params.layout == ops::RopeLayout::normal || params.layout == ops::RopeLayout::neox, op,
        "unknown layout ", static_cast<int>(params.layout));
  const int64_t rotary_dims = params.rotary_dims == 0 ? head_dim : params.rotary_dims;
  check(rotary_dims > 0 && rotary_dims % 2 == 0 && rotary_dims <= head_dim, op, "rotary_dims is ",
        params.rotary_dims, ", expected an even number in [2, head_dim = ", head_dim,
        "] (or 0 for the whole head)");
  check(std::isfinite(params.theta) && params.theta > 0.0f, op,
        "theta must be finite and > 0, got ", params.theta);
  check(std::isfinite(params.freq_scale), op, "freq_scale must be finite, got ", params.freq_scale);
  check(params.cos_sin_use == ops::RopeCosSin::none, op,
        "cos_sin is rope_kv_write's (one token's stored angles); rope computes its own");
  // In place is allowed only as exactly the same tensor: a partial overlap would let one
  // token's rotation read another's already rotated values.
  const bool in_place = out.data() == x.data() && out.row_stride == x.row_stride;
  check(in_place || !out.range().overlaps(x.range()), op,
        "out overlaps x without being the same tensor (in place needs out == x)");
  const bool has_factors = static_cast<bool>(params.freq_factors.view);
  if (has_factors) {
    const TensorView& f = params.freq_factors;
    require_dtype(f, DType::f32, op, "freq_factors");
    check(f.numel() == rotary_dims / 2 && f.contiguous(), op, "freq_factors has ", f.numel(),
          " elements, expected rotary_dims / 2 = ", rotary_dims / 2, " contiguous values");
  }
  ops::RopeArgs args{};
  args.x = x.data();
  args.out = out.data();
  args.positions = static_cast<const int32_t*>(positions.data());
  args.freq_factors = has_factors ? static_cast<const float*>(params.freq_factors.data()) : nullptr;
  args.tokens = tokens;
  args.heads = heads;
  args.head_dim = head_dim;
  args.x_stride = element_stride(x, op, "x");
  args.out_stride = element_stride(out, op, "out");
  args.rotary_dims = static_cast<int32_t>(rotary_dims);
  args.theta = params.theta;
  args.freq_scale = params.freq_scale;
  // The layout is a variant of the op; its extent: (head, pair) of each token.
  const char* variant = params.layout == ops::RopeLayout::neox ? "rope_neox" : "rope";
  Dispatch d = plan_dispatch(s.backend(), {variant, x.dtype, x.dtype, tokens, heads * rotary_dims / 2}, args,
                             OpKind::rope);
  d.read(x).read(positions);
  if (has_factors) d.read(params.freq_factors);
  d.write(out);
  s.dispatch(std::move(d));
}

}  // namespace onepass
