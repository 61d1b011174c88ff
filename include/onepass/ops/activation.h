// Activations: gelu (tanh form), silu, silu*mul (SwiGLU gate), gelu*mul (GeGLU gate) and softcap.
// Argument structs are shared by every backend's kernels.
#pragma once

#include <cstdint>
#include "onepass/exec/graph_session.h"

namespace onepass::ops {

/// gelu, silu, softcap: out[r, c] = f(x[r, c]), computed in f32, for f32, f16, bf16 (x and
/// out share the type). Strides in elements. `cap` is used by softcap only
/// (out = tanh(x / cap) * cap).
struct ActivationArgs {
  const void* x;
  void* out;
  int64_t rows;
  int64_t cols;
  int64_t x_stride;
  int64_t out_stride;
  float cap;
};

/// out[r, c] = silu(a[r, c]) * b[r, c] (gelu_mul: gelu(a[r, c]) * b[r, c]), computed in f32 (a, b and out
/// share T). Strides in elements; work split as ActivationArgs.
struct SiluMulArgs {
  const void* a;
  const void* b;
  void* out;
  int64_t rows;
  int64_t cols;
  int64_t a_stride;
  int64_t b_stride;
  int64_t out_stride;
};

/// out = gelu(x), tanh approximation.
void gelu(GraphSession& s, const TensorView& x, const TensorView& out);

/// out = x * sigmoid(x).
void silu(GraphSession& s, const TensorView& x, const TensorView& out);

/// out = silu(a) * b.
void silu_mul(GraphSession& s, const TensorView& a, const TensorView& b, const TensorView& out);
/// out = gelu(a) * b (tanh approximation; the GELU-gated FFN of Gemma).
void gelu_mul(GraphSession& s, const TensorView& a, const TensorView& b, const TensorView& out);

/// out = tanh(x / cap) * cap.
void softcap(GraphSession& s, const TensorView& x, float cap, const TensorView& out);

}  // namespace onepass::ops
