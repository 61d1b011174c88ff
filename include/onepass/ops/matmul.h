// Dense and GGML block-quantized matmul: out [M, N] = x [M, K] · wᵀ, w [N, K].
// Argument structs are shared by every backend's kernels.
#pragma once

#include <cstdint>

#include "onepass/core/dtype.h"
#include "onepass/exec/graph_session.h"

namespace onepass::ops {

/// matmul: out [M, N] = x [M, K] · wᵀ for weights W of any weight type (is_weight_type:
/// f32, f16, bf16 and the GGML block formats of ops/quant.h); x and out f32; f32
/// accumulation. w rows are K values of W (whole blocks), w_row_bytes apart. A backend chooses its kernels by M (matrix-vector products
/// read every weight row once and dot it with all rows of x; matrix-matrix products tile
/// the output), and computes every output element in exactly one block, so results do
/// not depend on how blocks are spread over threads.
struct MatmulArgs {
  const float* x;       // [M, K], rows x_stride floats apart
  const void* w;        // [N, K] in the kernel's weight type
  float* out;           // [M, N], rows out_stride floats apart
  int64_t m;            // rows of x and out
  int64_t n;            // rows of w = columns of out
  int64_t k;            // reduction length (whole blocks for the block formats)
  int64_t x_stride;     // floats between rows of x (>= k)
  int64_t w_row_bytes;  // bytes between rows of w (>= the bytes of K values)
  int64_t out_stride;   // floats between rows of out (>= n)
};

/// matmul_fused: the matrix-vector product with what the fusion rules fold into it
/// (matmul_fusion.cpp), each optional:
///   norm_weight  x rows are first RMS-normalised (eps) and scaled by norm_weight [K]
///   silu         out[m, j] = act(w_j · x) * (w_{j+n} · x): w has 2n rows (gate, then up);
///                act is SiLU, or with `gelu` set GELU in its tanh form (gelu_mul's)
///   residual     out[m, j] += residual[m * residual_stride + j] (0: one broadcast row);
///                residual may be out itself
///   rope         (rope.positions set) the product is one token's Q/K/V, [q | k | v] in
///                out, and rope_kv_write (normal layout) is folded into the epilogue:
///                see MatvecRope
/// mm.n is the number of outputs per row of x. Only backends with fused kernels offer it.
struct MatvecRope {
  const int32_t* positions;   // [1]: the token's position; null when no RoPE is fused
  const float* freq_factors;  // optional [rotary_dims / 2]
  void* k_cache;              // [n_kv_head, ctx, head_dim] of cache_type
  void* v_cache;
  int64_t n_head;
  int64_t n_kv_head;
  int64_t head_dim;
  int64_t ctx;
  int32_t rotary_dims;
  float theta;
  float freq_scale;
  DType cache_type;         // f32, f16 or bf16
  float* cos_sin_out;       // rope_kv_write's RopeCosSin::store: (cos, sin) per pair, else null
  const float* cos_sin_in;  // RopeCosSin::load, else null
};
/// With `rope`, out ends as rope_kv_write leaves the product's output: q rotated in place,
/// k and v as computed; the rotated k and v go to the caches at the token's position (not
/// written when it lies outside [0, ctx)). Each warp's output pair (2i, 2i + 1) is one
/// RoPE pair.
struct FusedMatvecArgs {
  MatmulArgs mm;
  const float* norm_weight;
  float eps;
  int32_t silu;
  int32_t gelu;  // with silu: the gate's activation is GELU (tanh), not SiLU
  const float* residual;
  int64_t residual_stride;
  MatvecRope rope;
  /// The backend's: nonzero when its kernel loads the residual before its
  /// programmatic-launch wait (it then reports kMatvecResidual as an early operand).
  int32_t residual_early;
};

/// Rows of x up to which the products are matrix-vector products (every weight row read
/// once for all rows of x); the backends' kernels and the op cases' tolerances rely on it.
inline constexpr int64_t kMatmulMvMaxRows = 8;

/// Operands matmul and matmul_fused may read early (KernelChoice::early_operands).
inline constexpr uint32_t kMatmulWeights = 1u << 0;
inline constexpr uint32_t kMatvecResidual = 1u << 1;

/// out [M, N] = x [M, K] · wᵀ, w [N, K] in f32/f16/bf16 or a GGML block format;
/// f32 accumulation.
void matmul(GraphSession& s, const TensorView& x, const TensorView& w, const TensorView& out);

}  // namespace onepass::ops
