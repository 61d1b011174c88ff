// CUDA kernels mm_<W>_f32 for W = f16, bf16 and the GGML block formats: the
// matrix-matrix product (prefill) on tensor cores. out [M, N] = x [M, K] · wᵀ.
//
// A block of 8 warps owns a kTcTileM x kTcTileN tile of out and walks K in steps of
// kTcStepK. Each step, every thread loads 16 values of x (f32) and one 32-value unit of
// one weight row (the raw bytes of its block: scale words and quant words) into
// registers; after the block's barrier it loads the next step's while the warps multiply
// the current one, then converts what it loaded to f16 (bf16 for bf16 weights: the tensor
// cores multiply two operands of one type) into the other of two shared-memory buffers.
// So the global loads of step s + 1 are in flight during the products of step s, and the
// dequantization costs ALU work that overlaps the tensor cores, not latency.
// Warps take 32 x 32 sub-tiles: ldmatrix fragments, mma.sync m16n8k16, f32 accumulators.
//
// Rounding: x is rounded to f16 (bf16 for bf16 weights), the block formats' dequantized
// weights to f16; f16 and bf16 weights are exact. Products and sums are f32. The op
// tests' tolerance carries the input rounding (tests/ops/cases_matmul.cpp).
// Blocks along grid x share one weight tile (x tiles fastest), so a weight tile is read
// from DRAM about once and from L2 by the other M tiles.
#include <type_traits>

#include "common.cuh"
#include "onepass/ops/matmul.h"
#include "quant_dot.cuh"
#include "registration.h"

namespace onepass::cuda {
namespace {

constexpr int kBM = static_cast<int>(ops::kCudaTcTileM);
constexpr int kBN = static_cast<int>(ops::kCudaTcTileN);
constexpr int kBK = static_cast<int>(ops::kCudaTcStepK);
constexpr int kThreads = static_cast<int>(ops::kCudaTcThreads);
// Halves per shared-memory row: 144 bytes, so the 8 row addresses of an ldmatrix fall in
// 8 different 16-byte bank groups.
constexpr int kPitch = kBK + 8;
static_assert(2 * (kBM + kBN) * kPitch * 2 == ops::kCudaTcSharedBytes, "shared layout");
static_assert(kBM * kBK == kThreads * 16 && kBN * kBK == kThreads * 32, "one x quarter-row and one unit per thread");

// The operand type of the tensor-core product for weights of type W.
template <DType W>
struct Operand {
  using T = __half;
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};
template <>
struct Operand<DType::bf16> {
  using T = __nv_bfloat16;
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};

// ---- x: 16 consecutive values of one row per thread -------------------------------------

struct XRaw {
  float v[16];
};

__device__ __forceinline__ void load_x(const ops::MatmulArgs& a, int64_t m0, int64_t k0, bool vec, XRaw& r) {
  const int64_t m = m0 + (threadIdx.x >> 2);
  const int64_t k = k0 + 16 * (threadIdx.x & 3);
  const float* p = a.x + m * a.x_stride + k;
  if (vec && m < a.m && k + 16 <= a.k) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float4 f = reinterpret_cast<const float4*>(p)[i];
      r.v[4 * i] = f.x;
      r.v[4 * i + 1] = f.y;
      r.v[4 * i + 2] = f.z;
      r.v[4 * i + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) r.v[i] = (m < a.m && k + i < a.k) ? p[i] : 0.0f;
  }
}

template <DType W>
__device__ __forceinline__ void store_x(const XRaw& r, typename Operand<W>::T* xs) {
  uint32_t h[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) h[i] = Operand<W>::pack(r.v[2 * i], r.v[2 * i + 1]);
  auto* dst = reinterpret_cast<uint4*>(xs + (threadIdx.x >> 2) * kPitch + 16 * (threadIdx.x & 3));
  dst[0] = make_uint4(h[0], h[1], h[2], h[3]);
  dst[1] = make_uint4(h[4], h[5], h[6], h[7]);
}

// ---- w: one 32-value unit of one row per thread -----------------------------------------
// WUnit<W>::load(b, u, raw) loads the raw words of unit u of the block at b;
// WUnit<W>::decode(raw, u, h) turns them into 16 packed pairs of operands in K order.

__device__ __forceinline__ uint32_t byte_of(const uint32_t* words, int i) { return (words[i >> 2] >> (8 * (i & 3))) & 0xFFu; }

__device__ __forceinline__ uint32_t pack_half(float lo, float hi) { return Operand<DType::f16>::pack(lo, hi); }

template <DType W>
struct WUnit;

template <>
struct WUnit<DType::q4_0> {
  struct Raw {
    uint32_t d;
    uint32_t q[4];
  };
  __device__ __forceinline__ static void load(const uint8_t* b, int, Raw& r) {
    r.d = quantdot::ld_u16(b);
    quantdot::ld_words_2(b + 2, r.q);
  }
  __device__ __forceinline__ static void decode(const Raw& r, int, uint32_t (&h)[16]) {
    const float d = quantdot::half_bits_to_float(static_cast<uint16_t>(r.d));
#pragma unroll
    for (int p = 0; p < 16; ++p) {
      const int byte = 2 * (p & 7);
      const int shift = p < 8 ? 0 : 4;
      const float lo = static_cast<float>(static_cast<int>((byte_of(r.q, byte) >> shift) & 0xF) - 8);
      const float hi = static_cast<float>(static_cast<int>((byte_of(r.q, byte + 1) >> shift) & 0xF) - 8);
      h[p] = pack_half(d * lo, d * hi);
    }
  }
};

template <>
struct WUnit<DType::q4_1> {
  struct Raw {
    uint32_t dm;
    uint32_t q[4];
  };
  __device__ __forceinline__ static void load(const uint8_t* b, int, Raw& r) {
    r.dm = quantdot::ld_u32_2(b);
    quantdot::ld_words_2(b + 4, r.q);
  }
  __device__ __forceinline__ static void decode(const Raw& r, int, uint32_t (&h)[16]) {
    const float d = quantdot::half_bits_to_float(static_cast<uint16_t>(r.dm & 0xFFFFu));
    const float m = quantdot::half_bits_to_float(static_cast<uint16_t>(r.dm >> 16));
#pragma unroll
    for (int p = 0; p < 16; ++p) {
      const int byte = 2 * (p & 7);
      const int shift = p < 8 ? 0 : 4;
      const float lo = static_cast<float>((byte_of(r.q, byte) >> shift) & 0xF);
      const float hi = static_cast<float>((byte_of(r.q, byte + 1) >> shift) & 0xF);
      h[p] = pack_half(d * lo + m, d * hi + m);
    }
  }
};

template <>
struct WUnit<DType::q8_0> {
  struct Raw {
    uint32_t d;
    uint32_t q[8];
  };
  __device__ __forceinline__ static void load(const uint8_t* b, int, Raw& r) {
    r.d = quantdot::ld_u16(b);
    quantdot::ld_words_2(b + 2, r.q);
  }
  __device__ __forceinline__ static void decode(const Raw& r, int, uint32_t (&h)[16]) {
    const float d = quantdot::half_bits_to_float(static_cast<uint16_t>(r.d));
#pragma unroll
    for (int p = 0; p < 16; ++p) {
      const float lo = static_cast<float>(static_cast<int8_t>(byte_of(r.q, 2 * p)));
      const float hi = static_cast<float>(static_cast<int8_t>(byte_of(r.q, 2 * p + 1)));
      h[p] = pack_half(d * lo, d * hi);
    }
  }
};

// q4_k/q5_k header: d, dmin (f16) and the 12 bytes of 6-bit scales and mins, as 4 words.
// Scale and min of sub-block u as quantdot::kquant_scale_min, from the words.
__device__ __forceinline__ void kquant_header(const uint32_t (&hd)[4], int u, float& scale, float& offset) {
  const int j = u & 3;
  const uint32_t b1 = (hd[1] >> (8 * j)) & 0xFFu;  // scales byte j
  const uint32_t b2 = (hd[2] >> (8 * j)) & 0xFFu;  // scales byte j + 4
  const uint32_t b3 = (hd[3] >> (8 * j)) & 0xFFu;  // scales byte j + 8
  uint32_t sc, mn;
  if (u < 4) {
    sc = b1 & 63u;
    mn = b2 & 63u;
  } else {
    sc = (b3 & 0xFu) | ((b1 >> 6) << 4);
    mn = (b3 >> 4) | ((b2 >> 6) << 4);
  }
  const float d = quantdot::half_bits_to_float(static_cast<uint16_t>(hd[0] & 0xFFFFu));
  const float dmin = quantdot::half_bits_to_float(static_cast<uint16_t>(hd[0] >> 16));
  scale = d * static_cast<float>(sc);
  offset = dmin * static_cast<float>(mn);
}

template <>
struct WUnit<DType::q4_k> {
  struct Raw {
    uint32_t hd[4];
    uint32_t q[8];
  };
  // 144-byte blocks: 16-byte aligned when the rows are (checked by the caller).
  __device__ __forceinline__ static void load(const uint8_t* b, int u, Raw& r) {
    quantdot::ld_words_2(b, r.hd);
    quantdot::ld_words_2(b + 16 + 32 * (u >> 1), r.q);
  }
  __device__ __forceinline__ static void decode(const Raw& r, int u, uint32_t (&h)[16]) {
    float scale, offset;
    kquant_header(r.hd, u, scale, offset);
    const int shift = 4 * (u & 1);
#pragma unroll
    for (int p = 0; p < 16; ++p) {
      const float lo = static_cast<float>((byte_of(r.q, 2 * p) >> shift) & 0xF);
      const float hi = static_cast<float>((byte_of(r.q, 2 * p + 1) >> shift) & 0xF);
      h[p] = pack_half(scale * lo - offset, scale * hi - offset);
    }
  }
};

template <>
struct WUnit<DType::q5_k> {
  struct Raw {
    uint32_t hd[4];
    uint32_t qh[8];
    uint32_t q[8];
  };
  __device__ __forceinline__ static void load(const uint8_t* b, int u, Raw& r) {
    quantdot::ld_words_2(b, r.hd);
    quantdot::ld_words_2(b + 16, r.qh);
    quantdot::ld_words_2(b + 48 + 32 * (u >> 1), r.q);
  }
  __device__ __forceinline__ static void decode(const Raw& r, int u, uint32_t (&h)[16]) {
    float scale, offset;
    kquant_header(r.hd, u, scale, offset);
    const int shift = 4 * (u & 1);
#pragma unroll
    for (int p = 0; p < 16; ++p) {
      float v[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int l = 2 * p + e;
        const uint32_t q = ((byte_of(r.q, l) >> shift) & 0xFu) | (((byte_of(r.qh, l) >> u) & 1u) << 4);
        v[e] = scale * static_cast<float>(q) - offset;
      }
      h[p] = pack_half(v[0], v[1]);
    }
  }
};

template <>
struct WUnit<DType::q6_k> {
  struct Raw {
    uint32_t ql[8];
    uint32_t qh[8];
    uint32_t scales;  // the two int8 scales of the unit
    uint32_t d;
  };
  // 210-byte blocks: 2-byte aligned only.
  __device__ __forceinline__ static void load(const uint8_t* b, int u, Raw& r) {
    const int hf = u >> 2;
    const int s = u & 3;
    quantdot::ld_words_2(b + 64 * hf + 32 * (s & 1), r.ql);
    quantdot::ld_words_2(b + 128 + 32 * hf, r.qh);
    r.scales = quantdot::ld_u16(b + 192 + 2 * u);
    r.d = quantdot::ld_u16(b + 208);
  }
  __device__ __forceinline__ static void decode(const Raw& r, int u, uint32_t (&h)[16]) {
    const int s = u & 3;
    const float d = quantdot::half_bits_to_float(static_cast<uint16_t>(r.d));
    const float sc_lo = d * static_cast<float>(static_cast<int8_t>(r.scales & 0xFFu));
    const float sc_hi = d * static_cast<float>(static_cast<int8_t>(r.scales >> 8));
    const int lo_shift = 4 * (s >> 1);
#pragma unroll
    for (int p = 0; p < 16; ++p) {
      float v[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int l = 2 * p + e;
        const int q = static_cast<int>(((byte_of(r.ql, l) >> lo_shift) & 0xFu) | (((byte_of(r.qh, l) >> (2 * s)) & 3u) << 4));
        v[e] = (l < 16 ? sc_lo : sc_hi) * static_cast<float>(q - 32);
      }
      h[p] = pack_half(v[0], v[1]);
    }
  }
};

// Dense f16/bf16 rows: the 64 bytes of the unit as they are.
template <DType W>
struct WDense {
  struct Raw {
    uint32_t h[16];
  };
};

template <DType W>
constexpr bool kDense = W == DType::f16 || W == DType::bf16;

template <DType W>
struct WStage {
  using Raw = typename std::conditional_t<kDense<W>, WDense<W>, WUnit<W>>::Raw;
  Raw raw;
  bool valid;
  int u;  // unit within its block (k-quants)
};

template <DType W>
__device__ __forceinline__ void load_w(const ops::MatmulArgs& a, int64_t n0, int64_t k0, bool vec, WStage<W>& s) {
  const int64_t n = n0 + (threadIdx.x >> 1);
  const int64_t k = k0 + 32 * (threadIdx.x & 1);
  const auto* row = static_cast<const uint8_t*>(a.w) + n * a.w_row_bytes;
  s.valid = n < a.n && k < a.k;
  if constexpr (kDense<W>) {
    const auto* p = reinterpret_cast<const uint16_t*>(row) + k;
    if (vec && s.valid && k + 32 <= a.k) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint4 v = reinterpret_cast<const uint4*>(p)[i];
        s.raw.h[4 * i] = v.x;
        s.raw.h[4 * i + 1] = v.y;
        s.raw.h[4 * i + 2] = v.z;
        s.raw.h[4 * i + 3] = v.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const uint32_t lo = s.valid && k + 2 * i < a.k ? p[2 * i] : 0u;
        const uint32_t hi = s.valid && k + 2 * i + 1 < a.k ? p[2 * i + 1] : 0u;
        s.raw.h[i] = lo | (hi << 16);
      }
    }
  } else {
    using F = quantdot::Format<W>;
    const int64_t unit = k / 32;
    const int64_t block = unit / F::kUnits;
    s.u = static_cast<int>(unit - block * F::kUnits);
    if (s.valid) WUnit<W>::load(row + block * F::kBlockBytes, s.u, s.raw);
  }
}

template <DType W>
__device__ __forceinline__ void store_w(const WStage<W>& s, typename Operand<W>::T* ws) {
  uint32_t h[16];
  if constexpr (kDense<W>) {
#pragma unroll
    for (int i = 0; i < 16; ++i) h[i] = s.raw.h[i];
  } else {
    if (s.valid) {
      WUnit<W>::decode(s.raw, s.u, h);
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) h[i] = 0u;
    }
  }
  auto* dst = reinterpret_cast<uint4*>(ws + (threadIdx.x >> 1) * kPitch + 32 * (threadIdx.x & 1));
#pragma unroll
  for (int i = 0; i < 4; ++i) dst[i] = make_uint4(h[4 * i], h[4 * i + 1], h[4 * i + 2], h[4 * i + 3]);
}

// ---- tensor-core products ----------------------------------------------------------------

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

template <DType W>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (W == DType::bf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Warp w multiplies rows 32 (w % 2) .. +31 of the x tile by rows 32 (w / 2) .. +31 of the
// w tile over one K step: 2 x 4 m16n8 accumulators.
template <DType W>
__device__ __forceinline__ void multiply_step(const typename Operand<W>::T* xs, const typename Operand<W>::T* ws,
                                              float (&acc)[2][4][4]) {
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int wm = 32 * (warp & 1);
  const int wn = 32 * (warp >> 1);
#pragma unroll
  for (int kk = 0; kk < kBK; kk += 16) {
    uint32_t af[2][4];
    uint32_t bf[2][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) ldmatrix_x4(af[mi], xs + (wm + 16 * mi + (lane & 15)) * kPitch + kk + 8 * (lane >> 4));
#pragma unroll
    for (int nj = 0; nj < 2; ++nj) {
      ldmatrix_x4(bf[nj], ws + (wn + 16 * nj + (lane & 7) + 8 * (lane >> 4)) * kPitch + kk + 8 * ((lane >> 3) & 1));
    }
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) mma<W>(acc[mi][ni], af[mi], bf[ni >> 1][2 * (ni & 1)], bf[ni >> 1][2 * (ni & 1) + 1]);
    }
  }
}

template <DType W>
__global__ void __launch_bounds__(kThreads, 2) mm_tc_kernel(const __grid_constant__ ops::MatmulArgs a) {
  using T = typename Operand<W>::T;
  extern __shared__ __align__(16) unsigned char smem[];
  T* xs = reinterpret_cast<T*>(smem);     // [2][kBM][kPitch]
  T* ws = xs + 2 * kBM * kPitch;          // [2][kBN][kPitch]
  const int64_t m0 = int64_t{blockIdx.x} * kBM;
  const int64_t n0 = int64_t{blockIdx.y} * kBN;
  const bool x_vec = a.x_stride % 4 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  const bool w_vec = a.w_row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(a.w) % 16 == 0;
  float acc[2][4][4] = {};
  pdl_wait();
  const int64_t steps = (a.k + kBK - 1) / kBK;
  XRaw xr;
  WStage<W> wr;
  load_x(a, m0, 0, x_vec, xr);
  load_w<W>(a, n0, 0, w_vec, wr);
  for (int64_t s = 0; s < steps; ++s) {
    const int buf = static_cast<int>(s & 1);
    store_x<W>(xr, xs + buf * kBM * kPitch);
    store_w<W>(wr, ws + buf * kBN * kPitch);
    // One barrier per step: a buffer is rewritten two steps later, after every warp has
    // passed the next step's barrier and so finished multiplying it.
    __syncthreads();
    if (s + 1 < steps) {
      load_x(a, m0, (s + 1) * kBK, x_vec, xr);
      load_w<W>(a, n0, (s + 1) * kBK, w_vec, wr);
    }
    multiply_step<W>(xs + buf * kBM * kPitch, ws + buf * kBN * kPitch, acc);
  }
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int lane = static_cast<int>(threadIdx.x & 31);
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t m = m0 + 32 * (warp & 1) + 16 * mi + (lane >> 2) + 8 * half;
      if (m >= a.m) continue;
      float* row = a.out + m * a.out_stride;
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int64_t n = n0 + 32 * (warp >> 1) + 8 * ni + 2 * (lane & 3);
        if (n < a.n) row[n] = acc[mi][ni][2 * half];
        if (n + 1 < a.n) row[n + 1] = acc[mi][ni][2 * half + 1];
      }
    }
  }
}

template <DType W>
void register_tc(KernelRegistry& registry) {
  registry.add(make_cuda_kernel<ops::MatmulArgs>("mm_" + std::string(dtype_name(W)) + "_f32",
                                                 reinterpret_cast<const void*>(&mm_tc_kernel<W>), kThreads, true,
                                                 ops::kCudaTcSharedBytes));
}

}  // namespace

void register_matmul_tc_cuda_kernels(KernelRegistry& registry) {
  register_tc<DType::f16>(registry);
  register_tc<DType::bf16>(registry);
  register_tc<DType::q4_0>(registry);
  register_tc<DType::q4_1>(registry);
  register_tc<DType::q8_0>(registry);
  register_tc<DType::q4_k>(registry);
  register_tc<DType::q5_k>(registry);
  register_tc<DType::q6_k>(registry);
}

}  // namespace onepass::cuda
