// mv_fused_<W>_f32 on the CPU: matmul_fused (ops::FusedMatvecArgs) with the arithmetic of
// the unfused sequence it replaces, value for value: x normalised as rms_norm_f32 does
// (once per call, into the thread's scratch), the same row dot products as mv_<W>_f32, then
// silu(gate) * up as silu_mul_f32 (gelu(gate) * up as gelu_mul_f32), product + residual as add_f32, or the rotation and cache
// stores of rope_kv_write_<C> (one token).
#include <algorithm>
#include <vector>

#include "../../cpu_launch.h"
#include "../float_types.h"
#include "../row_math.h"
#include "onepass/ops/matmul.h"
#include "rows.h"

namespace onepass::cpu {
namespace {

void store_value(void* cache, DType type, int64_t index, float value) {
  switch (type) {
    case DType::f16:
      static_cast<uint16_t*>(cache)[index] = Elem<DType::f16>::store(value);
      break;
    case DType::bf16:
      static_cast<uint16_t*>(cache)[index] = Elem<DType::bf16>::store(value);
      break;
    default:
      static_cast<float*>(cache)[index] = value;
      break;
  }
}

// The RoPE + KV-write epilogue of outputs [n0, n1) of one token's [q | k | v] (`values`
// holds them): q rotated in place, k and v left as computed in out, the rotated k and v
// stored to the caches. Blocks start at even outputs, so each RoPE pair (2i, 2i + 1) of a
// head lies in one block.
void rope_epilogue(const ops::FusedMatvecArgs& f, int64_t n0, int64_t n1, const float* values,
                   const float* cos_sin, int32_t position) {
  const ops::MatvecRope& r = f.rope;
  const int64_t hd = r.head_dim;
  const int64_t q_dim = r.n_head * hd;
  const int64_t kv_dim = r.n_kv_head * hd;
  const bool write_cache = position >= 0 && position < r.ctx;  // device data: never write outside
  float* out = f.mm.out;
  for (int64_t j = n0; j + 1 < n1; j += 2) {
    const float x0 = values[j - n0], x1 = values[j + 1 - n0];
    const bool is_q = j < q_dim;
    const bool is_k = !is_q && j < q_dim + kv_dim;
    const int64_t offset = is_q ? j : is_k ? j - q_dim : j - q_dim - kv_dim;
    const int64_t head = offset / hd, d = offset % hd;
    float y0 = x0, y1 = x1;
    if (!is_q && !is_k) {
      // v: as computed
    } else if (d < r.rotary_dims) {
      const float c = cos_sin[d], s = cos_sin[d + 1];
      y0 = x0 * c - x1 * s;
      y1 = x0 * s + x1 * c;
      if (is_q && head == 0 && r.cos_sin_out != nullptr) {  // RopeCosSin::store
        r.cos_sin_out[d] = c;
        r.cos_sin_out[d + 1] = s;
      }
    }
    out[j] = is_q ? y0 : x0;
    out[j + 1] = is_q ? y1 : x1;
    if (!is_q && write_cache) {
      void* cache = is_k ? r.k_cache : r.v_cache;
      const int64_t at = (head * r.ctx + position) * hd + d;
      store_value(cache, r.cache_type, at, y0);
      store_value(cache, r.cache_type, at + 1, y1);
    }
  }
}

template <DType W>
void mv_fused(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  const auto& f = *static_cast<const ops::FusedMatvecArgs*>(raw);
  const ops::MatmulArgs& a = f.mm;
  const auto* w = static_cast<const uint8_t*>(a.w);
  const float* x = a.x;
  int64_t x_stride = a.x_stride;
  if (f.norm_weight != nullptr) {
    float* xn = thread_scratch(a.m * a.k);
    for (int64_t i = 0; i < a.m; ++i) {
      const float* row = a.x + i * a.x_stride;
      const float inv = rms_inverse([row](int64_t c) { return row[c]; }, a.k, f.eps);
      for (int64_t c = 0; c < a.k; ++c) {
        float v = row[c] * inv;
        v *= f.norm_weight[c];
        xn[i * a.k + c] = v;
      }
    }
    x = xn;
    x_stride = a.k;
  }
  const RowDots dot(W, active_isa(), x, x_stride, a.m, a.k);
  // RoPE: the token's (cos, sin) per pair, once per call.
  const bool rope = f.rope.positions != nullptr;
  thread_local std::vector<float> cos_sin;
  int32_t position = 0;
  if (rope) {
    const ops::MatvecRope& r = f.rope;
    position = r.positions[0];
    cos_sin.resize(static_cast<size_t>(r.rotary_dims));
    for (int64_t i = 0; i < r.rotary_dims / 2; ++i) {
      auto& c = cos_sin[static_cast<size_t>(2 * i)];
      auto& s = cos_sin[static_cast<size_t>(2 * i + 1)];
      if (r.cos_sin_in != nullptr) {  // RopeCosSin::load
        c = r.cos_sin_in[2 * i];
        s = r.cos_sin_in[2 * i + 1];
      } else {
        rope_cos_sin(i, position, r.rotary_dims, r.theta, r.freq_scale, r.freq_factors, c, s);
      }
    }
  }
  float product[ops::kMatmulMvMaxRows];
  float up[ops::kMatmulMvMaxRows];
  float block_values[kCpuMvRowsPerBlock];  // RoPE: one token's outputs of the block
  // One row of x: the block's products (and its up rows') together, as mv_<W>_f32 does.
  float block_products[kCpuMvRowsPerBlock];
  float block_up[kCpuMvRowsPerBlock];
  for (uint64_t b = first; b < end; ++b) {
    const int64_t n0 = static_cast<int64_t>(b) * kCpuMvRowsPerBlock;
    const int64_t n1 = std::min(a.n, n0 + kCpuMvRowsPerBlock);
    if (a.m == 1) {
      dot.rows(w + n0 * a.w_row_bytes, a.w_row_bytes, n1 - n0, block_products);
      if (f.silu != 0 && !rope) {
        dot.rows(w + (n0 + a.n) * a.w_row_bytes, a.w_row_bytes, n1 - n0, block_up);
        activate_rows(f.gelu != 0 ? Activation::gelu : Activation::silu, block_products, block_up, block_products,
                      n1 - n0);
      }
    }
    for (int64_t n = n0; n < n1; ++n) {
      if (a.m == 1) {
        product[0] = block_products[n - n0];
      } else {
        dot(w + n * a.w_row_bytes, product, 1);
      }
      if (rope) {
        block_values[n - n0] = product[0];
        continue;
      }
      if (f.silu != 0 && a.m > 1) {
        dot(w + (n + a.n) * a.w_row_bytes, up, 1);
        activate_rows(f.gelu != 0 ? Activation::gelu : Activation::silu, product, up, product, a.m);
      }
      for (int64_t i = 0; i < a.m; ++i) {
        float v = product[i];
        if (f.residual != nullptr) v += f.residual[i * f.residual_stride + n];  // may alias out
        a.out[i * a.out_stride + n] = v;
      }
    }
    if (rope) rope_epilogue(f, n0, n1, block_values, cos_sin.data(), position);
  }
}

}  // namespace

CpuKernelFn mv_fused_kernel(DType w) {
  CpuKernelFn fn = nullptr;
  for_each_weight_type([&]<DType W>() {
    if (W == w) fn = mv_fused<W>;
  });
  return fn;
}

}  // namespace onepass::cpu
