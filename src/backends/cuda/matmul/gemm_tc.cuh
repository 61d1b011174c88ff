// The tensor-core pipeline of the matrix-matrix products on W = f16, bf16 and the GGML
// block formats (device code), used by mm_<W>_f32 (gemm_tc.cu), the split products
// mm_split_m<BM>_<W>_f32 (gemm_tc_split.cu) and the grouped expert
// products mm_id_tc_<W>_f32 (matmul_id.cu): block shape, the shared-memory layout per
// weight type, the cp.async copies of x and w, the dequantization of a K step's weights
// to f16 and the m16n8k16 products of a step. gemm_tc.cu describes the pipeline.
#pragma once

#include <type_traits>

#include "../kernels/common.cuh"
#include "../kernels/ptx.cuh"
#include "../kernels/quant_dot.cuh"
#include "dequant_unit.cuh"
#include "launch.h"
#include "onepass/ops/matmul.h"

namespace onepass::cuda::tc {

constexpr int kBM = static_cast<int>(kCudaTcTileM);
constexpr int kBN = static_cast<int>(kCudaTcTileN);
constexpr int kBK = static_cast<int>(kCudaTcStepK);
constexpr int kThreads = static_cast<int>(kCudaTcThreads);
constexpr int kStages = 4;
static_assert(kBK == 64 && kBN * 2 == kThreads && kBM == 64 && kBN == 64, "one 32-value unit per thread and step");
// Row pitches, +8 elements: the 8 rows an ldmatrix (or a half-warp's 8-byte loads) touch
// fall in different bank groups.
constexpr int kXPitch = kBK + 8;  // floats
constexpr int kWPitch = kBK + 8;  // halves
constexpr int kXStage = kBM * kXPitch * 4;
constexpr int kWTile = kBN * kWPitch * 2;

// A block's tile of BM rows of x (64; 32 or 16 for the split products of a few dozen rows)
// by kBN weight rows: its 4 warps take warp_rows x warp_cols sub-tiles of mi x ni m16n8
// accumulators (32 x 32 for BM = 64, 32 x 16 for 32, 16 x 16 for 16).
template <int BM>
struct Tile {
  static_assert(BM == 16 || BM == 32 || BM == 64, "tile rows");
  static constexpr int warp_rows = BM < 32 ? BM : 32;
  static constexpr int warps_m = BM / warp_rows;
  static constexpr int warp_cols = kBN * warps_m / 4;
  static constexpr int mi = warp_rows / 16;
  static constexpr int ni = warp_cols / 8;
  static constexpr int x_stage = BM * kXPitch * 4;  // bytes of one x stage
};

template <DType W>
constexpr bool kDense = W == DType::f16 || W == DType::bf16;

// Where the block's shared memory goes for weights of type W and BM rows of x (bytes).
template <DType W, int BM = kBM>
struct Layout {
  static constexpr int block_values = [] {
    if constexpr (kDense<W>) {
      return kBK;
    } else {
      return quantdot::Format<W>::kUnits * 32;
    }
  }();
  static constexpr int block_bytes = [] {
    if constexpr (kDense<W>) {
      return 2 * kBK;
    } else {
      return quantdot::Format<W>::kBlockBytes;
    }
  }();
  // Raw weight bytes per row that one cp.async stage brings: one K step, or 256 values
  // (4 steps) for the k-quants (one super-block) and for the 32-value formats but q8_0,
  // whose 8 blocks are then 144 to 192 bytes, so that 16-byte aligned rows copy in 16-byte
  // pieces (q8_0's 272 bytes would cost a block per SM).
  static constexpr int raw_values = block_values > kBK || (block_values == 32 && W != DType::q8_0) ? 256 : kBK;
  static constexpr int steps_per_raw = raw_values / kBK;
  static constexpr int raw_bytes = raw_values / block_values * block_bytes;
  static constexpr int raw_pitch = kDense<W> ? kWPitch * 2 : (raw_bytes + 4 + 15) / 16 * 16;
  static constexpr int raw_slots = steps_per_raw == 1 ? kStages : 2;
  static constexpr int x_offset = 0;
  static constexpr int raw_offset = kStages * Tile<BM>::x_stage;
  static constexpr int tile_offset = raw_offset + raw_slots * kBN * raw_pitch;
  static constexpr int bytes = tile_offset + (kDense<W> ? 0 : 2 * kWTile);
};

using ptx::cp_async16;
using ptx::cp_async4;
using ptx::cp_async_commit;
using ptx::cp_async_wait;
using ptx::smem_addr;
using ptx::st_shared_v4;
using dequant::Operand;
using dequant::WUnit;

// What each thread copies, fixed for the whole K walk (addresses of stage 0 / K step 0).
// Rows past M or N are neither copied nor zeroed: they only feed outputs that are not
// stored. Values past K are zeroed: they feed every output.
struct XPlan {
  const float* src;  // x[m0 + row, col]
  int64_t stride8;   // floats from row to row + 8
  uint32_t dst;      // shared address of (row, col) in stage 0
  uint32_t rows;     // bit j: row + 8 j < M
  int col;
};

// x: column chunk col .. +3 (floats) of rows row + 8 j, j < BM / 8.
template <int BM = kBM>
__device__ __forceinline__ XPlan x_plan(const ops::MatmulArgs& a, int64_t m0, uint32_t base) {
  XPlan p;
  const int row = static_cast<int>(threadIdx.x >> 4);
  p.col = 4 * static_cast<int>(threadIdx.x & 15);
  p.src = a.x + (m0 + row) * a.x_stride + p.col;
  p.stride8 = 8 * a.x_stride;
  p.dst = base + static_cast<uint32_t>((row * kXPitch + p.col) * 4);
  p.rows = 0;
#pragma unroll
  for (int j = 0; j < BM / 8; ++j) p.rows |= (m0 + row + 8 * j < a.m ? 1u : 0u) << j;
  return p;
}

template <int BM = kBM>
__device__ __forceinline__ void x_issue(const ops::MatmulArgs& a, const XPlan& p, bool vec, int64_t k0, int slot) {
  const uint32_t dst = p.dst + static_cast<uint32_t>(slot * Tile<BM>::x_stage);
  const float* src = p.src + k0;
  if (vec && k0 + p.col + 4 <= a.k) {
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) {
      if ((p.rows >> j) & 1u) cp_async16(dst + j * 8 * kXPitch * 4, src + j * p.stride8);
    }
  } else {
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) {
      if (!((p.rows >> j) & 1u)) continue;
      uint32_t v[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] = __float_as_uint(k0 + p.col + e < a.k ? src[j * p.stride8 + e] : 0.0f);
      st_shared_v4(dst + j * 8 * kXPitch * 4, v[0], v[1], v[2], v[3]);
    }
  }
}

struct WPlan {
  const uint8_t* src;  // dense: w[n0 + row, col]; block formats: the start of row t / 2
  int64_t stride16;    // dense: bytes from row to row + 16
  uint32_t dst;        // shared address of the thread's first piece in stage 0
  uint32_t rows;       // dense: bit j: row + 16 j < N; block formats: bit 0: row < N
  int col;             // dense: first value of the chunk
};

// Dense weights: chunk col .. +7 (values) of rows row + 16 j, j < 4. Block formats: the
// raw bytes of row t / 2, pieces t % 2, t % 2 + 2, ...
template <DType W>
__device__ __forceinline__ WPlan w_plan(const ops::MatmulArgs& a, int64_t n0, uint32_t base) {
  using L = Layout<W>;
  WPlan p;
  const auto* w = static_cast<const uint8_t*>(a.w);
  if constexpr (kDense<W>) {
    const int row = static_cast<int>(threadIdx.x >> 3);
    p.col = 8 * static_cast<int>(threadIdx.x & 7);
    p.src = w + (n0 + row) * a.w_row_bytes + 2 * p.col;
    p.stride16 = 16 * a.w_row_bytes;
    p.dst = base + static_cast<uint32_t>((row * kWPitch + p.col) * 2);
    p.rows = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) p.rows |= (n0 + row + 16 * j < a.n ? 1u : 0u) << j;
  } else {
    const int row = static_cast<int>(threadIdx.x >> 1);
    p.col = 0;
    p.src = w + (n0 + row) * a.w_row_bytes;
    p.stride16 = 0;
    p.dst = base + static_cast<uint32_t>(row * L::raw_pitch);
    p.rows = n0 + row < a.n ? 1u : 0u;
  }
  return p;
}

// Issues the weight copies of K step q into ring slot q % kStages (dense), or, when q
// starts a raw stage j of a block format, the raw bytes of stage j into slot j % raw_slots
// (16-byte pieces when rows and stages are 16-byte aligned, else 4-byte words from the
// word that holds the stage's first byte).
template <DType W>
__device__ __forceinline__ void w_issue(const ops::MatmulArgs& a, const WPlan& p, bool vec, int64_t q) {
  using L = Layout<W>;
  if constexpr (kDense<W>) {
    const int64_t k0 = q * kBK;
    const uint32_t dst = p.dst + static_cast<uint32_t>((q % kStages) * kBN * L::raw_pitch);
    const auto* src = reinterpret_cast<const uint16_t*>(p.src) + k0;
    if (vec && k0 + p.col + 8 <= a.k) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if ((p.rows >> j) & 1u) cp_async16(dst + j * 16 * kWPitch * 2, reinterpret_cast<const uint8_t*>(src) + j * p.stride16);
      }
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (!((p.rows >> j) & 1u)) continue;
        const auto* r = reinterpret_cast<const uint16_t*>(reinterpret_cast<const uint8_t*>(src) + j * p.stride16);
        uint32_t v[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const uint32_t lo = k0 + p.col + 2 * e < a.k ? r[2 * e] : 0u;
          const uint32_t hi = k0 + p.col + 2 * e + 1 < a.k ? r[2 * e + 1] : 0u;
          v[e] = lo | (hi << 16);
        }
        st_shared_v4(dst + j * 16 * kWPitch * 2, v[0], v[1], v[2], v[3]);
      }
    }
  } else {
    if (q % L::steps_per_raw != 0 || !p.rows) return;
    const int64_t j = q / L::steps_per_raw;
    const uint32_t dst = p.dst + static_cast<uint32_t>((j % L::raw_slots) * kBN * L::raw_pitch);
    const int64_t begin = j * L::raw_bytes;
    const int64_t row_data = a.k / L::block_values * L::block_bytes;
    const int valid = static_cast<int>(row_data - begin < L::raw_bytes ? row_data - begin : L::raw_bytes);
    const uint8_t* first = p.src + begin;
    const int par = static_cast<int>(threadIdx.x & 1);
    if (vec) {
      for (int c = 16 * par; c < valid; c += 32) cp_async16(dst + c, first + c);
    } else {
      const int misalign = static_cast<int>(reinterpret_cast<uintptr_t>(first) & 3);
      for (int c = 4 * par; c < misalign + valid; c += 8) cp_async4(dst + c, first - misalign + c);
    }
  }
}

// Dequantizes this thread's unit of K step q into operand tile q % 2: row threadIdx / 2,
// values 32 (threadIdx % 2) .. +31 of the step (zeros past K).
template <DType W, int BM = kBM>
__device__ __forceinline__ void dequant_step(const ops::MatmulArgs& a, const WPlan& p, bool vec,
                                             unsigned char* smem, int64_t q) {
  using L = Layout<W, BM>;
  const int r = static_cast<int>(threadIdx.x >> 1);
  const int half = static_cast<int>(threadIdx.x & 1);
  const int64_t k = q * kBK + 32 * half;
  uint32_t h[16];
  if (!p.rows) return;  // a row past N: its tile row feeds no stored output
  if (k < a.k) {
    const int64_t j = q / L::steps_per_raw;
    const unsigned char* row = smem + L::raw_offset + (j % L::raw_slots) * kBN * L::raw_pitch + r * L::raw_pitch;
    if (!vec) row += reinterpret_cast<uintptr_t>(p.src + j * L::raw_bytes) & 3;
    // The unit's 32 values: unit u of the stage; for the 32-value formats that is block u.
    int u = static_cast<int>(q % L::steps_per_raw) * 2 + half;
    if constexpr (L::block_values == 32) {
      row += u * L::block_bytes;
      u = 0;
    }
    typename WUnit<W>::Raw raw;
    WUnit<W>::load(row, u, raw);
    WUnit<W>::decode(raw, u, h);
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) h[i] = 0u;
  }
  auto* dst = reinterpret_cast<uint4*>(smem + L::tile_offset + (q & 1) * kWTile + (r * kWPitch + 32 * half) * 2);
#pragma unroll
  for (int i = 0; i < 4; ++i) dst[i] = make_uint4(h[4 * i], h[4 * i + 1], h[4 * i + 2], h[4 * i + 3]);
}

// ---- tensor-core products ----------------------------------------------------------------

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) { ptx::ldmatrix_x4(r, smem_addr(p)); }

template <DType W>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (W == DType::bf16) {
    ptx::mma_bf16(c, a, b0, b1);
  } else {
    ptx::mma_f16(c, a, b0, b1);
  }
}

// Warp w multiplies rows warp_rows (w % warps_m) .. of the x stage by rows warp_cols
// (w / warps_m) .. of the w tile over one K step (Tile<BM>): mi x ni m16n8 accumulators
// (2 x 4 for BM = 64: rows 32 (w % 2) .. +31 by rows 32 (w / 2) .. +31). x fragments are
// read as f32 pairs and rounded here.
template <DType W, int BM = kBM>
__device__ __forceinline__ void multiply_step(const float* xs, const typename Operand<W>::T* ws,
                                              float (&acc)[Tile<BM>::mi][Tile<BM>::ni][4]) {
  using S = Tile<BM>;
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int wm = S::warp_rows * (warp % S::warps_m);
  const int wn = S::warp_cols * (warp / S::warps_m);
  const int g = lane >> 2;
  const int t = lane & 3;
#pragma unroll
  for (int kk = 0; kk < kBK; kk += 16) {
    uint32_t af[S::mi][4];
    uint32_t bf[S::ni / 2][4];
#pragma unroll
    for (int mi = 0; mi < S::mi; ++mi) {
      const float* x0 = xs + (wm + 16 * mi + g) * kXPitch + kk + 2 * t;
      const float* x8 = x0 + 8 * kXPitch;
      const float2 v0 = *reinterpret_cast<const float2*>(x0);
      const float2 v1 = *reinterpret_cast<const float2*>(x8);
      const float2 v2 = *reinterpret_cast<const float2*>(x0 + 8);
      const float2 v3 = *reinterpret_cast<const float2*>(x8 + 8);
      af[mi][0] = Operand<W>::pack(v0.x, v0.y);
      af[mi][1] = Operand<W>::pack(v1.x, v1.y);
      af[mi][2] = Operand<W>::pack(v2.x, v2.y);
      af[mi][3] = Operand<W>::pack(v3.x, v3.y);
    }
#pragma unroll
    for (int nj = 0; nj < S::ni / 2; ++nj) {
      ldmatrix_x4(bf[nj], ws + (wn + 16 * nj + (lane & 7) + 8 * (lane >> 4)) * kWPitch + kk + 8 * ((lane >> 3) & 1));
    }
#pragma unroll
    for (int mi = 0; mi < S::mi; ++mi) {
#pragma unroll
      for (int ni = 0; ni < S::ni; ++ni) mma<W>(acc[mi][ni], af[mi], bf[ni >> 1][2 * (ni & 1)], bf[ni >> 1][2 * (ni & 1) + 1]);
    }
  }
}

}  // namespace onepass::cuda::tc
