// x staging of the matrix-vector kernels (device code): x read in batches of float4,
// normalised when an RMS norm is fused, then quantized to int8 per 32 values (block
// formats) or kept as f32 (dense weights) in shared memory.
//
// The mv1 (one row of x) kernels have three staging paths (Mv1XPath): one batch without a
// norm, one batch with a deferred norm, and the general loops over rows and batches.
// Deferred norm: RMS-norm's 1 / rms is one factor of the whole row, so staging stores
// x * w and the products scale their sums by 1 / rms afterwards (deferred_inv_rms); the
// staging then needs no block reduction before x is quantized or stored.
#pragma once

#include "launch.h"
#include "../kernels/common.cuh"
#include "mv_common.cuh"
#include "onepass/ops/matmul.h"

namespace onepass::cuda {

__device__ __forceinline__ float4 load4(const float* p, bool vec) {
  if (vec) return *reinterpret_cast<const float4*>(p);
  return make_float4(p[0], p[1], p[2], p[3]);
}

// x staging reads kXBatch float4 per thread before using any of them, so a block pays one
// L2 round trip per kXBatch * blockDim * 4 values (a loop with a shuffle per value would
// pay one round trip per pass).
constexpr int kXBatch = 4;
static_assert(kXBatch % 2 == 0, "x is staged in pairs of float4");

// The float4 of x that a thread takes as element j of the batch at `base`: pairs of
// adjacent float4 per thread (still whole 1 KB spans per warp and pair), so that four
// threads hold one 32-value quantization group.
__device__ __forceinline__ int64_t x_batch_index(int64_t base, int j) {
  return base + int64_t{j >> 1} * 2 * flat_threads() + 2 * flat_thread() + (j & 1);
}

struct XQuantSmem {
  int8_t* q;       // [M * K]
  float4* groups;  // [M * K / 32]: d, sum_lo, sum_hi
};

// The kXBatch float4 of row m a thread takes in the pass at `base` (zeros past K), every
// load issued before any is used; normalised with rms_norm_f32's expression (x * inv_rms * w)
// when a norm is fused.
__device__ __forceinline__ void load_x_batch(const ops::MatmulArgs& a, const MvFusion& f, const float* inv_rms,
                                             int64_t m, int64_t base, bool vec, float4 (&e)[kXBatch]) {
  const int64_t k4 = a.k / 4;
  const float* xr = a.x + m * a.x_stride;
  float4 w[kXBatch];
#pragma unroll
  for (int j = 0; j < kXBatch; ++j) {
    const int64_t i = x_batch_index(base, j);
    e[j] = i < k4 ? load4(xr + 4 * i, vec) : make_float4(0.f, 0.f, 0.f, 0.f);
    w[j] = f.norm_weight && i < k4 ? load4(f.norm_weight + 4 * i, vec) : make_float4(1.f, 1.f, 1.f, 1.f);
  }
  if (f.norm_weight) {
    const float scale = inv_rms[m];
#pragma unroll
    for (int j = 0; j < kXBatch; ++j) {
      e[j] = make_float4(e[j].x * scale * w[j].x, e[j].y * scale * w[j].y, e[j].z * scale * w[j].z,
                         e[j].w * scale * w[j].w);
    }
  }
}

// Whether x (and the norm weight) can be read as float4: K a multiple of 4, rows aligned.
__device__ __forceinline__ bool x_loads_vec(const ops::MatmulArgs& a, const MvFusion& f) {
  return a.k % 4 == 0 && ((reinterpret_cast<uintptr_t>(a.x) | static_cast<uintptr_t>(a.x_stride * 4) |
                           reinterpret_cast<uintptr_t>(f.norm_weight)) & 15) == 0;
}

// 1 / rms of each row of x (fused RMS-norm); K a multiple of 4.
__device__ __forceinline__ void rows_inv_rms(const ops::MatmulArgs& a, float eps, bool vec, float* inv_rms,
                                             float* scratch) {
  for (int64_t m = 0; m < a.m; ++m) {
    float sum = 0.0f;
    for (int64_t base = 0; base < a.k / 4; base += int64_t{kXBatch} * flat_threads()) {
      float4 v[kXBatch];
      load_x_batch(a, MvFusion{}, nullptr, m, base, vec, v);  // raw x: zeros past K
#pragma unroll
      for (int j = 0; j < kXBatch; ++j) sum += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
    }
    sum = block_sum(sum, scratch);
    if (flat_thread() == 0) inv_rms[m] = rsqrtf(sum / static_cast<float>(a.k) + eps);
  }
  __syncthreads();
}

// Whether a row of x is staged in one batch (K <= kXBatch * blockDim * 4: 2048 with 128
// threads): then a fused norm takes its 1 / rms from the same registers
// (load_x_normed_one_batch).
__device__ __forceinline__ bool x_one_batch(const ops::MatmulArgs& a) {
  return a.k / 4 <= int64_t{kXBatch} * flat_threads();
}

// This thread's share of the sum of squares of x (one batch), summed as in rows_inv_rms.
__device__ __forceinline__ float sum_of_squares(const float4 (&e)[kXBatch]) {
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kXBatch; ++j) sum += e[j].x * e[j].x + e[j].y * e[j].y + e[j].z * e[j].z + e[j].w * e[j].w;
  return sum;
}

// x and the fused norm's weight of row m in one batch (x_one_batch: every load issued
// before any is used); returns this thread's share of the sum of squares of x, summed as
// in rows_inv_rms.
__device__ __forceinline__ float load_x_and_norm_weight(const ops::MatmulArgs& a, const MvFusion& f, int64_t m,
                                                        bool vec, float4 (&e)[kXBatch], float4 (&w)[kXBatch]) {
  const int64_t k4 = a.k / 4;
  const float* xr = a.x + m * a.x_stride;
#pragma unroll
  for (int j = 0; j < kXBatch; ++j) {
    const int64_t i = x_batch_index(0, j);
    e[j] = i < k4 ? load4(xr + 4 * i, vec) : make_float4(0.f, 0.f, 0.f, 0.f);
    w[j] = i < k4 ? load4(f.norm_weight + 4 * i, vec) : make_float4(1.f, 1.f, 1.f, 1.f);
  }
  return sum_of_squares(e);
}

// load_x_batch of a whole row (x_one_batch) with a fused norm: x and the norm weight are
// loaded together and 1 / rms is reduced from those registers, which saves rows_inv_rms's
// extra pass over x (an L2 round trip). Same sums in the same order as rows_inv_rms.
// Called by every thread (block_sum synchronises).
__device__ __forceinline__ void load_x_normed_one_batch(const ops::MatmulArgs& a, const MvFusion& f, int64_t m,
                                                        bool vec, float* scratch, float4 (&e)[kXBatch]) {
  float4 w[kXBatch];
  const float sum = block_sum(load_x_and_norm_weight(a, f, m, vec, e, w), scratch);
  const float scale = rsqrtf(sum / static_cast<float>(a.k) + f.eps);
#pragma unroll
  for (int j = 0; j < kXBatch; ++j) {
    e[j] = make_float4(e[j].x * scale * w[j].x, e[j].y * scale * w[j].y, e[j].z * scale * w[j].z,
                       e[j].w * scale * w[j].w);
  }
}

// ---- deferred norm (mv1: one row of x in one batch) --------------------------------------

// e = x * w, without 1 / rms, and this warp's sum of squares of x (from this thread's
// `squares`) written to scratch[warp], for deferred_inv_rms after the block's next barrier.
__device__ __forceinline__ void apply_norm_weight_defer_rms(float squares, float* scratch, float4 (&e)[kXBatch],
                                                            const float4 (&w)[kXBatch]) {
  const float sum = warp_sum(squares);
  if ((flat_thread() & 31) == 0) scratch[flat_thread() >> 5] = sum;
#pragma unroll
  for (int j = 0; j < kXBatch; ++j) {
    e[j] = make_float4(e[j].x * w[j].x, e[j].y * w[j].y, e[j].z * w[j].z, e[j].w * w[j].w);
  }
}

// Deferred-norm staging of row 0: loads x and the norm weight, then
// apply_norm_weight_defer_rms.
__device__ __forceinline__ void load_x_deferred_norm(const ops::MatmulArgs& a, const MvFusion& f, bool vec,
                                                     float* scratch, float4 (&e)[kXBatch]) {
  float4 w[kXBatch];
  apply_norm_weight_defer_rms(load_x_and_norm_weight(a, f, 0, vec, e, w), scratch, e, w);
}

// This thread's kXBatch float4 of the norm weight (load_x_and_norm_weight's layout), for
// load_x_deferred_norm_held_weight. The weight is read-only for the pass, so this may run
// before the PDL wait.
__device__ __forceinline__ void load_norm_weight_batch(const ops::MatmulArgs& a, const MvFusion& f,
                                                       float4 (&w)[kXBatch]) {
  const int64_t k4 = a.k / 4;
#pragma unroll
  for (int j = 0; j < kXBatch; ++j) {
    const int64_t i = x_batch_index(0, j);
    w[j] = i < k4 ? __ldg(reinterpret_cast<const float4*>(f.norm_weight) + i) : make_float4(1.f, 1.f, 1.f, 1.f);
  }
}

// load_x_deferred_norm with the norm weight already in registers (load_norm_weight_batch
// in the prologue before the PDL wait): only x's loads follow the wait.
__device__ __forceinline__ void load_x_deferred_norm_held_weight(const ops::MatmulArgs& a, const MvFusion& f,
                                                                 float* scratch, const float4 (&w)[kXBatch],
                                                                 float4 (&e)[kXBatch]) {
  const int64_t k4 = a.k / 4;
#pragma unroll
  for (int j = 0; j < kXBatch; ++j) {
    const int64_t i = x_batch_index(0, j);
    e[j] = i < k4 ? reinterpret_cast<const float4*>(a.x)[i] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  apply_norm_weight_defer_rms(sum_of_squares(e), scratch, e, w);
}

// 1 / rms from the warps' sums that the deferred-norm staging left in scratch (16-byte
// aligned; after a barrier). Every thread reads all of them (broadcast 16-byte loads, all
// in flight at once) and adds them in a fixed tree, so the value is the same in every
// thread and every run. It runs between the staging barrier and the first dot product,
// with no shuffles or second barrier on the warps' path as in block_sum.
__device__ __forceinline__ float deferred_inv_rms(const ops::MatmulArgs& a, const MvFusion& f, const float* scratch) {
  constexpr int kMaxWarps = static_cast<int>(kCudaMv1MaxThreads) / 32;
  static_assert(kMaxWarps == 16, "the tree below adds 16 warp sums");
  const int warps = flat_threads() >> 5;  // mv1 blocks are whole warps
  float v[kMaxWarps];
#pragma unroll
  for (int i = 0; i < kMaxWarps; i += 4) {
    const float4 q = reinterpret_cast<const float4*>(scratch)[i / 4];
    v[i] = i < warps ? q.x : 0.0f;
    v[i + 1] = i + 1 < warps ? q.y : 0.0f;
    v[i + 2] = i + 2 < warps ? q.z : 0.0f;
    v[i + 3] = i + 3 < warps ? q.w : 0.0f;
  }
  const float s8[8] = {v[0] + v[8], v[1] + v[9], v[2] + v[10], v[3] + v[11],
                       v[4] + v[12], v[5] + v[13], v[6] + v[14], v[7] + v[15]};
  const float s4[4] = {s8[0] + s8[4], s8[1] + s8[5], s8[2] + s8[6], s8[3] + s8[7]};
  const float sum = (s4[0] + s4[2]) + (s4[1] + s4[3]);
  return rsqrtf(sum / static_cast<float>(a.k) + f.eps);
}

// Whether an mv1 kernel stages x with a deferred norm (a fused norm, x in one batch and
// float4 loads); otherwise x is staged normalised and the sums are scaled by 1.
__device__ __forceinline__ bool mv1_defers_norm(const ops::MatmulArgs& a, const MvFusion& f) {
  return f.norm_weight != nullptr && a.m == 1 && x_one_batch(a) && x_loads_vec(a, f);
}

// The same shape without a norm (the decode step's output and down projections): one row
// of x in one batch of float4 loads, without for_each_x_batch's row and batch loops and
// norm checks between the PDL wait and the first sums, where the staging's instructions
// are on every product's critical path.
__device__ __forceinline__ bool mv1_x_unnormed_one_batch(const ops::MatmulArgs& a, const MvFusion& f) {
  return f.norm_weight == nullptr && a.m == 1 && x_one_batch(a) && x_loads_vec(a, f);
}
__device__ __forceinline__ void load_x_one_batch(const ops::MatmulArgs& a, float4 (&e)[kXBatch]) {
  const int64_t k4 = a.k / 4;
#pragma unroll
  for (int j = 0; j < kXBatch; ++j) {
    const int64_t i = x_batch_index(0, j);
    e[j] = i < k4 ? reinterpret_cast<const float4*>(a.x)[i] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// ---- general staging ----------------------------------------------------------------------

// Every row of x (normalised when a norm is fused) in batches of kXBatch float4 per
// thread: use(m, base, batch) gets the float4 base + j * blockDim + threadIdx of row m in
// batch[j] (zeros past K). Called by every thread of the block (the norm synchronises).
template <typename Use>
__device__ __forceinline__ void for_each_x_batch(const ops::MatmulArgs& a, const MvFusion& f, bool vec, float* inv_rms,
                                                 float* scratch, Use use) {
  const bool normed_once = f.norm_weight && x_one_batch(a);
  if (f.norm_weight && !normed_once) rows_inv_rms(a, f.eps, vec, inv_rms, scratch);
  for (int64_t m = 0; m < a.m; ++m) {
    for (int64_t base = 0; base < a.k / 4; base += int64_t{kXBatch} * flat_threads()) {
      float4 batch[kXBatch];
      if (normed_once) {
        load_x_normed_one_batch(a, f, m, vec, scratch, batch);
      } else {
        load_x_batch(a, f, inv_rms, m, base, vec, batch);
      }
      use(m, base, batch);
    }
  }
}

// Quantizes one batch of row m (load_x_batch's layout) to int8 per 32 values into s:
// 4 adjacent threads own one group, two float4 each (x_batch_index), so the reductions are
// two shuffles deep.
__device__ __forceinline__ void quantize_x_batch(const ops::MatmulArgs& a, XQuantSmem s, int64_t m, int64_t base,
                                                 const float4 (&batch)[kXBatch]) {
  const int64_t k4 = a.k / 4;  // K is a multiple of 32 for the block formats
#pragma unroll
  for (int j = 0; j < kXBatch; j += 2) {
    const int64_t i = x_batch_index(base, j);  // even; groups: all or none valid
    const float e[8] = {batch[j].x,     batch[j].y,     batch[j].z,     batch[j].w,
                        batch[j + 1].x, batch[j + 1].y, batch[j + 1].z, batch[j + 1].w};
    float amax = 0.0f;
#pragma unroll
    for (int c = 0; c < 8; ++c) amax = fmaxf(amax, fabsf(e[c]));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    float half = ((e[0] + e[1]) + (e[2] + e[3])) + ((e[4] + e[5]) + (e[6] + e[7]));
    half += __shfl_xor_sync(0xffffffffu, half, 1);  // values 0-15 (threads 0-1) or 16-31 (2-3)
    const float other = __shfl_xor_sync(0xffffffffu, half, 2);
    // Every block quantizes all of x, so these instructions are paid once per block, and
    // the arithmetic, not the loads, is most of the staging. 127 / amax comes from the
    // fast reciprocal: a value lying within ~1e-5 of a rounding midpoint may take its other
    // neighbour, inside the d / 2 error that int8 x is allowed.
    const float d = amax * (1.0f / 127.0f);
    const float inv = amax > 0.0f ? __fdividef(127.0f, amax) : 0.0f;
    // Round to nearest (even) by adding 1.5 * 2^23: the integer lands in the low mantissa
    // bits, whose low byte is the int8 (|x * inv| < 127.5), so an FMA and byte permutes
    // replace the quarter-rate float-to-int conversions.
    uint32_t u[8];
#pragma unroll
    for (int c = 0; c < 8; ++c) u[c] = __float_as_uint(__fmaf_rn(e[c], inv, 12582912.0f));
    const uint2 packed = make_uint2(
        __byte_perm(__byte_perm(u[0], u[1], 0x0040), __byte_perm(u[2], u[3], 0x0040), 0x5410),
        __byte_perm(__byte_perm(u[4], u[5], 0x0040), __byte_perm(u[6], u[7], 0x0040), 0x5410));
    if (i < k4) {
      reinterpret_cast<uint2*>(s.q + m * a.k)[i / 2] = packed;
      if ((flat_thread() & 3) == 0) s.groups[m * (a.k / 32) + i / 8] = make_float4(d, half, other, 0.0f);
    }
  }
}

// Quantizes x (normalised when a norm is fused) to int8 per 32 values.
__device__ __forceinline__ void quantize_x_to_smem(const ops::MatmulArgs& a, const MvFusion& f, float* inv_rms,
                                                   float* scratch, XQuantSmem s) {
  for_each_x_batch(a, f, x_loads_vec(a, f), inv_rms, scratch,
                   [&](int64_t m, int64_t base, const float4 (&batch)[kXBatch]) { quantize_x_batch(a, s, m, base, batch); });
}

// ---- mv1 staging ----------------------------------------------------------------------------

// How an mv1 kernel stages x, from the arguments alone: chosen before the PDL wait, so
// that the checks are off the path from the wait to x's loads.
enum class Mv1XPath : uint8_t { unnormed_one_batch, deferred_norm, general };
__device__ __forceinline__ Mv1XPath mv1_x_path(const ops::MatmulArgs& a, const MvFusion& f) {
  if (mv1_x_unnormed_one_batch(a, f)) return Mv1XPath::unnormed_one_batch;
  return mv1_defers_norm(a, f) ? Mv1XPath::deferred_norm : Mv1XPath::general;
}

// A fused norm's weight (read-only for the pass) requested into L2 before the PDL wait
// (prefetches are allowed there), so that staging x finds it in L2 instead of DRAM.
__device__ __forceinline__ void mv1_prefetch_norm_weight(const ops::MatmulArgs& a, const MvFusion& f) {
  if (f.norm_weight == nullptr) return;
  const int lines = static_cast<int>((a.k * 4 + 127) / 128);
  for (int i = flat_thread(); i < lines; i += flat_threads()) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(f.norm_weight + 32 * i));
  }
}

// The norm weight's part of the prologue before the PDL wait (mv1_quant_body,
// mv1_dense_body): with a deferred norm (in_registers) the weight is loaded into w, so
// that only x's loads follow the wait; otherwise it is prefetched into L2. mv1_bulk_body
// only prefetches (chosen by `onepass bench` decode of the llama-1b models on the H100).
__device__ __forceinline__ void mv1_norm_weight_prologue(const ops::MatmulArgs& a, const MvFusion& f,
                                                         bool in_registers, float4 (&w)[kXBatch]) {
  if (in_registers) {
    load_norm_weight_batch(a, f, w);
  } else {
    mv1_prefetch_norm_weight(a, f);
  }
}

// mv1's x staging for the block formats: returns the factor of the products' sums (the
// deferred 1 / rms, or 1) after the barrier that publishes the int8 x.
// held_w (with have_held_w): a deferred norm's weight, loaded in the prologue by
// mv1_norm_weight_prologue.
__device__ __forceinline__ float mv1_quantize_x(const ops::MatmulArgs& a, const MvFusion& f, Mv1XPath path,
                                               float* inv_rms, float* scratch, XQuantSmem s,
                                               const float4 (&held_w)[kXBatch], bool have_held_w) {
  float4 batch[kXBatch];
  if (path == Mv1XPath::unnormed_one_batch) {
    load_x_one_batch(a, batch);
    quantize_x_batch(a, s, 0, 0, batch);
    __syncthreads();
    return 1.0f;
  }
  if (path == Mv1XPath::general) {
    quantize_x_to_smem(a, f, inv_rms, scratch, s);
    __syncthreads();
    return 1.0f;
  }
  if (have_held_w) {
    load_x_deferred_norm_held_weight(a, f, scratch, held_w, batch);
  } else {
    load_x_deferred_norm(a, f, true, scratch, batch);
  }
  quantize_x_batch(a, s, 0, 0, batch);
  __syncthreads();
  return deferred_inv_rms(a, f, scratch);
}
__device__ __forceinline__ float mv1_quantize_x(const ops::MatmulArgs& a, const MvFusion& f, Mv1XPath path,
                                               float* inv_rms, float* scratch, XQuantSmem s) {
  const float4 none[kXBatch] = {};
  return mv1_quantize_x(a, f, path, inv_rms, scratch, s, none, false);
}

// ---- x as f32 (dense weights) ---------------------------------------------------------------

__device__ __forceinline__ float staged_x(const ops::MatmulArgs& a, const MvFusion& f, const float* inv_rms,
                                          int64_t m, int64_t k) {
  const float v = a.x[m * a.x_stride + k];
  return f.norm_weight ? v * inv_rms[m] * f.norm_weight[k] : v;
}

// 1 / rms of each row of x for the dense kernels (any K).
__device__ __forceinline__ void rows_inv_rms_scalar(const ops::MatmulArgs& a, float eps, float* inv_rms, float* scratch) {
  for (int64_t m = 0; m < a.m; ++m) {
    float sum = 0.0f;
    for (int64_t k = flat_thread(); k < a.k; k += flat_threads()) {
      const float v = a.x[m * a.x_stride + k];
      sum += v * v;
    }
    sum = block_sum(sum, scratch);
    if (flat_thread() == 0) inv_rms[m] = rsqrtf(sum / static_cast<float>(a.k) + eps);
  }
  __syncthreads();
}

// x (normalised when a norm is fused) as f32 in shared memory for the dense kernels, [M, K];
// returns after the block's barrier.
__device__ __forceinline__ void stage_x_f32(const ops::MatmulArgs& a, const MvFusion& f, float* xs, float* inv_rms,
                                            float* scratch) {
  if (x_loads_vec(a, f)) {
    // Batched 16-byte loads: one L2 round trip per kXBatch * blockDim * 4 values.
    const int64_t k4 = a.k / 4;
    for_each_x_batch(a, f, true, inv_rms, scratch, [&](int64_t m, int64_t base, const float4 (&batch)[kXBatch]) {
#pragma unroll
      for (int j = 0; j < kXBatch; ++j) {
        const int64_t i = x_batch_index(base, j);
        if (i < k4) reinterpret_cast<float4*>(xs + m * a.k)[i] = batch[j];
      }
    });
  } else {
    if (f.norm_weight) rows_inv_rms_scalar(a, f.eps, inv_rms, scratch);
    for (int64_t i = flat_thread(); i < a.m * a.k; i += flat_threads()) {
      const int64_t m = i / a.k;
      xs[i] = staged_x(a, f, inv_rms, m, i - m * a.k);
    }
  }
  __syncthreads();
}

// mv1's x staging for dense weights: x as f32 in shared memory; returns the factor of the
// products' sums (the deferred 1 / rms, or 1) after the block's barrier. held_w, have_held_w:
// as in mv1_quantize_x.
__device__ __forceinline__ float mv1_stage_x_f32(const ops::MatmulArgs& a, const MvFusion& f, Mv1XPath path,
                                                float* xs, float* inv_rms, float* scratch,
                                                const float4 (&held_w)[kXBatch], bool have_held_w) {
  const bool unnormed = path == Mv1XPath::unnormed_one_batch;
  if (path == Mv1XPath::general) {
    stage_x_f32(a, f, xs, inv_rms, scratch);
    return 1.0f;
  }
  float4 batch[kXBatch];
  if (unnormed) {
    load_x_one_batch(a, batch);
  } else if (have_held_w) {
    load_x_deferred_norm_held_weight(a, f, scratch, held_w, batch);
  } else {
    load_x_deferred_norm(a, f, true, scratch, batch);
  }
#pragma unroll
  for (int j = 0; j < kXBatch; ++j) {
    const int64_t i = x_batch_index(0, j);
    if (i < a.k / 4) reinterpret_cast<float4*>(xs)[i] = batch[j];
  }
  __syncthreads();
  return unnormed ? 1.0f : deferred_inv_rms(a, f, scratch);
}

}  // namespace onepass::cuda
