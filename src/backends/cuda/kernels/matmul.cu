// CUDA kernels: mv_<W>_f32 (matrix-vector, few rows of x) and mm_<W>_f32 (matrix-matrix)
// for W = f32, f16, bf16 and the GGML block formats. out [M, N] = x [M, K] · wᵀ.
//
// mv, block formats: x is quantized to int8 per 32 values in shared memory once per
// block (scale amax/127, exact half sums kept for the formats' offsets; loads batched so
// that staging costs one or two L2 round trips), then each warp computes two output rows
// at a time with dp4a over 32-weight units (quant_dot.cuh), lanes striding over the units
// of the rows so that a warp reads contiguous weight bytes, two chunks of 32 units ahead.
// The grid is persistent and fully resident: blocks loop over row pairs, so x is staged
// once per block.
// mv, dense: the same with x kept in f32 and 16-byte weight loads when aligned.
// mm, f32 weights: tiles of 64 x 64 outputs, K in steps of 32 staged in shared memory, 4 x 4
// outputs per thread on the CUDA cores. mm for the other weight types runs on the tensor
// cores (matmul_tc.cu).
#include "common.cuh"
#include "onepass/ops/matmul.h"
#include "../matmul/launch.h"
#include "ptx.cuh"
#include "quant_dot.cuh"
#include "registration.h"
#include "rope_math.cuh"
#include "tile.cuh"

namespace onepass::cuda {
namespace {

constexpr int kMvWarps = 4;
constexpr int kMvRowsPerWarp = 2;
constexpr int kMvMaxRows = 8;  // rows of x

// ---- x staging ---------------------------------------------------------------------------

// What the fusion pass folded into a matrix-vector product (see FusedMatvecArgs).
struct MvFusion {
  const float* norm_weight = nullptr;
  float eps = 0.0f;
  bool silu = false;
  const float* residual = nullptr;
  int64_t residual_stride = 0;
  const ops::MatvecRope* rope = nullptr;  // one token's Q/K/V: RoPE and KV-cache writes
  bool residual_before_wait = false;      // FusedMatvecArgs::residual_before_wait
};

__device__ __forceinline__ float4 load4(const float* p, bool vec) {
  if (vec) return *reinterpret_cast<const float4*>(p);
  return make_float4(p[0], p[1], p[2], p[3]);
}

// x staging reads kXBatch float4 per thread before using any of them, so a block pays one
// L2 round trip per kXBatch * blockDim * 4 values (a loop with a shuffle per value
// serialised one round trip per pass: ~10 us for K = 8192).
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
// threads): then a fused norm takes its 1 / rms from the same registers (load_x_normed).
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
// loaded together and 1 / rms is reduced from those registers, saving rows_inv_rms's extra
// pass over x (an L2 round trip). Same sums in the same order as rows_inv_rms. Called by
// every thread (block_sum synchronises).
__device__ __forceinline__ void load_x_normed(const ops::MatmulArgs& a, const MvFusion& f, int64_t m, bool vec,
                                              float* scratch, float4 (&e)[kXBatch]) {
  float4 w[kXBatch];
  const float sum = block_sum(load_x_and_norm_weight(a, f, m, vec, e, w), scratch);
  const float scale = rsqrtf(sum / static_cast<float>(a.k) + f.eps);
#pragma unroll
  for (int j = 0; j < kXBatch; ++j) {
    e[j] = make_float4(e[j].x * scale * w[j].x, e[j].y * scale * w[j].y, e[j].z * scale * w[j].z,
                       e[j].w * scale * w[j].w);
  }
}

// The deferred-norm staging of the mv1 kernels (one row of x in one batch): e = x * w,
// without 1 / rms, and this warp's sum of squares of x written to scratch[warp] for
// deferred_inv_rms to read after the block's next barrier. RMS-norm's 1 / rms is one
// factor of the whole row, so the products can use x * w and scale their sums by it
// afterwards: staging then needs no reduction (two barriers and a dependent step) before
// x is quantized or stored. times_norm_weight_sum does that from x (e), w and this
// thread's sum of squares; load_x_times_norm_weight loads x and w first.
__device__ __forceinline__ void times_norm_weight_sum(float squares, float* scratch, float4 (&e)[kXBatch],
                                                      const float4 (&w)[kXBatch]) {
  const float sum = warp_sum(squares);
  if ((flat_thread() & 31) == 0) scratch[flat_thread() >> 5] = sum;
#pragma unroll
  for (int j = 0; j < kXBatch; ++j) {
    e[j] = make_float4(e[j].x * w[j].x, e[j].y * w[j].y, e[j].z * w[j].z, e[j].w * w[j].w);
  }
}
__device__ __forceinline__ void load_x_times_norm_weight(const ops::MatmulArgs& a, const MvFusion& f, bool vec,
                                                         float* scratch, float4 (&e)[kXBatch]) {
  float4 w[kXBatch];
  times_norm_weight_sum(load_x_and_norm_weight(a, f, 0, vec, e, w), scratch, e, w);
}

// The weight's kXBatch float4 of this thread (load_x_and_norm_weight's layout), for
// load_x_times_early_norm_weight: loaded before the PDL wait (read-only for the pass).
__device__ __forceinline__ void load_norm_weight_batch(const ops::MatmulArgs& a, const MvFusion& f,
                                                       float4 (&w)[kXBatch]) {
  const int64_t k4 = a.k / 4;
#pragma unroll
  for (int j = 0; j < kXBatch; ++j) {
    const int64_t i = x_batch_index(0, j);
    w[j] = i < k4 ? __ldg(reinterpret_cast<const float4*>(f.norm_weight) + i) : make_float4(1.f, 1.f, 1.f, 1.f);
  }
}

// load_x_times_norm_weight with the weight already in registers (load_norm_weight_batch,
// before the PDL wait: mv1_norm_weight_before_wait): only x's loads after the wait.
__device__ __forceinline__ void load_x_times_early_norm_weight(const ops::MatmulArgs& a, const MvFusion& f,
                                                               float* scratch, const float4 (&w)[kXBatch],
                                                               float4 (&e)[kXBatch]) {
  const int64_t k4 = a.k / 4;
#pragma unroll
  for (int j = 0; j < kXBatch; ++j) {
    const int64_t i = x_batch_index(0, j);
    e[j] = i < k4 ? reinterpret_cast<const float4*>(a.x)[i] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  times_norm_weight_sum(sum_of_squares(e), scratch, e, w);
}

// 1 / rms from the warps' sums that load_x_times_norm_weight left in scratch (16-byte
// aligned; after a barrier). Every thread reads all of them (broadcast 16-byte loads, all
// in flight at once) and adds them in a fixed tree, so the value is the same in every
// thread and every run; this runs between the staging barrier and the first dot product,
// where block_sum's second half (a load, then five dependent shuffles) was on every warp's
// path.
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
// norm checks between the PDL wait and the first sums. Through for_each_x_batch, the H200
// decode after 16 tokens measured 2241 / 2000 / 1615 / 1245 tok/s against 2298 / 2031 /
// 1633 / 1251 (smollm2 / llama-1b q4_0 / q8_0 / f16): the staging's instructions are on
// every product's critical path. (Also measured, not kept: skipping the arithmetic of
// batch elements past K, -0.5%; 32-bit batch indices, -0.3%; the first pair's residual or
// RoPE inputs loaded right after x's loads, -0.7% / -1% on q4_0 / f16.)
__device__ __forceinline__ bool mv1_x_plain_one_batch(const ops::MatmulArgs& a, const MvFusion& f) {
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
        load_x_normed(a, f, m, vec, scratch, batch);
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
    // Every block quantizes all of x, so these instructions are paid once per block
    // (measured: the arithmetic, not the loads, is most of the staging). 127 / amax comes
    // from the fast reciprocal: a value lying within ~1e-5 of a rounding midpoint may take
    // its other neighbour, inside the d / 2 error that int8 x is allowed.
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

// How an mv1 kernel stages x, from the arguments alone: chosen before the PDL wait, so
// that the checks are off the path from the wait to x's loads (H200 decode after 16
// tokens: 2358 / 2061 / 1648 / 1269 -> 2386 / 2072 / 1658 / 1275 tok/s, smollm2 / llama-1b
// q4_0 / q8_0 / f16).
enum class Mv1XPath : uint8_t { plain, deferred_norm, general };
__device__ __forceinline__ Mv1XPath mv1_x_path(const ops::MatmulArgs& a, const MvFusion& f) {
  if (mv1_x_plain_one_batch(a, f)) return Mv1XPath::plain;
  return mv1_defers_norm(a, f) ? Mv1XPath::deferred_norm : Mv1XPath::general;
}

// mv1's x staging for the block formats: returns the factor of the products' sums (the
// deferred 1 / rms, or 1) after the barrier that publishes the int8 x.
// early_w (with have_early_w): a deferred norm's weight, loaded before the PDL wait by
// load_norm_weight_batch.
__device__ __forceinline__ float mv1_quantize_x(const ops::MatmulArgs& a, const MvFusion& f, Mv1XPath path,
                                               float* inv_rms, float* scratch, XQuantSmem s,
                                               const float4 (&early_w)[kXBatch], bool have_early_w) {
  float4 batch[kXBatch];
  if (path == Mv1XPath::plain) {
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
  if (have_early_w) {
    load_x_times_early_norm_weight(a, f, scratch, early_w, batch);
  } else {
    load_x_times_norm_weight(a, f, true, scratch, batch);
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

// The rows a warp works on in one iteration: two consecutive outputs, or with SiLU one
// output from its gate row j and up row j + n.
struct MvRows {
  int64_t first;   // first output of this warp
  int64_t step;    // outputs between a warp's iterations
  int64_t outputs; // per iteration: 2, or 1 with SiLU
};

__device__ __forceinline__ MvRows mv_rows(const ops::MatmulArgs& a, const MvFusion& f) {
  const int warp = threadIdx.x >> 5;
  const int64_t per = f.silu ? 1 : kMvRowsPerWarp;
  return {(int64_t{blockIdx.x} * kMvWarps + warp) * per, int64_t{gridDim.x} * kMvWarps * per, per};
}

template <DType C>
__device__ __forceinline__ void store_cache_pair(void* cache, int64_t at, float y0, float y1) {
  auto* c = static_cast<typename Elem<C>::storage*>(cache) + at;
  c[0] = Elem<C>::store(y0);
  c[1] = Elem<C>::store(y1);
}

// The token's position for the RoPE epilogue of a pair (0 without RoPE), read from memory
// once per pair; a warp's first pair takes it from its shared slot (mv1_first_pair).
__device__ __forceinline__ int32_t rope_position(const MvFusion& f) { return f.rope ? *f.rope->positions : 0; }

// The epilogue of a one-token Q/K/V product with rope_kv_write folded in (MatvecRope):
// outputs j0 and j0 + 1 (j0 even) are one RoPE pair of a q or k head, or two values of a
// v head. out ends as the unfused sequence leaves it (q rotated in place, k and v as
// computed); rotated k and v go to the caches at the token's position. The pair's head
// and offset come from one 32-bit division (j0 < n fits; the 64-bit remainders and
// quotients this took before are ~100-instruction subroutines each, on every warp's last
// store), and its cos and sin are computed here, after the warp's sums.
//
// With RopeCosSin::load (r.cos_sin_in) the pair's cos and sin are the stored ones: from
// `loaded` (the warp's first pair, copied into its slot) or from memory; no powf or
// sincosf runs. With RopeCosSin::store (r.cos_sin_out) the first q head's pairs store
// theirs.
__device__ __forceinline__ void mv_store_rope(const ops::MatmulArgs& a, const ops::MatvecRope& r, int64_t j0, float v0,
                                              float v1, int32_t position, const float2* loaded = nullptr) {
  const uint32_t head_dim = static_cast<uint32_t>(r.head_dim);
  const uint32_t index = static_cast<uint32_t>(j0) / head_dim;  // head of [q | k | v]
  const uint32_t d = static_cast<uint32_t>(j0) - index * head_dim;
  const uint32_t n_head = static_cast<uint32_t>(r.n_head);
  const uint32_t kv_end = n_head + static_cast<uint32_t>(r.n_kv_head);  // first v head
  float y0 = v0, y1 = v1;
  if (index < kv_end && d < static_cast<uint32_t>(r.rotary_dims)) {
    float2 cs;
    if (r.cos_sin_in != nullptr) {
      cs = loaded != nullptr ? *loaded : make_float2(r.cos_sin_in[d], r.cos_sin_in[d + 1]);
    } else {
      cs = rope_cos_sin(position, d / 2, r.rotary_dims, r.theta, r.freq_scale, r.freq_factors);
      if (r.cos_sin_out != nullptr && index == 0) {
        r.cos_sin_out[d] = cs.x;
        r.cos_sin_out[d + 1] = cs.y;
      }
    }
    rope_apply(v0, v1, cs, y0, y1);
  }
  const bool is_q = index < n_head;
  a.out[j0] = is_q ? y0 : v0;
  a.out[j0 + 1] = is_q ? y1 : v1;
  if (is_q || position < 0 || position >= r.ctx) return;  // device data: never write outside
  const bool is_k = index < kv_end;
  const int64_t head = index - (is_k ? n_head : kv_end);
  void* cache = is_k ? r.k_cache : r.v_cache;
  const int64_t at = (head * r.ctx + position) * r.head_dim + d;
  if (r.cache_type == DType::f16) {
    store_cache_pair<DType::f16>(cache, at, y0, y1);
  } else if (r.cache_type == DType::bf16) {
    store_cache_pair<DType::bf16>(cache, at, y0, y1);
  } else {
    store_cache_pair<DType::f32>(cache, at, y0, y1);
  }
}

// The fused epilogue of row m of x, run by one lane with the warp's two sums: out[m, j]
// (+ residual), or silu(gate) * up, or RoPE and the KV-cache writes.
// have_pair: residual_pair holds the pair's residual. rope_cs: with RoPE, the pair's
// stored (cos, sin) where the caller has them (mv1_finish_rows' first pair), else null.
__device__ __forceinline__ void mv_store_row(const ops::MatmulArgs& a, const MvFusion& f, int64_t m, int64_t j0,
                                             float v0, float v1, int32_t position, float2 residual_pair = {},
                                             bool have_pair = false, const float2* rope_cs = nullptr) {
  if (f.silu) {
    if (j0 >= a.n) return;
    float v = v0 / (1.0f + __expf(-v0)) * v1;
    if (f.residual) v += have_pair ? residual_pair.x : f.residual[m * f.residual_stride + j0];
    a.out[m * a.out_stride + j0] = v;
  } else if (f.rope) {
    mv_store_rope(a, *f.rope, j0, v0, v1, position, rope_cs);
  } else {
#pragma unroll
    for (int r = 0; r < kMvRowsPerWarp; ++r) {
      const int64_t j = j0 + r;
      if (j >= a.n) continue;
      float v = r == 0 ? v0 : v1;
      if (f.residual) v += have_pair ? (r == 0 ? residual_pair.x : residual_pair.y) : f.residual[m * f.residual_stride + j];
      a.out[m * a.out_stride + j] = v;
    }
  }
}

// Warp sums and the fused epilogue of every row of x.
__device__ __forceinline__ void mv_store(const ops::MatmulArgs& a, const MvFusion& f, int64_t j0,
                                         float (&acc)[kMvMaxRows][kMvRowsPerWarp], int32_t position) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int m = 0; m < kMvMaxRows; ++m) {
    if (m >= a.m) break;
    const float v0 = warp_sum(acc[m][0]);
    const float v1 = warp_sum(acc[m][1]);
    if (lane == 0) mv_store_row(a, f, m, j0, v0, v1, position);
  }
}

// Weight row of the r-th row a warp reads for output j0 (clamped: a missing second row
// reads the first again and its result is dropped, so the loop has no branches).
__device__ __forceinline__ int64_t mv_weight_row(const ops::MatmulArgs& a, const MvFusion& f, int64_t j0, int r) {
  if (f.silu) return j0 + (r == 0 ? 0 : a.n);
  return j0 + r < a.n ? j0 + r : j0;
}

// Words of 16 bytes a warp stages per row and chunk: a chunk is 32 units (one per lane),
// whose bytes are contiguous in the row; one more word for an unaligned start.
template <DType W>
constexpr int mv_stage_words() {
  using F = quantdot::Format<W>;
  constexpr int bytes = 32 / F::kUnits * F::kBlockBytes;
  return (bytes + 15) / 16 + 1;
}

template <DType W>
__device__ __forceinline__ void mv_quant_body(const ops::MatmulArgs& a, const MvFusion& f) {
  using F = quantdot::Format<W>;
  constexpr int kWords = mv_stage_words<W>();
  constexpr int kLoads = (kWords + 31) / 32;  // 16-byte loads per lane and row
  constexpr int kChunkBytes = 32 / F::kUnits * F::kBlockBytes;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float inv_rms[kMvMaxRows];
  __shared__ __align__(16) float scratch[32];
  // Each warp's staging area: kLoads * 32 words per row.
  __shared__ uint4 stage[kMvWarps][kMvRowsPerWarp][kLoads * 32];
  const int64_t xq_bytes = (a.m * a.k + 15) / 16 * 16;
  XQuantSmem xs{reinterpret_cast<int8_t*>(smem), reinterpret_cast<float4*>(smem + xq_bytes)};
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t units = a.k / 32;
  const int64_t chunks = (units + 31) / 32;
  const auto* w = static_cast<const uint8_t*>(a.w);
  const MvRows rows_of = mv_rows(a, f);
  const uint8_t* rows[kMvRowsPerWarp];
  auto set_rows = [&](int64_t j0) {
#pragma unroll
    for (int r = 0; r < kMvRowsPerWarp; ++r) rows[r] = w + mv_weight_row(a, f, j0, r) * a.w_row_bytes;
  };
  // Coalesced 16-byte loads of a chunk's bytes (from the 16-byte boundary at or before
  // its start; allocations are padded so the last row's tail stays inside).
  // Two chunks in flight while one is computed: a row of K = 8192 (8 chunks) otherwise
  // pays one load latency per chunk.
  using Chunk = uint4[kMvRowsPerWarp][kLoads];
  Chunk ring0, ring1;
  auto load_chunk = [&](int64_t c, Chunk& into) {
#pragma unroll
    for (int r = 0; r < kMvRowsPerWarp; ++r) {
      const uintptr_t begin = reinterpret_cast<uintptr_t>(rows[r]) + c * kChunkBytes;
      const int64_t bytes = min(int64_t{kChunkBytes}, a.w_row_bytes - c * kChunkBytes);
      const uintptr_t aligned = begin & ~uintptr_t{15};
      const int words = static_cast<int>((begin + bytes - aligned + 15) / 16);
#pragma unroll
      for (int i = 0; i < kLoads; ++i) {
        const int word = lane + 32 * i;
        into[r][i] = word < words ? reinterpret_cast<const uint4*>(aligned)[word] : make_uint4(0, 0, 0, 0);
      }
    }
  };
  auto load_first_chunks = [&](int64_t j0) {
    set_rows(j0);
    load_chunk(0, ring0);
    if (chunks > 1) load_chunk(1, ring1);
  };
  // Weights are read-only for the whole pass: the first chunks of this warp's first rows
  // are loaded into registers before waiting for the predecessor, so the weight latency
  // overlaps its tail and the x staging below. (Pulling the rest of those rows into L2
  // as well measured 2-4% slower on the llama-1b block formats: the prefetches compete
  // with the predecessor's own weight stream.)
  if (rows_of.first < a.n) load_first_chunks(rows_of.first);
  pdl_wait();
  quantize_x_to_smem(a, f, inv_rms, scratch, xs);
  __syncthreads();

  for (int64_t j0 = rows_of.first; j0 < a.n; j0 += rows_of.step) {
    const int32_t position = rope_position(f);
    float acc[kMvMaxRows][kMvRowsPerWarp];
#pragma unroll
    for (int m = 0; m < kMvMaxRows; ++m) {
#pragma unroll
      for (int r = 0; r < kMvRowsPerWarp; ++r) acc[m][r] = 0.0f;
    }
    auto step = [&](int64_t c, Chunk& held) {
      __syncwarp();  // every lane is done with the previous chunk's stage
#pragma unroll
      for (int r = 0; r < kMvRowsPerWarp; ++r) {
#pragma unroll
        for (int i = 0; i < kLoads; ++i) stage[warp][r][lane + 32 * i] = held[r][i];
      }
      __syncwarp();
      if (c + 2 < chunks) load_chunk(c + 2, held);  // in flight while this chunk is computed
      const int64_t u = c * 32 + lane;
      if (u < units) {
        const int local_block = lane / F::kUnits;
        const int sub = lane - local_block * F::kUnits;
#pragma unroll
        for (int m = 0; m < kMvMaxRows; ++m) {
          if (m >= a.m) break;
          const float4 g = xs.groups[m * units + u];
          const auto x = quantdot::XGroup::load(xs.q + (m * units + u) * 32, g.x, g.y, g.z);
#pragma unroll
          for (int r = 0; r < kMvRowsPerWarp; ++r) {
            const uintptr_t begin = reinterpret_cast<uintptr_t>(rows[r]) + c * kChunkBytes;
            const auto* staged = reinterpret_cast<const uint8_t*>(&stage[warp][r][0]) + (begin & 15) +
                                 local_block * F::kBlockBytes;
            acc[m][r] += F::unit_dot(staged, sub, x);
          }
        }
      }
    };
    for (int64_t c = 0; c < chunks; c += 2) {
      step(c, ring0);
      if (c + 1 < chunks) step(c + 1, ring1);
    }
    // The next rows' first chunks are in flight during this iteration's sums and stores.
    if (j0 + rows_of.step < a.n) load_first_chunks(j0 + rows_of.step);
    mv_store(a, f, j0, acc, position);
  }
}

// ---- one row of x (decode) ----------------------------------------------------------------

// ---- one row of x (decode): mv1 ----------------------------------------------------------
//
// Block shape of the mv1 kernels: blockDim.x = 32 * S warps, each its own stream of row
// pairs ("slots"), and blockDim.y = P parts of K: the warps (slot, 0..P-1) take the same
// row pairs and consecutive ranges of the rows' chunks, and part 0 adds the others' sums
// (ops::cuda_mv1_dims picks S and P; P > 1 needs S < 16: one named barrier per slot).
struct Mv1Shape {
  int lane, slot, slots, part, parts;
  int stage_warp;  // the warp's index in the block: part * slots + slot
};

__device__ __forceinline__ Mv1Shape mv1_shape() {
  Mv1Shape s;
  s.lane = static_cast<int>(threadIdx.x & 31);
  s.slot = static_cast<int>(threadIdx.x >> 5);
  s.slots = static_cast<int>(blockDim.x >> 5);
  s.part = static_cast<int>(threadIdx.y);
  s.parts = static_cast<int>(blockDim.y);
  s.stage_warp = s.part * s.slots + s.slot;
  return s;
}

// A warp's row stream in the one-row kernels: its first output j0 (a row pair, or one
// output of a gate/up pair with SiLU fused), then every `step` outputs below n.
struct Mv1Rows {
  int n, first, step;
};
__device__ __forceinline__ Mv1Rows mv1_rows(const ops::MatmulArgs& a, const MvFusion& f, const Mv1Shape& s) {
  const int per = f.silu ? 1 : kMvRowsPerWarp;
  return {static_cast<int>(a.n), (static_cast<int>(blockIdx.x) * s.slots + s.slot) * per,
          static_cast<int>(gridDim.x) * s.slots * per};
}

// The chunks [first, first + count) of every row that part `part` of `parts` reads.
struct Mv1Chunks {
  int first, count;
};
__device__ __forceinline__ Mv1Chunks mv1_chunks(int all_chunks, const Mv1Shape& s) {
  const int first = s.part * all_chunks / s.parts;
  return {first, (s.part + 1) * all_chunks / s.parts - first};
}

constexpr int kMv1MaxSlots = 16;  // 512 threads
constexpr int kMv1MaxParts = static_cast<int>(kCudaMv1MaxParts);

// Split K: parts 1..P-1 hand their row pair's two sums (held by lane `owner`) to part 0
// of the same slot, whose lane `owner` adds them in part order. Slots alternate with the
// pair's parity: a part writes a slot again only after the next barrier, which part 0
// reaches after reading it.
using Mv1PartSums = float2[kMv1MaxSlots][2][kMv1MaxParts - 1];
__device__ __forceinline__ void mv1_add_parts(Mv1PartSums& sums, const Mv1Shape& s, int& parity, int owner,
                                              float& v0, float& v1) {
  if (s.part > 0 && s.lane == owner) sums[s.slot][parity][s.part - 1] = make_float2(v0, v1);
  asm volatile("bar.sync %0, %1;" ::"r"(1 + s.slot), "r"(32 * s.parts) : "memory");  // this slot's warps
  if (s.part == 0 && s.lane == owner) {
    for (int p = 1; p < s.parts; ++p) {
      const float2 other = sums[s.slot][parity][p - 1];
      v0 += other.x;
      v1 += other.y;
    }
  }
  parity ^= 1;
}

// A fused norm's weight (read-only for the pass) is requested into L2 before the PDL wait
// (prefetches are allowed there), so staging x finds it in L2 instead of DRAM (0.5-1.3%
// on the reference models, H200).
__device__ __forceinline__ void mv1_prefetch_norm_weight(const ops::MatmulArgs& a, const MvFusion& f) {
  if (f.norm_weight == nullptr) return;
  const int lines = static_cast<int>((a.k * 4 + 127) / 128);
  for (int i = flat_thread(); i < lines; i += flat_threads()) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(f.norm_weight + 32 * i));
  }
}

// Before the PDL wait in mv1_quant_body and mv1_dense_body: when the staging defers the
// norm (early), the norm's weight (read-only for the pass) into w, in registers, so that
// only x's loads follow the wait; otherwise the weight's L2 prefetch. H100 short decode:
// smollm2 2,612-2,615 -> 2,679-2,681 tok/s (mv1_quant_body), llama-1b f16 1,049 -> 1,056
// (mv1_dense_body); mv1_bulk_body measured 0.5-1% slower with it (llama-1b q4_0 / q8_0)
// and keeps the prefetch. The timeline build, whose stamps change the code around the
// wait, showed the same staging time with and without it, so where the time is saved is
// not established. Copying the weight into shared memory by cp.async before the wait
// instead measured 12% slower (smollm2): in the timeline build the gate/up product's wait
// returned 1.60 us after its predecessor's last block ended, against 0.45 us.
__device__ __forceinline__ void mv1_norm_weight_before_wait(const ops::MatmulArgs& a, const MvFusion& f, bool early,
                                                            float4 (&w)[kXBatch]) {
  if (early) {
    load_norm_weight_batch(a, f, w);
  } else {
    mv1_prefetch_norm_weight(a, f);
  }
}

// The residual of a warp's first row pair (lane 0 of part 0 stores it), requested once x
// is staged, so that its L2 latency overlaps the sums instead of lengthening the first
// store. (Requested right after the PDL wait instead, in front of the x loads, it measured
// 1-3% slower.)
__device__ __forceinline__ float2 mv1_first_residual(const ops::MatmulArgs& a, const MvFusion& f, int first,
                                                     bool storer) {
  float2 r = make_float2(0.0f, 0.0f);
  if (f.residual != nullptr && storer && first < a.n) {
    r.x = f.residual[first];
    if (!f.silu && first + 1 < a.n) r.y = f.residual[first + 1];
  }
  return r;
}

// Rows a warp finished during one pass over its ring of weight items (mv1_quant_body,
// mv1_dense_body): lane i keeps the pass's i-th row's two sums (warp_sum leaves them in
// every lane) and stores that row, so the epilogue is compiled once after the pass
// instead of once per unrolled ring slot. In each slot it (RoPE's powf / sincosf, every
// fusion path, the parts' barrier) was most of the kernel: mv1_<W>_f32_fused shrank from
// 6488 / 6480 / 5648 / 6000 to 4352 / 4328 / 4080 / 3896 instructions (q4_1 / q4_0 / q8_0 /
// f16), and H200 decode after 16 tokens went 2237 / 1973 / 1623 / 1244 -> 2243 / 2000 /
// 1616 / 1245 tok/s (smollm2 / llama-1b q4_0 / q8_0 / f16). A pass's stores wait for its
// last item, so the last row breaks out of the pass at once (smollm2's warps have one row
// each: without that, -1%).
struct Mv1Done {
  float v0 = 0.0f, v1 = 0.0f;
  int count = 0;
  __device__ __forceinline__ void add(int lane, float s0, float s1) {
    if (lane == count) {
      v0 = s0;
      v1 = s1;
    }
    ++count;
  }
};

// What the epilogue of a warp's first row pair reads from memory (its residual, or for a
// Q/K/V product with RoPE folded in the token's position) is copied by cp.async into the
// warp's shared slot once x is staged (by the storer, lane 0 of part 0), so that the copy
// overlaps the sums and no register holds it meanwhile; the storer waits for it at its
// first store, where RoPE's powf and sincosf run. Before, the pair was loaded (and its
// cos / sin computed) into registers after the staging, and ptxas kept them in local
// memory: the store there waited for the residual's L2 round trip, and powf and sincosf
// ran there, all before the warp's first dot product (timeline, smollm2 q4_1 on an H200:
// 0.42 us from x staged to the first weight stage in the O and down products, 0.96 us in
// Q/K/V). H200 decode after 16 tokens, side by side (smollm2 / llama-1b q4_0 / q8_0 / f16):
// 2425 / 2104 / 1673 / 1277 -> 2471 / 2104 / 1713 / 1275. RoPE's inverse frequency taken
// before the PDL wait instead measured 2497 / 2088 / 1691 / 1227: a product after one that
// fills the SMs (llama-1b's down) cannot start early, so its pre-wait work is on the chain.
// .x, .y: the residual pair, or RoPE's stored (cos, sin) (RopeCosSin::load); .z: the
// token's position (int bits) with RoPE.
using Mv1FirstSlots = float4[kMv1MaxSlots];

// The warp's first output, computed again from %ctaid.x (volatile: not merged with the
// kernel's first reading), so that no register holds it through the x staging (ptxas kept
// it in local memory).
__device__ __forceinline__ int mv1_first_output(const MvFusion& f, const Mv1Shape& sh) {
  uint32_t block;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(block));
  return (static_cast<int>(block) * sh.slots + sh.slot) * (f.silu ? 1 : kMvRowsPerWarp);
}

// The storer's copies of its first pair's RoPE inputs: the token's position into slot.z
// and, with the angles loaded (RopeCosSin::load), the pair's stored (cos, sin) into .x, .y,
// so that neither powf and sincosf nor a load lies between the warp's sums and its stores.
__device__ __forceinline__ void mv1_rope_inputs_copy(const ops::MatmulArgs& a, const MvFusion& f, int first,
                                                     float4& slot) {
  const ops::MatvecRope& r = *f.rope;
  const uint32_t at = ptx::smem_addr(&slot);
  ptx::cp_async4(at + 8, r.positions);
  const uint32_t d = static_cast<uint32_t>(first) % static_cast<uint32_t>(r.head_dim);
  if (r.cos_sin_in != nullptr && d < static_cast<uint32_t>(r.rotary_dims)) {  // v pairs are never rotated
    ptx::cp_async4(at, r.cos_sin_in + d);
    ptx::cp_async4(at + 4, r.cos_sin_in + d + 1);
  }
}

// The storer's copy of its first pair's residual into slot.x, .y.
__device__ __forceinline__ void mv1_residual_copy(const ops::MatmulArgs& a, const MvFusion& f, int first,
                                                  float4& slot) {
  const uint32_t at = ptx::smem_addr(&slot);
  ptx::cp_async4(at, f.residual + first);
  if (!f.silu && first + 1 < a.n) ptx::cp_async4(at + 4, f.residual + first + 1);
}

// Before the PDL wait, with RoPE's angles loaded (the position and the angles are then
// early reads of the dispatch): mv1_rope_inputs_copy. The decode step's layers after the
// first load their angles (RopeCosSin): H100 decode after 16 tokens, side by side,
// smollm2 2,712-2,713 -> 2,795-2,798 tok/s (+3.1%), llama-1b q4_0 / q8_0 / f16 unchanged
// (2,048 / 1,624 / 1,053). In mv1_quant_body only (smollm2's products, whose blocks start
// well before their wait): the bulk and dense bodies copy after the staging, as with the
// copies before the wait there too llama-1b measured 2,008 / 1,586 / 1,031 (its products
// start when the down product that fills the SMs ends).
//
// Likewise the first pair's residual when it is an early read (residual_before_wait: the
// product's residual was written two or three dispatches before it in a decode step):
// smollm2 2,809-2,813 -> 2,848-2,849 (+1.3%), llama-1b unchanged.
__device__ __forceinline__ bool mv1_first_pair_early(const MvFusion& f) {
  return f.rope != nullptr ? f.rope->cos_sin_in != nullptr : f.residual != nullptr && f.residual_before_wait;
}
__device__ __forceinline__ void mv1_first_pair_request_before_wait(const ops::MatmulArgs& a, const MvFusion& f,
                                                                   const Mv1Shape& sh, float4& slot) {
  if (!mv1_first_pair_early(f) || sh.lane != 0 || sh.part != 0) return;
  const int first = mv1_first_output(f, sh);
  if (first >= a.n) return;
  if (f.rope != nullptr) {
    mv1_rope_inputs_copy(a, f, first, slot);
  } else {
    mv1_residual_copy(a, f, first, slot);
  }
  ptx::cp_async_commit();
}

// The storer's copy request, after x is staged: its RoPE inputs, or slot.x, .y = the
// residual pair. kRequested: the body calls mv1_first_pair_request_before_wait, so what
// that copies is there already, and with RoPE otherwise only the position is left.
template <bool kRequested>
__device__ __forceinline__ void mv1_first_pair_request(const ops::MatmulArgs& a, const MvFusion& f,
                                                       const Mv1Shape& sh, float4& slot) {
  if (sh.lane != 0 || sh.part != 0 || (f.rope == nullptr && f.residual == nullptr)) return;
  if (kRequested && mv1_first_pair_early(f)) return;
  const int first = mv1_first_output(f, sh);
  if (first >= a.n) return;
  if (f.rope != nullptr) {
    if constexpr (kRequested) {
      ptx::cp_async4(ptx::smem_addr(&slot) + 8, f.rope->positions);
    } else {
      mv1_rope_inputs_copy(a, f, first, slot);
    }
  } else {
    mv1_residual_copy(a, f, first, slot);
  }
  ptx::cp_async_commit();
}

// At the storer's first store: the warp's slot, once its copies have landed.
__device__ __forceinline__ float4 mv1_first_pair(const float4& slot) {
  ptx::cp_async_wait<0>();
  return slot;
}

// The finished rows: lane i of part 0 stores the pass's i-th row (the warp's outputs
// next - count * step ... next - step, in order), after the other parts' sums are added
// (split K: one barrier per row, as the parts' rows may finish in different passes).
// first_slot: the warp's Mv1FirstSlots entry, read by lane 0 in the first pass.
__device__ __forceinline__ void mv1_finish_rows(const ops::MatmulArgs& a, const MvFusion& f, const Mv1Shape& sh,
                                                Mv1Done& done, Mv1PartSums& part_sums, int& parity, int next,
                                                int step, float x_scale, bool& first_pass, const float4& first_slot) {
  if (sh.parts > 1) {
#pragma unroll 1
    for (int i = 0; i < done.count; ++i) mv1_add_parts(part_sums, sh, parity, i, done.v0, done.v1);
  }
  if (sh.part == 0 && sh.lane < done.count) {
    const int j0 = next - (done.count - sh.lane) * step;
    const bool is_first = first_pass && sh.lane == 0;
    const float4 slot = is_first ? mv1_first_pair(first_slot) : make_float4(1.0f, 0.0f, 0.0f, 0.0f);
    const float2 pair = make_float2(slot.x, slot.y);  // the residual pair, or the stored (cos, sin)
    mv_store_row(a, f, 0, j0, done.v0 * x_scale, done.v1 * x_scale,
                 is_first && f.rope ? __float_as_int(slot.z) : rope_position(f), pair, is_first,
                 is_first ? reinterpret_cast<const float2*>(&first_slot) : nullptr);
  }
  if (done.count > 0) first_pass = false;
  done.count = 0;
}

// Weight items (chunks of a warp's row pair) in flight per warp in mv1_quant_body. The
// one-unit formats (q4_0, q4_1, q8_0) take this body only for rows shorter than
// kCudaMv1BulkMinK or not in whole 16-byte words (the others take mv1_bulk_body), and
// short rows give a warp few items (smollm2: one row pair of one or two chunks): two in
// flight cover them, and the ring's code unrolled four times was instruction-cache
// footprint on every launch (H100 short decode, smollm2 q4_1: 2,420-2,422 -> 2,441-2,442
// tok/s; one item in flight: 2,371, the down product's second chunk then loads after the
// wait). The k-quants keep four items when a chunk of both rows takes at most 16
// registers per lane, else three.
template <DType W>
constexpr int mv1_ring_depth() {
  if constexpr (W == DType::q4_0 || W == DType::q4_1 || W == DType::q8_0) return 2;
  return (mv_stage_words<W>() + 31) / 32 <= 2 ? 4 : 3;
}

// mv_quant_body for one row of x, the decode step's shape. A warp's work is one flat
// stream of items (row pair, chunk) and mv1_ring_depth items are always in flight: the
// next row pair's weights are requested while this one is computed, where the general
// body waits for them at every row pair (with all warps in step, the whole grid then
// alternates between loading and computing). Indexing is 32-bit within a row; weights are
// read through the non-coherent path (read-only for the pass). Dynamic shared memory:
// x quantized (cuda_mv_shared_bytes), then each warp's staging area for its chunks.
template <DType W>
__device__ __forceinline__ void mv1_quant_body(const ops::MatmulArgs& a, const MvFusion& f) {
  using F = quantdot::Format<W>;
  constexpr int kWords = mv_stage_words<W>();
  constexpr int kLoads = (kWords + 31) / 32;
  constexpr int kChunkBytes = 32 / F::kUnits * F::kBlockBytes;
  constexpr int kDepth = mv1_ring_depth<W>();
  static_assert(kDepth <= 32, "a lane per row finished in a pass (Mv1Done)");
  using Stage = uint4[kMvRowsPerWarp][kLoads * 32];
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float inv_rms[kMvMaxRows];
  __shared__ __align__(16) float scratch[32];
  __shared__ Mv1PartSums part_sums;
  __shared__ Mv1FirstSlots first_slots;
  const int64_t xq_bytes = (a.k + 15) / 16 * 16;
  XQuantSmem xs{reinterpret_cast<int8_t*>(smem), reinterpret_cast<float4*>(smem + xq_bytes)};
  const Mv1Shape sh = mv1_shape();
  Stage& stage = reinterpret_cast<Stage*>(smem + xq_bytes + a.k / 32 * 16)[sh.stage_warp];
  const int lane = sh.lane;
  const int units = static_cast<int>(a.k / 32);
  const Mv1Chunks mine = mv1_chunks((units + 31) / 32, sh);
  const int c_first = mine.first;
  const int chunks = mine.count;
  const int row_bytes = static_cast<int>(a.w_row_bytes);
  const auto* w = static_cast<const uint8_t*>(a.w);
  const Mv1Rows rows = mv1_rows(a, f, sh);
  const int n = rows.n, first = rows.first, step_rows = rows.step;
  using Chunk = uint4[kMvRowsPerWarp][kLoads];
  Chunk ring[kDepth];
  // Item cursors: output j0 of the row pair and chunk c, for the loads and the sums.
  int load_j0 = first, load_c = 0;
  auto load_next = [&](Chunk& into) {
#pragma unroll
    for (int r = 0; r < kMvRowsPerWarp; ++r) {
      const uint8_t* row = w + mv_weight_row(a, f, load_j0, r) * a.w_row_bytes;
      const int offset = (c_first + load_c) * kChunkBytes;
      const uintptr_t begin = reinterpret_cast<uintptr_t>(row) + offset;
      const int bytes = min(kChunkBytes, row_bytes - offset);
      const uintptr_t aligned = begin & ~uintptr_t{15};
      const int words = static_cast<int>((begin + bytes - aligned + 15) / 16);
      const auto* src = reinterpret_cast<const uint4*>(aligned);
#pragma unroll
      for (int i = 0; i < kLoads; ++i) {
        const int word = lane + 32 * i;
        into[r][i] = word < words ? __ldg(src + word) : make_uint4(0, 0, 0, 0);
      }
    }
    if (++load_c == chunks) {
      load_c = 0;
      load_j0 += step_rows;
    }
  };
  // Weights are read-only for the pass: the first items are requested before waiting for
  // the predecessor, so their latency overlaps its tail and the x staging.
#pragma unroll
  for (int d = 0; d < kDepth; ++d) {
    if (load_j0 < n) load_next(ring[d]);
  }
  const Mv1XPath x_path = mv1_x_path(a, f);
  const bool early_w = x_path == Mv1XPath::deferred_norm;
  float4 norm_w[kXBatch];
  mv1_norm_weight_before_wait(a, f, early_w, norm_w);
  mv1_first_pair_request_before_wait(a, f, sh, first_slots[sh.slot]);
  pdl_wait();
  const float x_scale = mv1_quantize_x(a, f, x_path, inv_rms, scratch, xs, norm_w, early_w);
  mv1_first_pair_request<true>(a, f, sh, first_slots[sh.slot]);

  int j0 = first, c = 0, parity = 0;
  Mv1Done done;
  bool first_pass = true;
  float acc0 = 0.0f, acc1 = 0.0f;
  const int local_block = lane / F::kUnits;
  const int sub = lane - local_block * F::kUnits;
  while (j0 < n) {
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      if (j0 < n) {  // warp-uniform
        __syncwarp();  // every lane is done with the previous item's stage
#pragma unroll
        for (int r = 0; r < kMvRowsPerWarp; ++r) {
#pragma unroll
          for (int i = 0; i < kLoads; ++i) stage[r][lane + 32 * i] = ring[d][r][i];
        }
        __syncwarp();
        if (load_j0 < n) load_next(ring[d]);  // kDepth items ahead
        const int u = (c_first + c) * 32 + lane;
        if (u < units) {
          const float4 g = xs.groups[u];
          const auto x = quantdot::XGroup::load(xs.q + u * 32, g.x, g.y, g.z);
          float part[kMvRowsPerWarp];
#pragma unroll
          for (int r = 0; r < kMvRowsPerWarp; ++r) {
            const uintptr_t begin =
                reinterpret_cast<uintptr_t>(w + mv_weight_row(a, f, j0, r) * a.w_row_bytes) + (c_first + c) * kChunkBytes;
            const auto* staged = reinterpret_cast<const uint8_t*>(&stage[r][0]) + (begin & 15) +
                                 local_block * F::kBlockBytes;
            part[r] = F::unit_dot(staged, sub, x);
          }
          acc0 += part[0];
          acc1 += part[1];
        }
        if (++c == chunks) {
          done.add(lane, warp_sum(acc0), warp_sum(acc1));
          acc0 = acc1 = 0.0f;
          c = 0;
          j0 += step_rows;
          if (j0 >= n) break;  // the warp's last row: to its store without the slots' checks
        }
      }
    }
    mv1_finish_rows(a, f, sh, done, part_sums, parity, j0, step_rows, x_scale, first_pass, first_slots[sh.slot]);
  }
}

// mv1_quant_body with the weights copied by the TMA unit: each warp's items (a row pair's
// chunk) land in a ring of `depth` shared-memory slots by cp.async.bulk (one copy per row,
// issued by lane 0 and counted on the slot's transaction barrier), where mv1_quant_body
// loads them into registers (16-byte loads by every lane) and stores them into the warp's
// stage: no per-lane load, store or register ring per item, so ~70 registers instead of
// 128 and room for 16-warp blocks (ops::cuda_mv1_dims). Needs rows and chunks of whole
// 16-byte words at 16-byte aligned addresses (ops::cuda_mv1_bulk). The ring takes what the
// dynamic shared memory leaves after x: depth = min(4, room / (warps * 2 * chunk bytes)).
// H100 short decode, llama-1b q8_0 / q4_0: 1523 / 1986 -> 1608 / 2027 (with the same 2 x 8
// warps per SM as mv1_quant_body it was 1506 / 1980).
constexpr int kMv1BulkMaxDepth = 4;

template <DType W>
__device__ __forceinline__ void mv1_bulk_body(const ops::MatmulArgs& a, const MvFusion& f) {
  using F = quantdot::Format<W>;
  constexpr int kChunkBytes = 32 / F::kUnits * F::kBlockBytes;
  static_assert(kChunkBytes % 16 == 0, "a chunk is whole 16-byte words");
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float inv_rms[kMvMaxRows];
  __shared__ __align__(16) float scratch[32];
  __shared__ Mv1PartSums part_sums;
  __shared__ Mv1FirstSlots first_slots;
  __shared__ uint64_t bars[kMv1MaxSlots * kMv1MaxParts][kMv1BulkMaxDepth];
  const int64_t xq_bytes = (a.k + 15) / 16 * 16;
  XQuantSmem xs{reinterpret_cast<int8_t*>(smem), reinterpret_cast<float4*>(smem + xq_bytes)};
  const Mv1Shape sh = mv1_shape();
  const int warps = sh.slots * sh.parts;
  const uint32_t x_bytes = static_cast<uint32_t>(xq_bytes + a.k / 32 * 16);
  uint32_t dynamic_bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_bytes));
  const int depth =
      min(kMv1BulkMaxDepth, static_cast<int>((dynamic_bytes - x_bytes) / (static_cast<uint32_t>(warps) * 2 * kChunkBytes)));
  unsigned char* ring = smem + x_bytes + static_cast<uint32_t>(sh.stage_warp * depth) * 2 * kChunkBytes;
  uint64_t* bar = bars[sh.stage_warp];
  const int lane = sh.lane;
  const int units = static_cast<int>(a.k / 32);
  const Mv1Chunks mine = mv1_chunks((units + 31) / 32, sh);
  const int c_first = mine.first;
  const int chunks = mine.count;
  const int row_bytes = static_cast<int>(a.w_row_bytes);
  const auto* w = static_cast<const uint8_t*>(a.w);
  const Mv1Rows rows = mv1_rows(a, f, sh);
  const int n = rows.n, first = rows.first, step_rows = rows.step;
  // Lane 0 requests the items: output j0 of the row pair and chunk c, into slot `slot`.
  int load_j0 = first, load_c = 0;
  auto issue_next = [&](int slot) {
    const int offset = (c_first + load_c) * kChunkBytes;
    const uint32_t bytes = static_cast<uint32_t>(min(kChunkBytes, row_bytes - offset));
    const uint32_t b = ptx::smem_addr(&bar[slot]);
    ptx::mbarrier_arrive_expect_tx(b, 2 * bytes);
#pragma unroll
    for (int r = 0; r < kMvRowsPerWarp; ++r) {
      const uint8_t* src = w + mv_weight_row(a, f, load_j0, r) * a.w_row_bytes + offset;
      ptx::cp_async_bulk_to_shared(ptx::smem_addr(ring + (slot * 2 + r) * kChunkBytes), src, bytes, b);
    }
    if (++load_c == chunks) {
      load_c = 0;
      load_j0 += step_rows;
    }
  };
  // Weights are read-only for the pass: the first items are requested before the wait.
  if (lane == 0) {
    for (int d = 0; d < depth; ++d) ptx::mbarrier_init_one(ptx::smem_addr(&bar[d]));
    ptx::fence_mbarrier_init();
    for (int d = 0; d < depth && load_j0 < n; ++d) issue_next(d);
  }
  __syncwarp();
  mv1_prefetch_norm_weight(a, f);
  const Mv1XPath x_path = mv1_x_path(a, f);
  pdl_wait();
  const float x_scale = mv1_quantize_x(a, f, x_path, inv_rms, scratch, xs);
  mv1_first_pair_request<false>(a, f, sh, first_slots[sh.slot]);

  int j0 = first, c = 0, parity = 0;
  Mv1Done done;
  bool first_pass = true;
  float acc0 = 0.0f, acc1 = 0.0f;
  const int local_block = lane / F::kUnits;
  const int sub = lane - local_block * F::kUnits;
  int slot = 0;
  uint32_t phase = 0;  // of the slots' barriers in this pass over the ring
  while (j0 < n) {
    for (int d = 0; d < kMv1BulkMaxDepth; ++d) {
      if (d >= depth || j0 >= n) break;  // warp-uniform
      ptx::mbarrier_wait_parity(ptx::smem_addr(&bar[slot]), phase);
      const int u = (c_first + c) * 32 + lane;
      if (u < units) {
        const float4 g = xs.groups[u];
        const auto x = quantdot::XGroup::load(xs.q + u * 32, g.x, g.y, g.z);
        float part[kMvRowsPerWarp];
#pragma unroll
        for (int r = 0; r < kMvRowsPerWarp; ++r) {
          part[r] = F::unit_dot(ring + (slot * 2 + r) * kChunkBytes + local_block * F::kBlockBytes, sub, x);
        }
        acc0 += part[0];
        acc1 += part[1];
      }
      __syncwarp();  // every lane is done with the slot
      if (lane == 0 && load_j0 < n) {
        ptx::fence_proxy_async_shared();  // the warp's reads of the slot before the copy's writes
        issue_next(slot);  // depth items ahead
      }
      if (++slot == depth) {
        slot = 0;
        phase ^= 1u;
      }
      if (++c == chunks) {
        done.add(lane, warp_sum(acc0), warp_sum(acc1));
        acc0 = acc1 = 0.0f;
        c = 0;
        j0 += step_rows;
        if (j0 >= n) break;  // the warp's last row: to its store without the slots' checks
      }
    }
    mv1_finish_rows(a, f, sh, done, part_sums, parity, j0, step_rows, x_scale, first_pass, first_slots[sh.slot]);
  }
}

// The start of the bodies that copy their weights by cp.async into a ring of Stages
// shared-memory stages per warp (q6_k, short rows): the first Stages - 1 items are requested
// before the PDL wait (weights are read-only for the pass), a fused norm's weight is
// prefetched into L2, and x is staged once the predecessor is done. Returns x's scale
// (mv1_quantize_x). issue_next(slot) requests the warp's next item into `slot`.
template <int Stages, typename Issue>
__device__ __forceinline__ float mv1_ring_start(const ops::MatmulArgs& a, const MvFusion& f, Issue& issue_next,
                                                float* inv_rms, float* scratch, XQuantSmem xs) {
#pragma unroll
  for (int t = 0; t < Stages - 1; ++t) issue_next(t);
  mv1_prefetch_norm_weight(a, f);
  const Mv1XPath x_path = mv1_x_path(a, f);
  pdl_wait();
  return mv1_quantize_x(a, f, x_path, inv_rms, scratch, xs);
}

// ---- one row of x, q6_k: a lane per half super-block ----------------------------------------
//
// mv1_quant_body gives each lane one 32-value unit, so q6_k's shared bytes are read and
// unpacked again by every unit that uses them: each qh byte by four lanes, each ql byte by
// two (~350 instructions per item of 2 x 1024 values: the LM head of the 4-bit models was
// bound by instruction issue, 91 us for 215 MB on the H200). Here a lane owns half a
// super-block (128 values, the four units that share its 64 ql and 32 qh bytes) of one
// row: an item is a row pair and eight super-blocks, lanes 0-15 on the first row and 16-31
// on the second. Its 3.4 KB are copied by cp.async into a ring of kQ6Stages shared-memory
// stages per warp (a register ring that large would not fit), kQ6Stages - 1 items ahead,
// the first before the PDL wait. The LM head: 52 -> 32 M warp instructions, 91 -> 69 us
// (four or five stages with the 7 or 5 warps per block that then fit: 73 and 75 us).
constexpr int kQ6BlockBytes = 210;
constexpr int kQ6Blocks = 8;                                              // super-blocks per row and item
constexpr int kQ6RowWords = (kQ6Blocks * kQ6BlockBytes + 15) / 16 + 1;   // one more for a 16-byte lead
constexpr int kQ6Stages = 3;
static_assert(kQ6RowWords <= 4 * 32, "a row's words are four 16-byte copies per lane");
static_assert(kCudaMv1Q6kStageBytes == kQ6Stages * kMvRowsPerWarp * kQ6RowWords * 16, "op's shared bytes");

// Σ over the four units of half h of a q6_k super-block at b (2-byte aligned) with the
// x groups of those units: (value - 32) . x scaled by d * scale of each 16 values.
__device__ __forceinline__ float q6k_half_dot(const uint8_t* b, int h, const quantdot::XGroup (&x)[4]) {
  // ql: 64 bytes, units 0 and 2 in the low and high nibbles of the first 32, units 1 and 3
  // of the last 32; qh: 32 bytes, unit s in bits 2s, 2s + 1. Whole words: aligned loads
  // joined by funnel shifts when the block starts 2 bytes past a word.
  const uint8_t* ql = b + 64 * h;
  const uint8_t* qh = b + 128 + 32 * h;
  const unsigned shift = 8 * static_cast<unsigned>(reinterpret_cast<uintptr_t>(b) & 2);
  const auto* wl = reinterpret_cast<const uint32_t*>(ql - (reinterpret_cast<uintptr_t>(b) & 2));
  const auto* wh = reinterpret_cast<const uint32_t*>(qh - (reinterpret_cast<uintptr_t>(b) & 2));
  int sum[4][2] = {};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t a = __funnelshift_r(wl[i], wl[i + 1], shift);
    const uint32_t c = __funnelshift_r(wl[8 + i], wl[9 + i], shift);
    const uint32_t q = __funnelshift_r(wh[i], wh[i + 1], shift);
    // The high bits of units 0 and 2 (bits 0-1 and 4-5 of each byte), then of 1 and 3;
    // each value is then one select of nibble bits (x & 0x0F) | (y & 0xF0) per byte.
    const uint32_t q02 = q & 0x33333333u;
    const uint32_t q13 = (q >> 2) & 0x33333333u;
    constexpr uint32_t kLow = 0x0F0F0F0Fu;
    const uint32_t v[4] = {(a & kLow) | ((q02 << 4) & ~kLow), (c & kLow) | ((q13 << 4) & ~kLow),
                           ((a >> 4) & kLow) | (q02 & ~kLow), ((c >> 4) & kLow) | (q13 & ~kLow)};
#pragma unroll
    for (int s = 0; s < 4; ++s) sum[s][i >> 2] = quantdot::dp4a(static_cast<int>(v[s]), x[s].q[i], sum[s][i >> 2]);
  }
  const auto* scales = reinterpret_cast<const int8_t*>(b + 192 + 8 * h);
  float total = 0.0f;
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    // The scales are 8-bit integers: the weighted sum stays exact in 32 bits.
    const int sc_a = scales[2 * s];
    const int sc_b = scales[2 * s + 1];
    total += x[s].d * static_cast<float>(sc_a * sum[s][0] + sc_b * sum[s][1]) -
             32.0f * (static_cast<float>(sc_a) * x[s].sum_lo + static_cast<float>(sc_b) * x[s].sum_hi);
  }
  return quantdot::half_bits_to_float(quantdot::ld_u16(b + 208)) * total;
}

__device__ __forceinline__ void mv1_q6k_body(const ops::MatmulArgs& a, const MvFusion& f) {
  using Stage = uint4[kMvRowsPerWarp][kQ6RowWords];
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float inv_rms[kMvMaxRows];
  __shared__ __align__(16) float scratch[32];
  __shared__ Mv1PartSums part_sums;
  const int64_t xq_bytes = (a.k + 15) / 16 * 16;
  XQuantSmem xs{reinterpret_cast<int8_t*>(smem), reinterpret_cast<float4*>(smem + xq_bytes)};
  const Mv1Shape sh = mv1_shape();
  Stage* ring = reinterpret_cast<Stage*>(smem + xq_bytes + a.k / 32 * 16) + sh.stage_warp * kQ6Stages;
  const int lane = sh.lane;
  const int row_blocks = static_cast<int>(a.k / 256);
  const Mv1Chunks mine = mv1_chunks((row_blocks + kQ6Blocks - 1) / kQ6Blocks, sh);
  const int c_first = mine.first;
  const int chunks = mine.count;
  const int row_bytes = static_cast<int>(a.w_row_bytes);
  const auto* w = static_cast<const uint8_t*>(a.w);
  const Mv1Rows rows = mv1_rows(a, f, sh);
  const int n = rows.n, first = rows.first, step_rows = rows.step;
  // Byte address of row r's part of item (j0, c).
  auto item_begin = [&](int j0, int c, int r) {
    return reinterpret_cast<uintptr_t>(w + mv_weight_row(a, f, j0, r) * a.w_row_bytes) +
           (c_first + c) * (kQ6Blocks * kQ6BlockBytes);
  };
  // Copies item (load_j0, load_c) into ring slot `slot`, in one commit group (empty past
  // the last item, so that waiting for all but kQ6Stages - 1 groups means "landed").
  int load_j0 = first, load_c = 0;
  auto issue_next = [&](int slot) {
    if (load_j0 < n) {
      const int bytes = min(kQ6Blocks * kQ6BlockBytes, row_bytes - (c_first + load_c) * (kQ6Blocks * kQ6BlockBytes));
#pragma unroll
      for (int r = 0; r < kMvRowsPerWarp; ++r) {
        const uintptr_t begin = item_begin(load_j0, load_c, r);
        const int lead = static_cast<int>(begin & 15);
        const int words = (lead + bytes + 15) >> 4;
        // This lane's words lane + 32 i: one address each side, constant offsets per copy.
        const auto* src = reinterpret_cast<const uint4*>(begin - lead) + lane;
        const uint32_t dst = ptx::smem_addr(&ring[slot][r][lane]);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if (lane + 32 * i < words) ptx::cp_async16(dst + 512 * i, src + 32 * i);
        }
      }
      if (++load_c == chunks) {
        load_c = 0;
        load_j0 += step_rows;
      }
    }
    ptx::cp_async_commit();
  };
  const float x_scale = mv1_ring_start<kQ6Stages>(a, f, issue_next, inv_rms, scratch, xs);
  const float2 first_residual = mv1_first_residual(a, f, first, lane == 0 && sh.part == 0);

  const int row = lane >> 4;                   // this lane's row of the pair
  const int block_in_item = (lane & 15) >> 1;  // its super-block in the item
  const int h = lane & 1;                      // and which half
  // The x groups of this lane's four units, in registers: read again only when the item's
  // super-blocks change (never for rows of at most 8 super-blocks, such as the LM heads of
  // the reference models). The 16 lanes of a row read records 128 bytes apart, all in the
  // same banks, so reading them per item cost more than the unpacking they feed.
  quantdot::XGroup x[4];
  int x_chunk = -1;
  auto load_x = [&](int chunk) {
    const int sb = (c_first + chunk) * kQ6Blocks + block_in_item;
    if (sb < row_blocks) {
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const int u = sb * 8 + h * 4 + s;
        const float4 g = xs.groups[u];
        x[s] = quantdot::XGroup::load(xs.q + u * 32, g.x, g.y, g.z);
      }
    }
    x_chunk = chunk;
  };
  int j0 = first, c = 0, parity = 0;
  int32_t position = rope_position(f);
  float acc = 0.0f;
  for (int slot = 0; j0 < n; slot = slot == kQ6Stages - 1 ? 0 : slot + 1) {
    issue_next(slot == 0 ? kQ6Stages - 1 : slot - 1);  // the slot computed last
    ptx::cp_async_wait<kQ6Stages - 1>();
    __syncwarp();  // every lane's copies of this item are visible to the warp
    if (x_chunk != c) load_x(c);
    if ((c_first + c) * kQ6Blocks + block_in_item < row_blocks) {
      const uintptr_t begin = item_begin(j0, c, row);
      const auto* b = reinterpret_cast<const uint8_t*>(&ring[slot][row][0]) + (begin & 15) +
                      block_in_item * kQ6BlockBytes;
      acc += q6k_half_dot(b, h, x);
    }
    __syncwarp();  // every lane is done with the slot before it is refilled
    if (++c == chunks) {
      // Sums over each half-warp (its row), then the second row's to lane 0.
#pragma unroll
      for (int offset = 8; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
      float v0 = acc;
      float v1 = __shfl_sync(0xffffffffu, acc, 16);
      if (sh.parts > 1) mv1_add_parts(part_sums, sh, parity, 0, v0, v1);
      if (lane == 0 && sh.part == 0) {
        mv_store_row(a, f, 0, j0, v0 * x_scale, v1 * x_scale, position, first_residual, j0 == first);
      }
      acc = 0.0f;
      c = 0;
      j0 += step_rows;
      if (j0 < n) position = rope_position(f);
    }
  }
  ptx::cp_async_wait<0>();  // no copy in flight at exit (the groups past the last item are empty)
}

// ---- one row of x, short rows of the one-unit formats: two row pairs per item -----------
//
// Rows of at most 32 units (K <= 1024) are a single chunk, so mv1_quant_body's item is a
// whole row pair with 32 - units lanes idle, and each item pays two full warp reductions
// (10 shuffles) and the epilogue: smollm2's q8_0 LM head (49152 rows of 18 units) took
// 19 us for 30 MB alone under ncu, ~340 warp instructions per row pair at 7.5 cycles each.
// Here an item is two row pairs (outputs j0 and j0 + per: four rows), a row per 8 lanes,
// each lane the units sub, sub + 8, ... of its row, so three shuffles finish a row. The
// rows are copied by cp.async into a ring of kCudaMv1ShortStages shared-memory stages per
// warp (the first before the PDL wait), and each lane's x groups stay in registers for
// the whole kernel (the units of a lane never change).
constexpr int kShortRows = 2 * kMvRowsPerWarp;  // rows per item
constexpr int kShortLanesPerRow = 32 / kShortRows;
constexpr int kShortUnitsPerLane = 32 / kShortLanesPerRow;  // rows of at most 32 units
constexpr int kShortStages = static_cast<int>(kCudaMv1ShortStages);

template <DType W>
__device__ __forceinline__ void mv1_short_body(const ops::MatmulArgs& a, const MvFusion& f) {
  using F = quantdot::Format<W>;
  static_assert(F::kUnits == 1, "a lane's unit is one block");
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float inv_rms[kMvMaxRows];
  __shared__ __align__(16) float scratch[32];
  const int64_t xq_bytes = (a.k + 15) / 16 * 16;
  XQuantSmem xs{reinterpret_cast<int8_t*>(smem), reinterpret_cast<float4*>(smem + xq_bytes)};
  const Mv1Shape sh = mv1_shape();  // one part: K is not split
  const int lane = sh.lane;
  const int units = static_cast<int>(a.k / 32);
  const int row_bytes = units * F::kBlockBytes;
  const int row_words = static_cast<int>(cuda_mv1_short_row_words(row_bytes));
  // This warp's ring: kShortStages stages of kShortRows rows of row_words words.
  uint4* ring = reinterpret_cast<uint4*>(smem + xq_bytes + a.k / 32 * 16) +
                sh.stage_warp * kShortStages * kShortRows * row_words;
  const int row = lane / kShortLanesPerRow;  // this lane's row of the item: pair row / 2, row % 2 of it
  const int sub = lane % kShortLanesPerRow;
  const int per = f.silu ? 1 : kMvRowsPerWarp;
  const int n = static_cast<int>(a.n);
  const int first = (static_cast<int>(blockIdx.x) * sh.slots + sh.slot) * 2 * per;
  const int step_rows = static_cast<int>(gridDim.x) * sh.slots * 2 * per;
  const auto* w = static_cast<const uint8_t*>(a.w);
  // Output of this lane's pair in item j0 (past n: the item's first pair again, whose
  // second result is dropped), and the byte address of this lane's row.
  auto pair_output = [&](int j0) { return j0 + (row >> 1) * per < n ? j0 + (row >> 1) * per : j0; };
  auto row_begin = [&](int j0) {
    return reinterpret_cast<uintptr_t>(w + mv_weight_row(a, f, pair_output(j0), row & 1) * a.w_row_bytes);
  };
  int load_j0 = first;
  auto issue_next = [&](int slot) {
    if (load_j0 < n) {
      const uintptr_t begin = row_begin(load_j0);
      const int lead = static_cast<int>(begin & 15);
      const int words = (lead + row_bytes + 15) >> 4;
      const auto* src = reinterpret_cast<const uint4*>(begin - lead);
      uint4* dst = ring + (slot * kShortRows + row) * row_words;
      for (int i = sub; i < words; i += kShortLanesPerRow) ptx::cp_async16(ptx::smem_addr(dst + i), src + i);
      load_j0 += step_rows;
    }
    ptx::cp_async_commit();
  };
  const float x_scale = mv1_ring_start<kShortStages>(a, f, issue_next, inv_rms, scratch, xs);
  const bool storer = sub == 0 && (row & 1) == 0;  // lanes 0 and 16: one pair each
  const float2 first_residual = mv1_first_residual(a, f, first + (row >> 1) * per, storer);
  quantdot::XGroup x[kShortUnitsPerLane];
#pragma unroll
  for (int i = 0; i < kShortUnitsPerLane; ++i) {
    const int u = sub + kShortLanesPerRow * i;
    if (u < units) {
      const float4 g = xs.groups[u];
      x[i] = quantdot::XGroup::load(xs.q + u * 32, g.x, g.y, g.z);
    }
  }
  int j0 = first;
  for (int slot = 0; j0 < n; slot = slot == kShortStages - 1 ? 0 : slot + 1) {
    issue_next(slot == 0 ? kShortStages - 1 : slot - 1);  // the slot computed last
    ptx::cp_async_wait<kShortStages - 1>();
    __syncwarp();  // every lane's copies of this item are visible to the warp
    const auto* b = reinterpret_cast<const uint8_t*>(ring + (slot * kShortRows + row) * row_words) +
                    (row_begin(j0) & 15);
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < kShortUnitsPerLane; ++i) {
      const int u = sub + kShortLanesPerRow * i;
      if (u < units) acc += F::unit_dot(b + u * F::kBlockBytes, 0, x[i]);
    }
    __syncwarp();  // every lane is done with the slot before it is refilled
#pragma unroll
    for (int offset = kShortLanesPerRow / 2; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    const float second = __shfl_down_sync(0xffffffffu, acc, kShortLanesPerRow);  // the pair's other row
    const int jp = j0 + (row >> 1) * per;
    if (storer && jp < n) {
      mv_store_row(a, f, 0, jp, acc * x_scale, second * x_scale, rope_position(f), first_residual,
                   j0 == first);
    }
    j0 += step_rows;
  }
  ptx::cp_async_wait<0>();  // no copy in flight at exit (the groups past the last item are empty)
}

template <DType W>
__device__ __forceinline__ float load_weight(const void* w, int64_t i) {
  return Elem<W>::load(static_cast<const typename Elem<W>::storage*>(w)[i]);
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
// products' sums (the deferred 1 / rms, or 1) after the block's barrier.
__device__ __forceinline__ float mv1_stage_x_f32(const ops::MatmulArgs& a, const MvFusion& f, Mv1XPath path,
                                                float* xs, float* inv_rms, float* scratch,
                                                const float4 (&early_w)[kXBatch], bool have_early_w) {
  const bool plain = path == Mv1XPath::plain;
  if (path == Mv1XPath::general) {
    stage_x_f32(a, f, xs, inv_rms, scratch);
    return 1.0f;
  }
  float4 batch[kXBatch];
  if (plain) {
    load_x_one_batch(a, batch);
  } else if (have_early_w) {
    load_x_times_early_norm_weight(a, f, scratch, early_w, batch);
  } else {
    load_x_times_norm_weight(a, f, true, scratch, batch);
  }
#pragma unroll
  for (int j = 0; j < kXBatch; ++j) {
    const int64_t i = x_batch_index(0, j);
    if (i < a.k / 4) reinterpret_cast<float4*>(xs)[i] = batch[j];
  }
  __syncthreads();
  return plain ? 1.0f : deferred_inv_rms(a, f, scratch);
}

// Dense weights: 16-byte words per lane, row and chunk; two chunks in flight per warp
// (2 rows x 2 chunks x kDenseLoads words = 128 bytes per lane).
constexpr int kDenseLoads = 2;

template <DType W>
__device__ __forceinline__ void mv_dense_body(const ops::MatmulArgs& a, const MvFusion& f) {
  using S = typename Elem<W>::storage;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float inv_rms[kMvMaxRows];
  __shared__ __align__(16) float scratch[32];
  float* xs = reinterpret_cast<float*>(smem);  // [M, K]
  const int lane = threadIdx.x & 31;
  constexpr int kVec = 16 / sizeof(S);  // values per 16-byte load
  const auto* wb = static_cast<const unsigned char*>(a.w);
  const bool vector = a.k % kVec == 0 && a.w_row_bytes % 16 == 0 && (reinterpret_cast<uintptr_t>(wb) & 15) == 0;
  const MvRows rows_of = mv_rows(a, f);
  const int64_t row_words = a.k / kVec;
  constexpr int kChunkWords = 32 * kDenseLoads;
  const int64_t chunks = (row_words + kChunkWords - 1) / kChunkWords;
  const uint4* rows[kMvRowsPerWarp];
  using Chunk = uint4[kMvRowsPerWarp][kDenseLoads];
  Chunk ring0, ring1;
  // Word lane + 32 i of chunk c of each row (zeros past the row).
  auto load_chunk = [&](int64_t c, Chunk& into) {
#pragma unroll
    for (int r = 0; r < kMvRowsPerWarp; ++r) {
#pragma unroll
      for (int i = 0; i < kDenseLoads; ++i) {
        const int64_t word = c * kChunkWords + lane + 32 * i;
        into[r][i] = word < row_words ? rows[r][word] : make_uint4(0, 0, 0, 0);
      }
    }
  };
  auto load_first_chunks = [&](int64_t j0) {
#pragma unroll
    for (int r = 0; r < kMvRowsPerWarp; ++r) {
      rows[r] = reinterpret_cast<const uint4*>(wb + mv_weight_row(a, f, j0, r) * a.w_row_bytes);
    }
    load_chunk(0, ring0);
    if (chunks > 1) load_chunk(1, ring1);
  };
  // Weights are read-only for the pass: the first two chunks of this warp's first rows are
  // loaded into registers before waiting for the predecessor, so their latency overlaps its
  // tail and the x staging (an L2 prefetch of whole rows here measured 15% slower for f16).
  if (vector && rows_of.first < a.n) load_first_chunks(rows_of.first);
  pdl_wait();
  stage_x_f32(a, f, xs, inv_rms, scratch);
  for (int64_t j0 = rows_of.first; j0 < a.n; j0 += rows_of.step) {
    const int32_t position = rope_position(f);
    float acc[kMvMaxRows][kMvRowsPerWarp];
#pragma unroll
    for (int m = 0; m < kMvMaxRows; ++m) {
#pragma unroll
      for (int r = 0; r < kMvRowsPerWarp; ++r) acc[m][r] = 0.0f;
    }
    if (vector) {
      auto step = [&](int64_t c, Chunk& held) {
        float wv[kMvRowsPerWarp][kDenseLoads][kVec];
#pragma unroll
        for (int r = 0; r < kMvRowsPerWarp; ++r) {
#pragma unroll
          for (int i = 0; i < kDenseLoads; ++i) {
            const S* vals = reinterpret_cast<const S*>(&held[r][i]);
#pragma unroll
            for (int e = 0; e < kVec; ++e) wv[r][i][e] = Elem<W>::load(vals[e]);
          }
        }
        if (c + 2 < chunks) load_chunk(c + 2, held);  // in flight while this chunk is computed
#pragma unroll
        for (int i = 0; i < kDenseLoads; ++i) {
          const int64_t word = c * kChunkWords + lane + 32 * i;
          if (word >= row_words) break;
#pragma unroll
          for (int m = 0; m < kMvMaxRows; ++m) {
            if (m >= a.m) break;
            const float* xv = xs + m * a.k + word * kVec;
#pragma unroll
            for (int e = 0; e < kVec; ++e) {
              const float xe = xv[e];
#pragma unroll
              for (int r = 0; r < kMvRowsPerWarp; ++r) acc[m][r] = fmaf(wv[r][i][e], xe, acc[m][r]);
            }
          }
        }
      };
      for (int64_t c = 0; c < chunks; c += 2) {
        step(c, ring0);
        if (c + 1 < chunks) step(c + 1, ring1);
      }
      // The next rows' first chunks are in flight during this iteration's sums and stores.
      if (j0 + rows_of.step < a.n) load_first_chunks(j0 + rows_of.step);
    } else {
      const S* srows[kMvRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kMvRowsPerWarp; ++r) {
        srows[r] = reinterpret_cast<const S*>(wb + mv_weight_row(a, f, j0, r) * a.w_row_bytes);
      }
      for (int64_t k = lane; k < a.k; k += 32) {
        float wv[kMvRowsPerWarp];
#pragma unroll
        for (int r = 0; r < kMvRowsPerWarp; ++r) wv[r] = Elem<W>::load(srows[r][k]);
#pragma unroll
        for (int m = 0; m < kMvMaxRows; ++m) {
          if (m >= a.m) break;
          const float xe = xs[m * a.k + k];
#pragma unroll
          for (int r = 0; r < kMvRowsPerWarp; ++r) acc[m][r] = fmaf(wv[r], xe, acc[m][r]);
        }
      }
    }
    mv_store(a, f, j0, acc, position);
  }
}

// mv_dense_body for one row of x with 16-byte weight loads (the op picks it only when K
// and the rows allow them): the flat item stream of mv1_quant_body, kMv1DenseDepth items
// of both rows in flight per warp (f32 weights: two, for registers), the same block shape
// (Mv1Shape). Splitting K between parts lets products with few row pairs (llama-1b's O
// and down: 1024 pairs) keep more weight bytes in flight.
template <DType W>
constexpr int kMv1DenseDepth = W == DType::f32 ? 2 : 4;

template <DType W>
__device__ __forceinline__ void mv1_dense_body(const ops::MatmulArgs& a, const MvFusion& f) {
  using S = typename Elem<W>::storage;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float inv_rms[kMvMaxRows];
  __shared__ __align__(16) float scratch[32];
  __shared__ Mv1PartSums part_sums;
  __shared__ Mv1FirstSlots first_slots;
  float* xs = reinterpret_cast<float*>(smem);  // [K]
  const Mv1Shape sh = mv1_shape();
  const int lane = sh.lane;
  constexpr int kVec = 16 / sizeof(S);  // values per 16-byte load
  constexpr int kChunkWords = 32 * kDenseLoads;
  const auto* wb = static_cast<const unsigned char*>(a.w);
  const Mv1Rows rows = mv1_rows(a, f, sh);
  const int n = rows.n, first = rows.first, step_rows = rows.step;
  const int row_words = static_cast<int>(a.k / kVec);
  // This warp's chunks of every row pair: [c_first, c_first + chunks).
  const Mv1Chunks mine = mv1_chunks((row_words + kChunkWords - 1) / kChunkWords, sh);
  const int c_first = mine.first;
  const int chunks = mine.count;
  using Chunk = uint4[kMvRowsPerWarp][kDenseLoads];
  Chunk ring[kMv1DenseDepth<W>];
  int load_j0 = first, load_c = 0;
  auto load_next = [&](Chunk& into) {
#pragma unroll
    for (int r = 0; r < kMvRowsPerWarp; ++r) {
      const auto* row = reinterpret_cast<const uint4*>(wb + mv_weight_row(a, f, load_j0, r) * a.w_row_bytes);
#pragma unroll
      for (int i = 0; i < kDenseLoads; ++i) {
        const int word = (c_first + load_c) * kChunkWords + lane + 32 * i;
        into[r][i] = word < row_words ? __ldg(row + word) : make_uint4(0, 0, 0, 0);
      }
    }
    if (++load_c == chunks) {
      load_c = 0;
      load_j0 += step_rows;
    }
  };
#pragma unroll
  for (int d = 0; d < kMv1DenseDepth<W>; ++d) {
    if (load_j0 < n) load_next(ring[d]);
  }
  const Mv1XPath x_path = mv1_x_path(a, f);
  const bool early_w = x_path == Mv1XPath::deferred_norm;
  float4 norm_w[kXBatch];
  mv1_norm_weight_before_wait(a, f, early_w, norm_w);
  pdl_wait();
  const float x_scale = mv1_stage_x_f32(a, f, x_path, xs, inv_rms, scratch, norm_w, early_w);
  mv1_first_pair_request<false>(a, f, sh, first_slots[sh.slot]);

  int j0 = first, c = 0, parity = 0;
  Mv1Done done;
  bool first_pass = true;
  float acc[kMvRowsPerWarp] = {0.0f, 0.0f};
  while (j0 < n) {
#pragma unroll
    for (int d = 0; d < kMv1DenseDepth<W>; ++d) {
      if (j0 < n) {  // warp-uniform
        float wv[kMvRowsPerWarp][kDenseLoads][kVec];
#pragma unroll
        for (int r = 0; r < kMvRowsPerWarp; ++r) {
#pragma unroll
          for (int i = 0; i < kDenseLoads; ++i) {
            const S* vals = reinterpret_cast<const S*>(&ring[d][r][i]);
#pragma unroll
            for (int e = 0; e < kVec; ++e) wv[r][i][e] = Elem<W>::load(vals[e]);
          }
        }
        if (load_j0 < n) load_next(ring[d]);  // kMv1DenseDepth items ahead
#pragma unroll
        for (int i = 0; i < kDenseLoads; ++i) {
          const int word = (c_first + c) * kChunkWords + lane + 32 * i;
          if (word >= row_words) break;
          const float4* xv = reinterpret_cast<const float4*>(xs + word * kVec);
#pragma unroll
          for (int e4 = 0; e4 < kVec / 4; ++e4) {
            const float4 x4 = xv[e4];
            const float xe[4] = {x4.x, x4.y, x4.z, x4.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
#pragma unroll
              for (int r = 0; r < kMvRowsPerWarp; ++r) acc[r] = fmaf(wv[r][i][4 * e4 + e], xe[e], acc[r]);
            }
          }
        }
        if (++c == chunks) {
          done.add(lane, warp_sum(acc[0]), warp_sum(acc[1]));
          acc[0] = acc[1] = 0.0f;
          c = 0;
          j0 += step_rows;
          if (j0 >= n) break;  // the warp's last row: to its store without the slots' checks
        }
      }
    }
    mv1_finish_rows(a, f, sh, done, part_sums, parity, j0, step_rows, x_scale, first_pass, first_slots[sh.slot]);
  }
}

template <DType W>
__global__ void __launch_bounds__(kMvWarps * 32, kCudaMvBlocksPerSm) mv_quant_kernel(const __grid_constant__ ops::MatmulArgs a) {
  mv_quant_body<W>(a, MvFusion{});
}

template <DType W>
__global__ void __launch_bounds__(kMvWarps * 32, kCudaMvBlocksPerSm) mv_dense_kernel(const __grid_constant__ ops::MatmulArgs a) {
  mv_dense_body<W>(a, MvFusion{});
}

__device__ __forceinline__ MvFusion fusion_of(const ops::FusedMatvecArgs& f) {
  return MvFusion{f.norm_weight, f.eps,         f.silu != 0, f.residual, f.residual_stride,
                  f.rope.positions != nullptr ? &f.rope : nullptr, f.residual_before_wait != 0};
}

// The mv1 body of weight type W: dense (16-byte words) or block format.
template <DType W>
__device__ __forceinline__ void mv1_body(const ops::MatmulArgs& a, const MvFusion& f) {
  if constexpr (W == DType::f32 || W == DType::f16 || W == DType::bf16) {
    mv1_dense_body<W>(a, f);
  } else if constexpr (W == DType::q6_k) {
    mv1_q6k_body(a, f);
  } else {
    mv1_quant_body<W>(a, f);
  }
}

// Up to 512 threads per block (ops::cuda_mv1_dims): 128 registers per thread at most.
template <DType W>
__global__ void __launch_bounds__(kCudaMv1MaxThreads, 1) mv1_kernel(const __grid_constant__ ops::MatmulArgs a) {
  mv1_body<W>(a, MvFusion{});
}

template <DType W>
__global__ void __launch_bounds__(kCudaMv1MaxThreads, 1) mv1_fused_kernel(const __grid_constant__ ops::FusedMatvecArgs f) {
  mv1_body<W>(f.mm, fusion_of(f));
}

// mv1_bulk_body in kernels of its own (mv1_bulk_<W>_f32[_fused]), picked by the op for
// rows and chunks of whole aligned 16-byte words (ops::cuda_mv1_bulk).
template <DType W>
__global__ void __launch_bounds__(kCudaMv1MaxThreads, 1) mv1_bulk_kernel(const __grid_constant__ ops::MatmulArgs a) {
  mv1_bulk_body<W>(a, MvFusion{});
}

template <DType W>
__global__ void __launch_bounds__(kCudaMv1MaxThreads, 1) mv1_bulk_fused_kernel(const __grid_constant__ ops::FusedMatvecArgs f) {
  mv1_bulk_body<W>(f.mm, fusion_of(f));
}

// The short-row body in kernels of its own (mv1_short_<W>_f32[_fused]), picked by the op
// (ops::cuda_mv1_short_rows): as a branch inside mv1_kernel it cost the other bodies
// registers and stack (-9% on llama-1b q4_0, whose products never took it). At most 8
// warps per block, 2 blocks per SM (3, at 80 registers, spilled and measured slower).
template <DType W>
__global__ void __launch_bounds__(8 * 32, 2) mv1_short_kernel(const __grid_constant__ ops::MatmulArgs a) {
  mv1_short_body<W>(a, MvFusion{});
}

template <DType W>
__global__ void __launch_bounds__(8 * 32, 2) mv1_short_fused_kernel(const __grid_constant__ ops::FusedMatvecArgs f) {
  mv1_short_body<W>(f.mm, fusion_of(f));
}

template <DType W>
__global__ void __launch_bounds__(kMvWarps * 32, kCudaMvBlocksPerSm) mv_quant_fused_kernel(const __grid_constant__ ops::FusedMatvecArgs f) {
  mv_quant_body<W>(f.mm, fusion_of(f));
}

template <DType W>
__global__ void __launch_bounds__(kMvWarps * 32, kCudaMvBlocksPerSm) mv_dense_fused_kernel(const __grid_constant__ ops::FusedMatvecArgs f) {
  mv_dense_body<W>(f.mm, fusion_of(f));
}

// ---- mm, f32 weights (CUDA cores) ---------------------------------------------------------------------

using tile::kStep;
using tile::kTile;

// The w tile of one K step (f32 weights only: the other types use the tensor cores).
__device__ __forceinline__ void load_w_tile(const ops::MatmulArgs& a, int64_t n0, int64_t k0, float (*wt)[kStep + 1]) {
  const auto* wb = static_cast<const uint8_t*>(a.w);
  for (int i = threadIdx.x; i < kTile * kStep; i += blockDim.x) {
    const int r = i / kStep;
    const int c = i - r * kStep;
    const int64_t n = n0 + r;
    const int64_t k = k0 + c;
    wt[r][c] = (n < a.n && k < a.k) ? reinterpret_cast<const float*>(wb + n * a.w_row_bytes)[k] : 0.0f;
  }
}

__global__ void __launch_bounds__(256) mm_f32_kernel(const __grid_constant__ ops::MatmulArgs a) {
  __shared__ float xt[kTile][kStep + 1];  // +1: no bank conflicts on the transposed reads
  __shared__ float wt[kTile][kStep + 1];
  pdl_wait();
  const int64_t n0 = int64_t{blockIdx.x} * kTile;
  const int64_t m0 = int64_t{blockIdx.y} * kTile;
  const int tn = threadIdx.x & 15;  // 4 output columns (weight rows) each
  const int tm = threadIdx.x >> 4;  // 4 output rows (x rows) each
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < a.k; k0 += kStep) {
    for (int i = threadIdx.x; i < kTile * kStep; i += blockDim.x) {
      const int r = i / kStep;
      const int c = i - r * kStep;
      const int64_t m = m0 + r;
      const int64_t k = k0 + c;
      xt[r][c] = (m < a.m && k < a.k) ? a.x[m * a.x_stride + k] : 0.0f;
    }
    load_w_tile(a, n0, k0, wt);
    __syncthreads();
    tile::accumulate(xt, wt, acc);
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t m = m0 + tm * 4 + i;
    if (m >= a.m) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t n = n0 + tn * 4 + j;
      if (n < a.n) a.out[m * a.out_stride + n] = acc[i][j];
    }
  }
}

constexpr uint32_t kMvSharedBytes = 100 * 1024;

template <DType W>
void register_weight_type(KernelRegistry& registry) {
  const std::string t(dtype_name(W));
  if constexpr (W == DType::f32 || W == DType::f16 || W == DType::bf16) {
    registry.add(make_cuda_kernel<ops::MatmulArgs>("mv_" + t + "_f32", reinterpret_cast<const void*>(&mv_dense_kernel<W>),
                                                   kMvWarps * 32, true, kMvSharedBytes));
    registry.add(make_cuda_kernel<ops::FusedMatvecArgs>("mv_" + t + "_f32_fused",
                                                        reinterpret_cast<const void*>(&mv_dense_fused_kernel<W>),
                                                        kMvWarps * 32, true, kMvSharedBytes));
  } else {
    registry.add(make_cuda_kernel<ops::MatmulArgs>("mv_" + t + "_f32", reinterpret_cast<const void*>(&mv_quant_kernel<W>),
                                                   kMvWarps * 32, true, kMvSharedBytes));
    registry.add(make_cuda_kernel<ops::FusedMatvecArgs>("mv_" + t + "_f32_fused",
                                                        reinterpret_cast<const void*>(&mv_quant_fused_kernel<W>),
                                                        kMvWarps * 32, true, kMvSharedBytes));
  }
  registry.add(make_cuda_kernel<ops::MatmulArgs>("mv1_" + t + "_f32", reinterpret_cast<const void*>(&mv1_kernel<W>),
                                                 kCudaMv1MaxThreads, true, kMvSharedBytes));
  registry.add(make_cuda_kernel<ops::FusedMatvecArgs>("mv1_" + t + "_f32_fused",
                                                      reinterpret_cast<const void*>(&mv1_fused_kernel<W>),
                                                      kCudaMv1MaxThreads, true, kMvSharedBytes));
  if constexpr (W == DType::q4_0 || W == DType::q4_1 || W == DType::q8_0) {
    registry.add(make_cuda_kernel<ops::MatmulArgs>("mv1_bulk_" + t + "_f32",
                                                   reinterpret_cast<const void*>(&mv1_bulk_kernel<W>),
                                                   kCudaMv1MaxThreads, true, kCudaMv1BulkSharedLimit));
    registry.add(make_cuda_kernel<ops::FusedMatvecArgs>("mv1_bulk_" + t + "_f32_fused",
                                                        reinterpret_cast<const void*>(&mv1_bulk_fused_kernel<W>),
                                                        kCudaMv1MaxThreads, true, kCudaMv1BulkSharedLimit));
    registry.add(make_cuda_kernel<ops::MatmulArgs>("mv1_short_" + t + "_f32",
                                                   reinterpret_cast<const void*>(&mv1_short_kernel<W>),
                                                   kCudaMv1MaxThreads, true, kMvSharedBytes));
    registry.add(make_cuda_kernel<ops::FusedMatvecArgs>("mv1_short_" + t + "_f32_fused",
                                                        reinterpret_cast<const void*>(&mv1_short_fused_kernel<W>),
                                                        kCudaMv1MaxThreads, true, kMvSharedBytes));
  }
  // mm for the other types: the tensor-core kernels of matmul_tc.cu.
  if constexpr (W == DType::f32) {
    registry.add(make_cuda_kernel<ops::MatmulArgs>("mm_" + t + "_f32", reinterpret_cast<const void*>(&mm_f32_kernel), 256));
  }
}

}  // namespace

void register_matmul_cuda_kernels(KernelRegistry& registry) {
  register_weight_type<DType::f32>(registry);
  register_weight_type<DType::f16>(registry);
  register_weight_type<DType::bf16>(registry);
  register_weight_type<DType::q4_0>(registry);
  register_weight_type<DType::q4_1>(registry);
  register_weight_type<DType::q8_0>(registry);
  register_weight_type<DType::q4_k>(registry);
  register_weight_type<DType::q5_k>(registry);
  register_weight_type<DType::q6_k>(registry);
}

}  // namespace onepass::cuda
