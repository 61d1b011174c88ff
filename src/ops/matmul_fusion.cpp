// Fusion rules around the matrix-vector product (decode): RMS-norm -> matmul, matmul ->
// residual add, gate/up matmul -> SiLU x mul or GELU x mul, Q/K/V matmul -> RoPE +
// KV-cache write. They
// apply on backends that offer matmul_fused for the product (the CUDA one-row and mv
// kernels, the CPU's mv_fused); elsewhere the unfused graph runs, and it is the reference
// the fused kernels are tested against.
#include <string>

#include "onepass/exec/backend.h"
#include "onepass/ops/activation.h"
#include "onepass/ops/elementwise.h"
#include "onepass/ops/fusion_rules.h"
#include "onepass/ops/matmul.h"
#include "onepass/ops/norm.h"
#include "onepass/ops/rope.h"
#include "op_common.h"

namespace onepass::ops {
namespace {

// A product as fused arguments (plain or already fused); nullopt for anything else.
std::optional<FusedMatvecArgs> as_matvec(const Dispatch& d) {
  FusedMatvecArgs args{};
  if (d.op == "matmul_fused") return d.args_as<FusedMatvecArgs>();
  if (d.op != "matmul") return std::nullopt;
  args.mm = d.args_as<MatmulArgs>();
  return args;
}

// Row strides only matter when there is more than one row.
bool same_stride(int64_t a, int64_t b, int64_t rows) { return rows <= 1 || a == b; }

std::optional<Dispatch> fused_dispatch(const Backend& backend, FusedMatvecArgs& args, DType weights,
                                       KernelChoice* choice = nullptr) {
  return detail::plan_fused(backend, {"matmul_fused", weights, weights, args.mm.m, args.mm.n}, args, OpKind::matmul,
                            choice);
}

// rms_norm(x, w) -> xn (f32); mv(xn)  ==>  mv with x normalised while it is staged.
std::optional<Dispatch> fuse_norm_matvec(const Dispatch& norm, const Dispatch& matmul, const Backend& backend) {
  if (norm.op != "rms_norm" || norm.type != DType::f32) return std::nullopt;
  std::optional<FusedMatvecArgs> mv = as_matvec(matmul);
  if (!mv || mv->norm_weight != nullptr) return std::nullopt;
  const auto n = norm.args_as<RmsNormArgs>();
  const MatmulArgs& m = mv->mm;
  if (n.weight == nullptr || n.scale != nullptr) return std::nullopt;
  if (n.out != m.x || !same_stride(n.out_stride, m.x_stride, m.m) || n.rows != m.m || n.cols != m.k) return std::nullopt;
  mv->mm.x = static_cast<const float*>(n.x);
  mv->mm.x_stride = n.x_stride;
  mv->norm_weight = n.weight;
  mv->eps = n.eps;
  return fused_dispatch(backend, *mv, matmul.type);
}

// mv -> tmp; add(tmp, r) or add(r, tmp) -> out  ==>  mv writing out = r + product.
std::optional<Dispatch> fuse_matvec_add(const Dispatch& matmul, const Dispatch& add, const Backend& backend) {
  if (add.op != "add" || add.type != DType::f32) return std::nullopt;
  std::optional<FusedMatvecArgs> mv = as_matvec(matmul);
  if (!mv || mv->residual != nullptr) return std::nullopt;
  const auto b = add.args_as<BinaryArgs>();
  const MatmulArgs& m = mv->mm;
  if (b.rows != m.m || b.cols != m.n) return std::nullopt;
  const float* residual = nullptr;
  int64_t residual_stride = 0;
  if (b.a == m.out && same_stride(b.a_stride, m.out_stride, m.m)) {
    residual = static_cast<const float*>(b.b);
    residual_stride = b.b_stride * b.b_row_step;
  } else if (b.b == m.out && same_stride(b.b_stride, m.out_stride, m.m) && b.b_row_step == 1) {
    residual = static_cast<const float*>(b.a);
    residual_stride = b.a_stride;
  } else {
    return std::nullopt;
  }
  mv->residual = residual;
  mv->residual_stride = residual_stride;
  mv->mm.out = static_cast<float*>(b.out);
  mv->mm.out_stride = b.out_stride;
  KernelChoice choice;
  std::optional<Dispatch> fused = fused_dispatch(backend, *mv, matmul.type, &choice);
  // A backend whose kernel reads the residual early must never launch the product early
  // after a dispatch writing it: the range is an early read of the fused dispatch.
  if (fused && (choice.early_operands & kMatvecResidual) != 0) {
    const auto begin = reinterpret_cast<uint64_t>(residual);
    fused->early_reads.push_back(
        MemRange{begin, begin + static_cast<uint64_t>(((m.m - 1) * residual_stride + m.n) * 4)});
  }
  return fused;
}

// mv -> [gate | up]; silu_mul or gelu_mul(gate, up) -> out  ==>  mv with rows j and j + n
// paired.
std::optional<Dispatch> fuse_matvec_gated(const Dispatch& matmul, const Dispatch& act, const Backend& backend) {
  if ((act.op != "silu_mul" && act.op != "gelu_mul") || act.type != DType::f32) return std::nullopt;
  std::optional<FusedMatvecArgs> mv = as_matvec(matmul);
  if (!mv || mv->silu || mv->residual != nullptr || mv->mm.n % 2 != 0) return std::nullopt;
  const auto s = act.args_as<SiluMulArgs>();
  const MatmulArgs& m = mv->mm;
  const int64_t half = m.n / 2;
  if (s.rows != m.m || s.cols != half || s.a != m.out || s.b != static_cast<const void*>(m.out + half) ||
      !same_stride(s.a_stride, m.out_stride, m.m) || !same_stride(s.b_stride, m.out_stride, m.m)) {
    return std::nullopt;
  }
  mv->silu = 1;
  mv->gelu = act.op == "gelu_mul" ? 1 : 0;
  mv->mm.n = half;
  mv->mm.out = static_cast<float*>(s.out);
  mv->mm.out_stride = s.out_stride;
  return fused_dispatch(backend, *mv, matmul.type);
}

// mv -> [q | k | v] of one token; rope_kv_write(q, k, v) in the normal layout  ==>  mv
// with the rotation and the KV-cache writes in its epilogue (MatvecRope). The pairs
// (2i, 2i + 1) of a head are the two outputs of one warp; the NeoX layout pairs values
// half a head apart and keeps the separate kernel, and so do the per-head q/k norms (a
// reduction over a head that the product's warps do not hold).
std::optional<Dispatch> fuse_matvec_rope_kv(const Dispatch& matmul, const Dispatch& rope, const Backend& backend) {
  if (rope.op != "rope_kv_write") return std::nullopt;  // the normal layout
  const DType cache = rope.type;
  std::optional<FusedMatvecArgs> mv = as_matvec(matmul);
  if (!mv || mv->silu || mv->residual != nullptr || mv->rope.positions != nullptr) return std::nullopt;
  const auto r = rope.args_as<RopeKvArgs>();
  if (r.q_norm != nullptr || r.k_norm != nullptr || r.slots != nullptr) return std::nullopt;
  const MatmulArgs& m = mv->mm;
  const int64_t hd = r.head_dim;
  const int64_t q_dim = r.n_head * hd;
  const int64_t kv_dim = r.n_kv_head * hd;
  if (m.m != 1 || r.tokens != 1 || hd % 2 != 0 || m.n != q_dim + 2 * kv_dim || r.cache_stride != hd) return std::nullopt;
  if (r.q != m.out || r.k != m.out + q_dim || r.v != m.out + q_dim + kv_dim) return std::nullopt;
  if (r.q_stride != hd || r.k_stride != hd || r.v_stride != hd) return std::nullopt;
  mv->rope = MatvecRope{r.positions, r.freq_factors, r.k_cache,     r.v_cache,     r.n_head,
                        r.n_kv_head, hd,             r.ctx,         r.rotary_dims, r.theta,
                        r.freq_scale, cache,         r.cos_sin_out, r.cos_sin_in};
  return fused_dispatch(backend, *mv, matmul.type);
}

}  // namespace

void register_matmul_fusion_rules(FusionRules& rules) {
  rules.add({"rms_norm+matvec", OpKind::norm, OpKind::matmul, fuse_norm_matvec});
  rules.add({"matvec+add", OpKind::matmul, OpKind::add, fuse_matvec_add});
  rules.add({"matvec+gated_mul", OpKind::matmul, OpKind::activation, fuse_matvec_gated});
  rules.add({"matvec+rope_kv", OpKind::matmul, OpKind::rope, fuse_matvec_rope_kv, /*keeps_intermediate=*/true,
             /*consumer_updates_intermediate=*/true});
}

}  // namespace onepass::ops
