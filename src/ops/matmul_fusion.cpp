// Fusion rules around the matrix-vector product (decode): RMS-norm -> matmul, matmul ->
// residual add, gate/up matmul -> SiLU x mul, Q/K/V matmul -> RoPE + KV-cache write. They
// apply on backends that register the fused kernels (mv_<W>_f32_fused; CUDA); elsewhere the
// unfused graph runs, and it is the reference the fused kernels are tested against.
#include <string>

#include "onepass/ops/activation.h"
#include "onepass/ops/elementwise.h"
#include "onepass/ops/fusion_rules.h"
#include "onepass/ops/matmul.h"
#include "onepass/ops/norm.h"
#include "onepass/ops/rope.h"

namespace onepass::ops {
namespace {

bool starts_with(const std::string& s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }
bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A matrix-vector dispatch as fused arguments (plain or already fused), with the name of
// the fused kernel; nullopt for anything else (matrix-matrix, other ops).
struct Matvec {
  FusedMatvecArgs args{};
  const Kernel* fused = nullptr;
};

std::optional<Matvec> as_matvec(const Dispatch& d, const KernelRegistry& registry) {
  const std::string& name = d.kernel->name;
  const bool matvec = starts_with(name, "mv1_") || starts_with(name, "mv_");
  if (!matvec || starts_with(name, "mv_id_") || starts_with(name, "mv_affine")) return std::nullopt;
  Matvec mv;
  if (ends_with(name, "_f32_fused")) {
    mv.args = d.args_as<FusedMatvecArgs>();
    mv.fused = d.kernel;
  } else if (ends_with(name, "_f32")) {
    mv.args.mm = d.args_as<MatmulArgs>();
    mv.fused = registry.find(name + "_fused");
  }
  if (mv.fused == nullptr) return std::nullopt;
  return mv;
}

// Row strides only matter when there is more than one row.
bool same_stride(int64_t a, int64_t b, int64_t rows) { return rows <= 1 || a == b; }

Dispatch fused_dispatch(const Matvec& mv, const Dispatch& shape) {
  return Dispatch(*mv.fused, shape.dims, mv.args, OpKind::matmul);
}

// rms_norm_f32(x, w) -> xn; mv(xn)  ==>  mv with x normalised while it is staged.
std::optional<Dispatch> fuse_norm_matvec(const Dispatch& norm, const Dispatch& matmul, const KernelRegistry& registry) {
  if (norm.kernel->name != "rms_norm_f32") return std::nullopt;
  std::optional<Matvec> mv = as_matvec(matmul, registry);
  if (!mv || mv->args.norm_weight != nullptr) return std::nullopt;
  const auto n = norm.args_as<RmsNormArgs>();
  const MatmulArgs& m = mv->args.mm;
  if (n.weight == nullptr || n.scale != nullptr) return std::nullopt;
  if (n.out != m.x || !same_stride(n.out_stride, m.x_stride, m.m) || n.rows != m.m || n.cols != m.k) return std::nullopt;
  mv->args.mm.x = static_cast<const float*>(n.x);
  mv->args.mm.x_stride = n.x_stride;
  mv->args.norm_weight = n.weight;
  mv->args.eps = n.eps;
  return fused_dispatch(*mv, matmul);
}

// mv -> tmp; add(tmp, r) or add(r, tmp) -> out  ==>  mv writing out = r + product.
std::optional<Dispatch> fuse_matvec_add(const Dispatch& matmul, const Dispatch& add, const KernelRegistry& registry) {
  if (add.kernel->name != "add_f32") return std::nullopt;
  std::optional<Matvec> mv = as_matvec(matmul, registry);
  if (!mv || mv->args.residual != nullptr) return std::nullopt;
  const auto b = add.args_as<BinaryArgs>();
  const MatmulArgs& m = mv->args.mm;
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
  mv->args.residual = residual;
  mv->args.residual_stride = residual_stride;
  mv->args.mm.out = static_cast<float*>(b.out);
  mv->args.mm.out_stride = b.out_stride;
  // The residual is an early read (the kernels may load it before their PDL wait): the
  // backend then never launches the product early after a dispatch writing it. In a
  // decode step it was written two or three dispatches before (by the layer's previous
  // residual product).
  mv->args.residual_before_wait = 1;
  Dispatch fused = fused_dispatch(*mv, matmul);
  const auto begin = reinterpret_cast<uint64_t>(residual);
  fused.early_reads.push_back(
      MemRange{begin, begin + static_cast<uint64_t>(((m.m - 1) * residual_stride + m.n) * 4)});
  return fused;
}

// mv -> [gate | up]; silu_mul(gate, up) -> out  ==>  mv with rows j and j + n paired.
std::optional<Dispatch> fuse_matvec_silu(const Dispatch& matmul, const Dispatch& act, const KernelRegistry& registry) {
  if (act.kernel->name != "silu_mul_f32") return std::nullopt;
  std::optional<Matvec> mv = as_matvec(matmul, registry);
  if (!mv || mv->args.silu || mv->args.residual != nullptr || mv->args.mm.n % 2 != 0) return std::nullopt;
  const auto s = act.args_as<SiluMulArgs>();
  const MatmulArgs& m = mv->args.mm;
  const int64_t half = m.n / 2;
  if (s.rows != m.m || s.cols != half || s.a != m.out || s.b != static_cast<const void*>(m.out + half) ||
      !same_stride(s.a_stride, m.out_stride, m.m) || !same_stride(s.b_stride, m.out_stride, m.m)) {
    return std::nullopt;
  }
  mv->args.silu = 1;
  mv->args.mm.n = half;
  mv->args.mm.out = static_cast<float*>(s.out);
  mv->args.mm.out_stride = s.out_stride;
  return fused_dispatch(*mv, matmul);
}

// mv -> [q | k | v] of one token; rope_kv_write(q, k, v) in the normal layout  ==>  mv
// with the rotation and the KV-cache writes in its epilogue (MatvecRope). The pairs
// (2i, 2i + 1) of a head are the two outputs of one warp; the NeoX layout pairs values
// half a head apart and keeps the separate kernel.
std::optional<Dispatch> fuse_matvec_rope_kv(const Dispatch& matmul, const Dispatch& rope, const KernelRegistry& registry) {
  constexpr std::string_view kPrefix = "rope_kv_write_";
  const std::string& name = rope.kernel->name;
  if (!starts_with(name, kPrefix) || starts_with(name, "rope_kv_write_neox_")) return std::nullopt;
  const std::optional<DType> cache = parse_dtype(std::string_view(name).substr(kPrefix.size()));
  std::optional<Matvec> mv = as_matvec(matmul, registry);
  if (!cache || !mv || mv->args.silu || mv->args.residual != nullptr || mv->args.rope.positions != nullptr) {
    return std::nullopt;
  }
  const auto r = rope.args_as<RopeKvArgs>();
  const MatmulArgs& m = mv->args.mm;
  const int64_t hd = r.head_dim;
  const int64_t q_dim = r.n_head * hd;
  const int64_t kv_dim = r.n_kv_head * hd;
  if (m.m != 1 || r.tokens != 1 || hd % 2 != 0 || m.n != q_dim + 2 * kv_dim || r.cache_stride != hd) return std::nullopt;
  if (r.q != m.out || r.k != m.out + q_dim || r.v != m.out + q_dim + kv_dim) return std::nullopt;
  if (r.q_stride != hd || r.k_stride != hd || r.v_stride != hd) return std::nullopt;
  mv->args.rope = MatvecRope{r.positions, r.freq_factors, r.k_cache,     r.v_cache,     r.n_head,
                             r.n_kv_head, hd,             r.ctx,         r.rotary_dims, r.theta,
                             r.freq_scale, *cache,        r.cos_sin_out, r.cos_sin_in};
  return fused_dispatch(*mv, matmul);
}

}  // namespace

void register_matmul_fusion_rules(FusionRules& rules) {
  rules.add({"rms_norm+matvec", OpKind::norm, OpKind::matmul, fuse_norm_matvec});
  rules.add({"matvec+add", OpKind::matmul, OpKind::add, fuse_matvec_add});
  rules.add({"matvec+silu_mul", OpKind::matmul, OpKind::activation, fuse_matvec_silu});
  rules.add({"matvec+rope_kv", OpKind::matmul, OpKind::rope, fuse_matvec_rope_kv, /*keeps_intermediate=*/true,
             /*consumer_updates_intermediate=*/true});
}

}  // namespace onepass::ops
