// rope_kv_write: the optional per-head RMS norms of q and k, RoPE on q and k plus the
// KV-cache writes, in one dispatch.
#include <algorithm>
#include <cmath>

#include "onepass/exec/graph_session.h"
#include "onepass/ops/rope.h"
#include "op_common.h"

namespace onepass {

void ops::rope_kv_write(GraphSession& s, const TensorView& q, const TensorView& k, const TensorView& v,
                                 const TensorView& k_cache, const TensorView& v_cache, const TensorView& positions,
                                 const ops::RopeParams& params, const TensorView& slots) {
  using namespace ops::detail;
  const char* op = "rope_kv_write";
  for (const auto& [t, what] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
    require_data(*t, op, what);
    require_dtype(*t, DType::f32, op, what);
    check(t->shape.ndim() == 3, op, what, " has shape ", t->shape.str(), ", expected [tokens, heads, head_dim]");
  }
  require_data(k_cache, op, "k_cache");
  require_data(v_cache, op, "v_cache");
  require_same_dtype(k_cache, v_cache, op, "k_cache", "v_cache");
  check(k_cache.dtype == DType::f16 || k_cache.dtype == DType::f32 || k_cache.dtype == DType::bf16, op,
        "caches must be f16, f32 or bf16, got ", dtype_name(k_cache.dtype));
  require_dtype(positions, DType::i32, op, "positions");
  const int64_t tokens = q.shape[0];
  const int64_t n_head = q.shape[1];
  const int64_t head_dim = q.shape[2];
  const int64_t n_kv_head = k.shape[1];
  check(k.shape == v.shape && k.shape[0] == tokens && k.shape[2] == head_dim, op, "k ", k.shape.str(), " and v ",
        v.shape.str(), " must be [", tokens, ", kv_heads, ", head_dim, "]");
  check(k_cache.shape.ndim() == 3 && k_cache.shape == v_cache.shape && k_cache.shape[0] == n_kv_head &&
            k_cache.shape[2] == head_dim && k_cache.contiguous(),
        op, "caches have shape ", k_cache.shape.str(), ", expected [", n_kv_head, ", ctx, ", head_dim, "]");
  check(positions.numel() == tokens && positions.contiguous(), op, "positions has ", positions.numel(),
        " values, expected ", tokens);
  if (slots.view) {
    require_dtype(slots, DType::i32, op, "slots");
    check(slots.numel() == tokens && slots.contiguous(), op, "slots has ", slots.numel(), " values, expected ", tokens);
    check(params.cos_sin_use == ops::RopeCosSin::none, op, "slots are for batched steps; cos_sin is one token's");
  }
  const int32_t rotary = params.rotary_dims == 0 ? static_cast<int32_t>(head_dim) : params.rotary_dims;
  check(rotary > 0 && rotary % 2 == 0 && rotary <= head_dim, op, "rotary dims ", rotary,
        " must be even and at most head_dim ", head_dim);
  check(params.theta > 0, op, "theta must be positive");
  const bool cos_sin = params.cos_sin_use != ops::RopeCosSin::none;
  if (cos_sin) {
    require_data(params.cos_sin, op, "cos_sin");
    require_dtype(params.cos_sin, DType::f32, op, "cos_sin");
    check(tokens == 1, op, "cos_sin is for one token, got ", tokens);
    check(params.cos_sin.numel() == rotary && params.cos_sin.contiguous(), op, "cos_sin has ",
          params.cos_sin.numel(), " values, expected rotary_dims = ", rotary);
  }
  if (params.freq_factors.view) {
    require_dtype(params.freq_factors, DType::f32, op, "freq_factors");
    check(params.freq_factors.numel() == rotary / 2, op, "freq_factors has ", params.freq_factors.numel(),
          " values, expected ", rotary / 2);
  }
  const bool qk_norm = params.q_norm.view || params.k_norm.view;
  if (qk_norm) {
    for (const auto& [t, what] : {std::pair{&params.q_norm, "q_norm"}, {&params.k_norm, "k_norm"}}) {
      require_data(*t, op, what);
      require_dtype(*t, DType::f32, op, what);
      check(t->numel() == head_dim && t->contiguous(), op, what, " has shape ", t->shape.str(),
            ", expected [head_dim = ", head_dim, "] (per-head norm weights)");
    }
    check(params.qk_norm_eps >= 0 && std::isfinite(params.qk_norm_eps), op, "qk_norm_eps must be finite and >= 0, got ",
          params.qk_norm_eps);
  }
  ops::RopeKvArgs a{};
  a.q = static_cast<float*>(q.data());
  a.k = static_cast<const float*>(k.data());
  a.v = static_cast<const float*>(v.data());
  a.k_cache = k_cache.data();
  a.v_cache = v_cache.data();
  a.positions = static_cast<const int32_t*>(positions.data());
  a.slots = slots.view ? static_cast<const int32_t*>(slots.data()) : nullptr;
  a.freq_factors = params.freq_factors.view ? static_cast<const float*>(params.freq_factors.data()) : nullptr;
  a.tokens = tokens;
  a.n_head = n_head;
  a.n_kv_head = n_kv_head;
  a.head_dim = head_dim;
  a.ctx = k_cache.shape[1];
  a.q_stride = element_stride(q, op, "q");
  a.k_stride = element_stride(k, op, "k");
  a.v_stride = element_stride(v, op, "v");
  a.cache_stride = head_dim;
  a.rotary_dims = rotary;
  a.theta = params.theta;
  a.freq_scale = params.freq_scale;
  if (params.cos_sin_use == ops::RopeCosSin::store) a.cos_sin_out = static_cast<float*>(params.cos_sin.data());
  if (params.cos_sin_use == ops::RopeCosSin::load) a.cos_sin_in = static_cast<const float*>(params.cos_sin.data());
  if (qk_norm) {
    a.q_norm = static_cast<const float*>(params.q_norm.data());
    a.k_norm = static_cast<const float*>(params.k_norm.data());
    a.norm_eps = params.qk_norm_eps;
  }
  const char* variant = params.layout == ops::RopeLayout::neox ? "rope_kv_write_neox" : "rope_kv_write";
  KernelChoice choice;
  Dispatch d = plan_dispatch(s.backend(), {variant, k_cache.dtype, k_cache.dtype, tokens, n_head + 2 * n_kv_head}, a,
                             OpKind::rope, &choice);
  d.read(q).read(k).read(v).write(q).write(k_cache).write(v_cache);
  read_operand(d, choice, ops::kRopeKvPositions, positions);
  if (slots.view) d.read(slots);
  if (params.freq_factors.view) d.read(params.freq_factors);
  if (qk_norm) d.read(params.q_norm).read(params.k_norm);
  if (params.cos_sin_use == ops::RopeCosSin::store) d.write(params.cos_sin);
  if (params.cos_sin_use == ops::RopeCosSin::load) read_operand(d, choice, ops::kRopeKvLoadedAngles, params.cos_sin);
  s.dispatch(std::move(d));
}

}  // namespace onepass
