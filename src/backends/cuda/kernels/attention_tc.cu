// CUDA kernels sdpa_tc_f16_hd<D> (D = 64, 128): causal grouped-query prefill attention
// over an f16 KV cache on tensor cores (same contract as sdpa_<C>, ops/attention.h).
//
// A block of 4 warps owns one query head and 64 consecutive tokens, 16 per warp. It walks
// the keys 0 .. (the largest position of its tokens) in tiles of 64: K and V tiles are
// copied into shared memory with cp.async, two tiles in flight; each warp computes its
// 16 x 64 scores with mma.sync (q · kᵀ), masks keys past each token's position, keeps an
// online softmax per row in registers and adds p · v with mma.sync again (v through
// ldmatrix.trans). Warps whose tokens see none of a tile skip its products.
//
// Precision: the f16 operands of the products carry q and p as the sum of two f16 values
// (hi + lo, 22 significant bits), so that scores and weighted sums keep f32 accuracy
// (the op tests' tolerance is that of the f32 kernel); K and V are f16 already. Scores
// are scaled by scale · log2(e) up front and exponentiated with exp2.
#include "common.cuh"
#include "onepass/ops/attention.h"
#include "ptx.cuh"
#include "registration.h"

namespace onepass::cuda {
namespace {

constexpr int kTokens = 64;  // per block: 16 per warp
constexpr int kKeys = 64;    // per tile
constexpr int kWarps = 4;
constexpr int kThreadsTc = kWarps * 32;

template <int D>
struct TcShape {
  static constexpr int pitch = D + 8;                       // halves per K/V row in shared memory
  static constexpr int tile = kKeys * pitch;                // halves of one K (or V) tile
  static constexpr uint32_t shared = 2 * 2 * tile * 2;      // two buffers of K and V
};

__device__ __forceinline__ uint32_t pack_h2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// v = hi + lo with hi, lo f16: packs (hi of a, hi of b) and (lo of a, lo of b).
__device__ __forceinline__ void split2(float a, float b, uint32_t& hi, uint32_t& lo) {
  const __half2 h = __floats2half2_rn(a, b);
  const float2 back = __half22float2(h);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = pack_h2(a - back.x, b - back.y);
}

// Last key (exclusive) token t may see: min(position, ctx - 1) + 1, 0 for a negative
// position or a token past the batch.
__device__ __forceinline__ int64_t key_limit(const ops::SdpaArgs& a, int64_t t) {
  if (t >= a.tokens) return 0;
  const int64_t p = a.positions[t];
  return p < 0 ? 0 : (p < a.ctx ? p : a.ctx - 1) + 1;
}

// Copies keys key0 .. key0 + 63 of K and V into buffer `buf`; rows at or past `end` are
// zeroed (unwritten cache rows may hold NaN, and 0 · NaN would reach the sums).
template <int D>
__device__ __forceinline__ void load_kv_tile(const __half* k, const __half* v, const ops::SdpaArgs& a, int64_t key0,
                                             int64_t end, uint32_t kbase, uint32_t vbase) {
  constexpr int kChunks = D / 8;  // 16-byte pieces per row
  for (int i = threadIdx.x; i < kKeys * kChunks; i += kThreadsTc) {
    const int r = i / kChunks;
    const int c = 8 * (i % kChunks);
    const uint32_t off = static_cast<uint32_t>((r * TcShape<D>::pitch + c) * 2);
    const int64_t key = key0 + r;
    if (key < end) {
      ptx::cp_async16(kbase + off, k + key * a.k_stride + c);
      ptx::cp_async16(vbase + off, v + key * a.v_stride + c);
    } else {
      ptx::st_shared_v4(kbase + off, 0, 0, 0, 0);
      ptx::st_shared_v4(vbase + off, 0, 0, 0, 0);
    }
  }
}

// Grid {ceil(tokens / 64), n_head}.
template <int D>
__global__ void __launch_bounds__(kThreadsTc) sdpa_tc_kernel(const __grid_constant__ ops::SdpaArgs a) {
  using Sh = TcShape<D>;
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t base = ptx::smem_addr(smem);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int g = lane >> 2;
  const int t4 = lane & 3;
  const int64_t head = blockIdx.y;
  const int64_t t0 = int64_t{blockIdx.x} * kTokens;
  const int64_t kv_head = head / (a.n_head / a.n_kv_head);
  pdl_wait();
  const auto* k = static_cast<const __half*>(a.k) + kv_head * a.ctx * a.k_stride;
  const auto* v = static_cast<const __half*>(a.v) + kv_head * a.ctx * a.v_stride;

  // Keys this block needs: up to the largest limit of its 64 tokens (every warp computes it).
  int64_t end = key_limit(a, t0 + lane);
  {
    const int64_t other = key_limit(a, t0 + 32 + lane);
    end = other > end ? other : end;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const int64_t e = __shfl_xor_sync(0xffffffffu, end, o);
      end = e > end ? e : end;
    }
  }
  // This thread's rows: tokens row0 (fragment rows g) and row0 + 8 (rows g + 8).
  const int64_t row0 = t0 + 16 * warp + g;
  const int64_t lim0 = key_limit(a, row0);
  const int64_t lim1 = key_limit(a, row0 + 8);
  int64_t warp_end = lim0 > lim1 ? lim0 : lim1;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const int64_t e = __shfl_xor_sync(0xffffffffu, warp_end, o);
    warp_end = e > warp_end ? e : warp_end;
  }

  // q fragments (A operand, rows row0 / row0 + 8, dims 16 c + 2 t4 (+1, +8, +9)), scaled
  // and split into hi + lo.
  uint32_t qh[D / 16][4], ql[D / 16][4];
  {
    const float qscale = a.scale * 1.4426950408889634f;
    const float* q0 = a.q + (row0 * a.n_head + head) * a.q_stride;
    const float* q1 = a.q + ((row0 + 8) * a.n_head + head) * a.q_stride;
    const bool ok0 = row0 < a.tokens;
    const bool ok1 = row0 + 8 < a.tokens;
#pragma unroll
    for (int c = 0; c < D / 16; ++c) {
      const int d = 16 * c + 2 * t4;
      float x[8];
      x[0] = ok0 ? q0[d] : 0.0f;
      x[1] = ok0 ? q0[d + 1] : 0.0f;
      x[2] = ok1 ? q1[d] : 0.0f;
      x[3] = ok1 ? q1[d + 1] : 0.0f;
      x[4] = ok0 ? q0[d + 8] : 0.0f;
      x[5] = ok0 ? q0[d + 9] : 0.0f;
      x[6] = ok1 ? q1[d + 8] : 0.0f;
      x[7] = ok1 ? q1[d + 9] : 0.0f;
#pragma unroll
      for (int i = 0; i < 4; ++i) split2(x[2 * i] * qscale, x[2 * i + 1] * qscale, qh[c][i], ql[c][i]);
    }
  }

  float o[D / 8][4] = {};
  float m0 = -INFINITY, m1 = -INFINITY;  // running maxima (log2 units) of rows g, g + 8
  float l0 = 0.0f, l1 = 0.0f;            // this thread's part of the rows' sums

  const int64_t tiles = (end + kKeys - 1) / kKeys;
  if (tiles > 0) load_kv_tile<D>(k, v, a, 0, end, base, base + Sh::tile * 2);
  ptx::cp_async_commit();
  for (int64_t tile = 0; tile < tiles; ++tile) {
    const int buf = static_cast<int>(tile & 1);
    if (tile + 1 < tiles) {
      const uint32_t nb = base + static_cast<uint32_t>((buf ^ 1) * 2 * Sh::tile * 2);
      load_kv_tile<D>(k, v, a, (tile + 1) * kKeys, end, nb, nb + Sh::tile * 2);
    }
    ptx::cp_async_commit();
    ptx::cp_async_wait<1>();
    __syncthreads();
    const int64_t key0 = tile * kKeys;
    if (key0 < warp_end) {
      const uint32_t kb = base + static_cast<uint32_t>(buf * 2 * Sh::tile * 2);
      const uint32_t vb = kb + Sh::tile * 2;
      // Scores: 8 n8 tiles of keys.
      float s[8][4] = {};
#pragma unroll
      for (int c = 0; c < D / 16; ++c) {
#pragma unroll
        for (int nj = 0; nj < 4; ++nj) {
          uint32_t b[4];
          const int key = 16 * nj + (lane & 7) + 8 * (lane >> 4);
          const int dim = 16 * c + 8 * ((lane >> 3) & 1);
          ptx::ldmatrix_x4(b, kb + static_cast<uint32_t>((key * Sh::pitch + dim) * 2));
          ptx::mma_f16(s[2 * nj], qh[c], b[0], b[1]);
          ptx::mma_f16(s[2 * nj], ql[c], b[0], b[1]);
          ptx::mma_f16(s[2 * nj + 1], qh[c], b[2], b[3]);
          ptx::mma_f16(s[2 * nj + 1], ql[c], b[2], b[3]);
        }
      }
      // Mask and online softmax.
      float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t key = key0 + 8 * n + 2 * t4 + e;
          if (key >= lim0) s[n][e] = -INFINITY;
          if (key >= lim1) s[n][2 + e] = -INFINITY;
          mx0 = fmaxf(mx0, s[n][e]);
          mx1 = fmaxf(mx1, s[n][2 + e]);
        }
      }
#pragma unroll
      for (int off = 1; off <= 2; off <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
      }
      const float n0 = fmaxf(m0, mx0);
      const float n1 = fmaxf(m1, mx1);
      // A row with no key yet keeps max -inf: exponentiate against 0 so that -inf gives 0.
      const float b0 = n0 == -INFINITY ? 0.0f : n0;
      const float b1 = n1 == -INFINITY ? 0.0f : n1;
      const float alpha0 = exp2f(m0 - b0);
      const float alpha1 = exp2f(m1 - b1);
      m0 = n0;
      m1 = n1;
      l0 *= alpha0;
      l1 *= alpha1;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[n][0] *= alpha0;
        o[n][1] *= alpha0;
        o[n][2] *= alpha1;
        o[n][3] *= alpha1;
      }
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        s[n][0] = exp2f(s[n][0] - b0);
        s[n][1] = exp2f(s[n][1] - b0);
        s[n][2] = exp2f(s[n][2] - b1);
        s[n][3] = exp2f(s[n][3] - b1);
        l0 += s[n][0] + s[n][1];
        l1 += s[n][2] + s[n][3];
      }
      // o += p · v, 16 keys at a time; p's accumulator layout is the A fragment layout.
#pragma unroll
      for (int c = 0; c < kKeys / 16; ++c) {
        uint32_t ph[4], pl[4];
        split2(s[2 * c][0], s[2 * c][1], ph[0], pl[0]);
        split2(s[2 * c][2], s[2 * c][3], ph[1], pl[1]);
        split2(s[2 * c + 1][0], s[2 * c + 1][1], ph[2], pl[2]);
        split2(s[2 * c + 1][2], s[2 * c + 1][3], ph[3], pl[3]);
#pragma unroll
        for (int dn = 0; dn < D / 16; ++dn) {
          uint32_t b[4];
          const int key = 16 * c + (lane & 7) + 8 * ((lane >> 3) & 1);
          const int dim = 16 * dn + 8 * (lane >> 4);
          ptx::ldmatrix_x4_trans(b, vb + static_cast<uint32_t>((key * Sh::pitch + dim) * 2));
          ptx::mma_f16(o[2 * dn], ph, b[0], b[1]);
          ptx::mma_f16(o[2 * dn], pl, b[0], b[1]);
          ptx::mma_f16(o[2 * dn + 1], ph, b[2], b[3]);
          ptx::mma_f16(o[2 * dn + 1], pl, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // buffer `buf` is refilled by the next iteration but one
  }
  ptx::cp_async_wait<0>();
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, off);
    l1 += __shfl_xor_sync(0xffffffffu, l1, off);
  }
  // No key (a negative position): every weight is 0 and the row comes out as zeros.
  const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f;
  const float inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
  if (row0 < a.tokens) {
    float* out = a.out + (row0 * a.n_head + head) * a.out_stride;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      out[8 * n + 2 * t4] = o[n][0] * inv0;
      out[8 * n + 2 * t4 + 1] = o[n][1] * inv0;
    }
  }
  if (row0 + 8 < a.tokens) {
    float* out = a.out + ((row0 + 8) * a.n_head + head) * a.out_stride;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      out[8 * n + 2 * t4] = o[n][2] * inv1;
      out[8 * n + 2 * t4 + 1] = o[n][3] * inv1;
    }
  }
}

template <int D>
void register_sdpa_tc(KernelRegistry& registry) {
  registry.add(make_cuda_kernel<ops::SdpaArgs>("sdpa_tc_f16_hd" + std::to_string(D),
                                               reinterpret_cast<const void*>(&sdpa_tc_kernel<D>), kThreadsTc, true,
                                               TcShape<D>::shared));
}

}  // namespace

void register_attention_tc_cuda_kernels(KernelRegistry& registry) {
  register_sdpa_tc<64>(registry);
  register_sdpa_tc<128>(registry);
}

}  // namespace onepass::cuda
