// CUDA kernels mm_x8_<W>_f32: the product of up to 8 rows of x (batched decode steps of 8
// sequences, cuda_mm_x8) with block-format weights on the 8-bit integer tensor cores,
// out [M, N] = x [M, K] · wᵀ, and mm_x8_m32_<W>_f32 of 9 to 32 rows: the kernel body takes NT
// tiles of 8 rows of x, 1 or 4 (cuda_mm_x8_tiles).
//
// A block of 8 warps takes one range of K stages of 256 values and, in turn, N tiles of 128
// weight rows (16 per warp); grid {splits, tile groups} in clusters of {splits, 1}
// (cuda_mm_x8_dims). It first issues cp.async copies of its first weight stages (the raw
// block bytes as stored) into a ring, before the PDL wait, since no earlier kernel writes
// weights; the ring then streams the (tile, stage) pairs in order, each thread copying the
// same pieces of every stage. After the wait the block rounds its range of x to int8 in
// shared memory once for all its tiles: each 32 values of a row with one scale (d = amax /
// 127, as the mv kernels), their exact f32 sum and a constant that folds the conversion of
// the int32 sum and the format's offset into one fma; rows past M (up to the 8 NT of the x
// tiles) are zeros. A warp then unpacks a 32-value unit of its 16 rows to 8-bit integers in
// the A fragment of an m16n8k32 product (two for q6_k, whose scales cover 16 values),
// multiplies it by 8 rows of x at a time and adds the sums, scaled, to f32 accumulators. The
// weights are read once for all rows of x, and the products cost integer tensor-core
// instructions instead of a dequantization to f16. A cluster keeps the partial sums of up to
// cuda_mm_x8_flush_tiles tiles, then adds them through distributed shared memory in rank order,
// so every run gives the same sums; an unsplit block stores its sums directly.
#include <cooperative_groups.h>

#include <string>

#include "../kernels/common.cuh"
#include "../kernels/ptx.cuh"
#include "../kernels/quant_dot.cuh"
#include "../kernels/registration.h"
#include "launch.h"
#include "onepass/ops/matmul.h"

namespace onepass::cuda {
namespace {

namespace cg = cooperative_groups;
using ptx::cp_async16;
using ptx::cp_async8;
using ptx::cp_async_commit;
using ptx::cp_async_wait;
using ptx::smem_addr;
using quantdot::half_bits_to_float;
using quantdot::ld_u16;
using quantdot::ld_u32_2;

constexpr int kRows = kCudaMmX8BlockRows;  // weight rows of a block, 16 per warp
constexpr int kThreads = 2 * kRows;
constexpr int kStageK = kCudaMmX8StageK;   // values of K per stage: 8 units of 32
constexpr int kXPitch = kCudaMmX8XRowBytes - kCudaMmX8ScaleRowBytes;  // int8 x of a row in a stage
constexpr int kSPitch = kCudaMmX8ScaleRowBytes;  // its 8 (d, z, Σ x, 0) quadruples, padded
static_assert(kXPitch == kStageK + 16 && kSPitch == 144, "pitches of 4 (mod 8) words and 16-byte rows");
static_assert(kStageK == 256, "8 units per stage");

__device__ __forceinline__ uint32_t ld_u32(const unsigned char* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Bit 0 of byte i = bit i of n (n < 16).
__device__ __forceinline__ uint32_t spread4(uint32_t n) { return (n * 0x00204081u) & 0x01010101u; }

// One 32-value unit of one weight row: the A-fragment words of values 4t .. 4t + 3 (lo)
// and 16 + 4t .. 16 + 4t + 3 (hi) as 8-bit integers q, and w = a (q + kC) + b, b only where
// kMin (q6_k: w = a sc q,
// sc = s0 for the first 16 values, s1 for the rest).
struct Unit {
  uint32_t lo, hi;
  float a, b;
  int s0, s1;
};

// Per format: whether q is unsigned, b as a constant multiple kC of a (q4_0, q5_0), or its
// own value (kMin), and unit j (0..7) of a stage's row data at `row` (2-byte aligned).
template <DType W>
struct X8;

template <>
struct X8<DType::q4_0> {
  static constexpr bool kUnsigned = true, kMin = false;
  static constexpr float kC = -8.0f;
  __device__ static Unit unit(const unsigned char* row, int j, int t) {
    const unsigned char* b = row + 18 * j;
    const uint32_t w = ld_u32_2(b + 2 + 4 * t);
    const float d = half_bits_to_float(ld_u16(b));
    return {w & 0x0F0F0F0Fu, (w >> 4) & 0x0F0F0F0Fu, d, 0.0f, 0, 0};
  }
};

template <>
struct X8<DType::q4_1> {
  static constexpr bool kUnsigned = true, kMin = true;
  static constexpr float kC = 0.0f;
  __device__ static Unit unit(const unsigned char* row, int j, int t) {
    const unsigned char* b = row + 20 * j;
    const uint32_t w = ld_u32(b + 4 + 4 * t);
    return {w & 0x0F0F0F0Fu, (w >> 4) & 0x0F0F0F0Fu, half_bits_to_float(ld_u16(b)), half_bits_to_float(ld_u16(b + 2)), 0, 0};
  }
};

template <>
struct X8<DType::q8_0> {
  static constexpr bool kUnsigned = false, kMin = false;
  static constexpr float kC = 0.0f;
  __device__ static Unit unit(const unsigned char* row, int j, int t) {
    const unsigned char* b = row + 34 * j;
    return {ld_u32_2(b + 2 + 4 * t), ld_u32_2(b + 18 + 4 * t), half_bits_to_float(ld_u16(b)), 0.0f, 0, 0};
  }
};

template <>
struct X8<DType::q5_0> {
  static constexpr bool kUnsigned = true, kMin = false;
  static constexpr float kC = -16.0f;
  __device__ static Unit unit(const unsigned char* row, int j, int t) {
    const unsigned char* b = row + 22 * j;
    const uint32_t qh = ld_u32_2(b + 2);
    const uint32_t w = ld_u32_2(b + 6 + 4 * t);
    const float d = half_bits_to_float(ld_u16(b));
    return {(w & 0x0F0F0F0Fu) | (spread4((qh >> (4 * t)) & 0xF) << 4),
            ((w >> 4) & 0x0F0F0F0Fu) | (spread4((qh >> (16 + 4 * t)) & 0xF) << 4), d, 0.0f, 0, 0};
  }
};

template <>
struct X8<DType::q5_1> {
  static constexpr bool kUnsigned = true, kMin = true;
  static constexpr float kC = 0.0f;
  __device__ static Unit unit(const unsigned char* row, int j, int t) {
    const unsigned char* b = row + 24 * j;
    const uint32_t qh = ld_u32(b + 4);
    const uint32_t w = ld_u32(b + 8 + 4 * t);
    return {(w & 0x0F0F0F0Fu) | (spread4((qh >> (4 * t)) & 0xF) << 4),
            ((w >> 4) & 0x0F0F0F0Fu) | (spread4((qh >> (16 + 4 * t)) & 0xF) << 4), half_bits_to_float(ld_u16(b)),
            half_bits_to_float(ld_u16(b + 2)), 0, 0};
  }
};

template <>
struct X8<DType::q4_k> {
  static constexpr bool kUnsigned = true, kMin = true;
  static constexpr float kC = 0.0f;
  __device__ static Unit unit(const unsigned char* row, int j, int t) {
    int sc, mn;
    quantdot::kquant_scale_min(row + 4, j, sc, mn);
    const unsigned char* qs = row + 16 + 32 * (j >> 1);
    const int shift = 4 * (j & 1);
    return {(ld_u32(qs + 4 * t) >> shift) & 0x0F0F0F0Fu, (ld_u32(qs + 16 + 4 * t) >> shift) & 0x0F0F0F0Fu,
            half_bits_to_float(ld_u16(row)) * static_cast<float>(sc),
            -half_bits_to_float(ld_u16(row + 2)) * static_cast<float>(mn), 0, 0};
  }
};

template <>
struct X8<DType::q5_k> {
  static constexpr bool kUnsigned = true, kMin = true;
  static constexpr float kC = 0.0f;
  __device__ static Unit unit(const unsigned char* row, int j, int t) {
    int sc, mn;
    quantdot::kquant_scale_min(row + 4, j, sc, mn);
    const unsigned char* qh = row + 16;
    const unsigned char* qs = row + 48 + 32 * (j >> 1);
    const int shift = 4 * (j & 1);
    const uint32_t lo = ((ld_u32(qs + 4 * t) >> shift) & 0x0F0F0F0Fu) | (((ld_u32(qh + 4 * t) >> j) & 0x01010101u) << 4);
    const uint32_t hi =
        ((ld_u32(qs + 16 + 4 * t) >> shift) & 0x0F0F0F0Fu) | (((ld_u32(qh + 16 + 4 * t) >> j) & 0x01010101u) << 4);
    return {lo, hi, half_bits_to_float(ld_u16(row)) * static_cast<float>(sc),
            -half_bits_to_float(ld_u16(row + 2)) * static_cast<float>(mn), 0, 0};
  }
};

// q6_k: q - 32 as signed bytes, (q | 0x80) - 0x20 ^ 0x80 per byte (no borrow between bytes).
template <>
struct X8<DType::q6_k> {
  static constexpr bool kUnsigned = false;
  static constexpr float kC = 0.0f;
  __device__ static uint32_t centred(uint32_t q) { return ((q | 0x80808080u) - 0x20202020u) ^ 0x80808080u; }
  __device__ static Unit unit(const unsigned char* row, int j, int t) {
    const int h = j >> 2, s = j & 3;
    const unsigned char* ql = row + 64 * h + 32 * (s & 1);
    const unsigned char* qh = row + 128 + 32 * h;
    const int lo_shift = 4 * (s >> 1);
    const uint32_t lo = ((ld_u32_2(ql + 4 * t) >> lo_shift) & 0x0F0F0F0Fu) | (((ld_u32_2(qh + 4 * t) >> (2 * s)) & 0x03030303u) << 4);
    const uint32_t hi =
        ((ld_u32_2(ql + 16 + 4 * t) >> lo_shift) & 0x0F0F0F0Fu) | (((ld_u32_2(qh + 16 + 4 * t) >> (2 * s)) & 0x03030303u) << 4);
    const uint16_t sc = ld_u16(row + 192 + 2 * j);
    return {centred(lo), centred(hi), half_bits_to_float(ld_u16(row + 208)), 0.0f,
            static_cast<int8_t>(sc & 0xFF), static_cast<int8_t>(sc >> 8)};
  }
};

// The weight ring: the raw bytes of 256 values of each of the block's rows (copied in
// 16-byte pieces where they are whole 16-byte words; q6_k's 210 bytes in 8-byte pieces from
// the 8-byte word that holds their first byte). The partial sums of a tile and the int8 x
// of the block's whole K range follow it.
template <DType W>
struct Ring {
  static constexpr int rows = kRows;
  static constexpr int bytes = kStageK / (quantdot::Format<W>::kUnits * 32) * quantdot::Format<W>::kBlockBytes;
  static constexpr bool aligned = bytes % 16 == 0;
  static constexpr int piece = aligned ? 16 : 8;
  static constexpr int pieces = aligned ? bytes / 16 : (bytes + 6 + 7) / 8;
  static constexpr int padded = (pieces * piece + 15) / 16 * 16;
  // Row pitch: 4 (mod 8) words, so the 8 rows of a fragment load fall in different banks.
  static constexpr int pitch = (padded / 4) % 8 == 0 ? padded + 16 : padded;
  static constexpr int stage_bytes = rows * pitch;
  // As many stages as kCudaMmX8RingBytes holds, 3 to 6.
  static constexpr int fit = static_cast<int>(kCudaMmX8RingBytes) / stage_bytes;
  static constexpr int stages = fit < 3 ? 3 : fit > 6 ? 6 : fit;
  static constexpr int ring_bytes = stages * stage_bytes;
};

// An int32 sum |c| < 2^22 (a unit of 32 products of 8-bit values) added to the bits of
// kIntBias = 1.5 * 2^23, whose unit in the last place is 1: the float kIntBias + c, exactly.
constexpr float kIntBias = 12582912.0f;
__device__ __forceinline__ float biased(int c) { return __int_as_float(c + 0x4B400000); }

// Rounds x [rows < xrows, stages first .. first + count) to int8 into the block's x region:
// 8 threads per 32-value unit, 4 values each; 8 units per thread in flight. Each unit keeps
// (d, z, Σ x): d·(kIntBias + c) + z = d·c + kC·Σ x, so the product of a unit costs one fma
// (z rounds once, by at most d/2).
template <int XROWS, typename F>
__device__ __forceinline__ void stage_x(const ops::MatmulArgs& a, int64_t first, int64_t count, unsigned char* xr) {
  const int tid = static_cast<int>(threadIdx.x);
  const int sub = tid & 7;
  const bool vec = a.x_stride % 4 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  const int64_t units = count * XROWS * 8;
  constexpr int kBatch = 8;
  for (int64_t u0 = tid >> 3; u0 < units; u0 += (kThreads / 8) * kBatch) {
    float4 v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t u = u0 + b * (kThreads / 8);
      const int64_t s = u / (XROWS * 8);
      const int r = static_cast<int>((u / 8) % XROWS);
      const int j = static_cast<int>(u % 8);
      v[b] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (u < units && r < a.m) {
        const float* src = a.x + r * a.x_stride + (first + s) * kStageK + 32 * j + 4 * sub;
        if (vec) {
          v[b] = *reinterpret_cast<const float4*>(src);
        } else {
          v[b] = make_float4(src[0], src[1], src[2], src[3]);
        }
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t u = u0 + b * (kThreads / 8);
      float amax = fmaxf(fmaxf(fabsf(v[b].x), fabsf(v[b].y)), fmaxf(fabsf(v[b].z), fabsf(v[b].w)));
      float sum = (v[b].x + v[b].y) + (v[b].z + v[b].w);
#pragma unroll
      for (int o = 1; o < 8; o <<= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
      }
      if (u >= units) continue;
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      const float f[4] = {v[b].x, v[b].y, v[b].z, v[b].w};
      uint32_t word = 0;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int q = max(-127, min(127, __float2int_rn(f[e] * inv)));
        word |= (static_cast<uint32_t>(q) & 0xFFu) << (8 * e);
      }
      const int64_t s = u / (XROWS * 8);
      const int r = static_cast<int>((u / 8) % XROWS);
      const int j = static_cast<int>(u % 8);
      unsigned char* stage = xr + s * XROWS * kCudaMmX8XRowBytes;
      *reinterpret_cast<uint32_t*>(stage + r * kXPitch + 32 * j + 4 * sub) = word;
      if (sub == 0) {
        const float d = amax / 127.0f;
        *reinterpret_cast<float4*>(stage + XROWS * kXPitch + r * kSPitch + 16 * j) =
            make_float4(d, fmaf(F::kC, sum, -kIntBias * d), sum, 0.0f);
      }
    }
  }
}

template <DType W, int NT>
__global__ void __launch_bounds__(kThreads) mm_x8_kernel(const __grid_constant__ ops::MatmulArgs a) {
  using R = Ring<W>;
  using F = X8<W>;
  constexpr int kXRows = 8 * NT;
  constexpr int kSlots = NT * 4;
  constexpr int kFlushTiles = cuda_mm_x8_flush_tiles(NT);
  extern __shared__ __align__(16) unsigned char smem[];
  // The block's K stages, and its N tiles: blockIdx.y, + gridDim.y, ... (the same for every
  // block of the cluster).
  const int64_t stages = a.k / kStageK;
  const int64_t per = (stages + gridDim.x - 1) / gridDim.x;
  const int64_t first = blockIdx.x * per < stages ? blockIdx.x * per : stages;
  const int count = static_cast<int>((first + per < stages ? first + per : stages) - first);
  const int64_t n_tiles = (a.n + kRows - 1) / kRows;
  const int my_tiles = static_cast<int>((n_tiles - blockIdx.y + gridDim.y - 1) / gridDim.y);
  const int64_t items = int64_t{my_tiles} * count;  // (tile, stage) pairs, stages fastest
  const uint32_t base = smem_addr(smem);
  const int tid = static_cast<int>(threadIdx.x);
  const auto* w = static_cast<const uint8_t*>(a.w);

  // The copy cursor: each thread copies the same pieces of every stage (rows and offsets
  // fixed), so a new tile only moves its row pointers and a new stage its K offset.
  constexpr int kPieces = kRows * R::pieces;
  constexpr int kPer = (kPieces + kThreads - 1) / kThreads;
  uint32_t to[kPer];
  const uint8_t* from[kPer];
  bool live[kPer];
  int issue_tile = 0, issue_c = 0, issue_slot = 0;
  auto aim = [&](int tile) {
    const int64_t n0 = (blockIdx.y + int64_t{tile} * gridDim.y) * kRows;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int i = tid + k * kThreads;
      const int r = i / R::pieces, p = i - r * R::pieces;
      to[k] = static_cast<uint32_t>(r * R::pitch + R::piece * p);
      live[k] = i < kPieces && n0 + r < a.n;
      from[k] = w + (n0 + r) * a.w_row_bytes + (first * R::bytes & (R::aligned ? ~int64_t{0} : ~int64_t{7})) + R::piece * p;
    }
  };
  auto issue = [&]() {
    const uint32_t slot = base + static_cast<uint32_t>(issue_slot * R::stage_bytes);
    // Stage offsets from the block's first stage; unaligned stages start at the 8-byte word
    // that holds their first byte.
    const int64_t at = (first + issue_c) * R::bytes;
    const int64_t shift = R::aligned ? int64_t{issue_c} * R::bytes : (at & ~int64_t{7}) - (first * R::bytes & ~int64_t{7});
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      if (!live[k]) continue;
      if constexpr (R::aligned) {
        cp_async16(slot + to[k], from[k] + shift);
      } else {
        cp_async8(slot + to[k], from[k] + shift);
      }
    }
    if (++issue_slot == R::stages) issue_slot = 0;
    if (++issue_c == count) {
      issue_c = 0;
      if (++issue_tile < my_tiles) aim(issue_tile);
    }
  };

  if (items > 0) aim(0);
#pragma unroll
  for (int i = 0; i < R::stages - 1; ++i) {
    if (i < items) issue();
    cp_async_commit();
  }
  pdl_wait();
  auto* partial = reinterpret_cast<float*>(smem + R::ring_bytes);
  unsigned char* xregion = smem + R::ring_bytes + kFlushTiles * kSlots * kThreads * 4;
  stage_x<kXRows, F>(a, first, count, xregion);

  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const cg::cluster_group cluster = cg::this_cluster();
  const auto splits = static_cast<int>(cluster.num_blocks());
  const auto rank = static_cast<int>(cluster.block_rank());
  int64_t item = 0;
  int read_slot = 0;
  for (int tile = 0; tile < my_tiles; ++tile) {
    float acc[NT][4] = {};
    for (int c = 0; c < count; ++c, ++item) {
      cp_async_wait<R::stages - 2>();
      __syncthreads();
      if (item + R::stages - 1 < items) issue();
      cp_async_commit();
      const unsigned char* slot = smem + read_slot * R::stage_bytes;
      if (++read_slot == R::stages) read_slot = 0;
      // Rows g and g + 8 of the warp's 16 (the copy of an unaligned stage starts at the
      // 8-byte word holding its first byte; rows are whole 8-byte words apart).
      const int mis = R::aligned ? 0 : static_cast<int>((reinterpret_cast<uintptr_t>(w) + (first + c) * R::bytes) & 7);
      const unsigned char* r0 = slot + (16 * warp + g) * R::pitch + mis;
      const unsigned char* r1 = r0 + 8 * R::pitch;
      const unsigned char* xs = xregion + c * kXRows * kCudaMmX8XRowBytes;
      const unsigned char* ss = xs + kXRows * kXPitch;
#pragma unroll 2
      for (int j = 0; j < 8; ++j) {
        const Unit u0 = F::unit(r0, j, t);
        const Unit u1 = F::unit(r1, j, t);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const unsigned char* xrow = xs + (8 * nt + g) * kXPitch + 32 * j + 4 * t;
          const uint32_t b0 = ld_u32(xrow), b1 = ld_u32(xrow + 16);
          const float4 s0 = *reinterpret_cast<const float4*>(ss + (8 * nt + 2 * t) * kSPitch + 16 * j);
          const float4 s1 = *reinterpret_cast<const float4*>(ss + (8 * nt + 2 * t + 1) * kSPitch + 16 * j);
          // Slot e: 0 (row g, x row 2t), 1 (g, 2t + 1), 2 (g + 8, 2t), 3 (g + 8, 2t + 1).
          if constexpr (W == DType::q6_k) {
            int first16[4] = {0, 0, 0, 0}, second16[4] = {0, 0, 0, 0};
            const uint32_t a_first[4] = {u0.lo, u1.lo, 0u, 0u};
            const uint32_t a_second[4] = {0u, 0u, u0.hi, u1.hi};
            ptx::mma_i8<F::kUnsigned>(first16, a_first, b0, b1);
            ptx::mma_i8<F::kUnsigned>(second16, a_second, b0, b1);
            // |sums| reach 2^23 here: converted, not biased.
            acc[nt][0] = fmaf(u0.a, s0.x * static_cast<float>(first16[0] * u0.s0 + second16[0] * u0.s1), acc[nt][0]);
            acc[nt][1] = fmaf(u0.a, s1.x * static_cast<float>(first16[1] * u0.s0 + second16[1] * u0.s1), acc[nt][1]);
            acc[nt][2] = fmaf(u1.a, s0.x * static_cast<float>(first16[2] * u1.s0 + second16[2] * u1.s1), acc[nt][2]);
            acc[nt][3] = fmaf(u1.a, s1.x * static_cast<float>(first16[3] * u1.s0 + second16[3] * u1.s1), acc[nt][3]);
          } else {
            int sums[4] = {0, 0, 0, 0};
            const uint32_t af[4] = {u0.lo, u1.lo, u0.hi, u1.hi};
            ptx::mma_i8<F::kUnsigned>(sums, af, b0, b1);
            acc[nt][0] = fmaf(u0.a, fmaf(s0.x, biased(sums[0]), s0.y), acc[nt][0]);
            acc[nt][1] = fmaf(u0.a, fmaf(s1.x, biased(sums[1]), s1.y), acc[nt][1]);
            acc[nt][2] = fmaf(u1.a, fmaf(s0.x, biased(sums[2]), s0.y), acc[nt][2]);
            acc[nt][3] = fmaf(u1.a, fmaf(s1.x, biased(sums[3]), s1.y), acc[nt][3]);
            if constexpr (F::kMin) {
              acc[nt][0] = fmaf(u0.b, s0.z, acc[nt][0]);
              acc[nt][1] = fmaf(u0.b, s1.z, acc[nt][1]);
              acc[nt][2] = fmaf(u1.b, s0.z, acc[nt][2]);
              acc[nt][3] = fmaf(u1.b, s1.z, acc[nt][3]);
            }
          }
        }
      }
    }
    // Output slot i of this thread: row n of the tile and row m of x.
    auto out_row = [&](int tl, int i) { return (blockIdx.y + int64_t{tl} * gridDim.y) * kRows + 16 * warp + g + 8 * ((i & 3) >> 1); };
    auto x_row = [&](int i) { return 8 * (i >> 2) + 2 * t + (i & 1); };
    if (splits == 1) {
#pragma unroll
      for (int i = 0; i < kSlots; ++i) {
        const int64_t n = out_row(tile, i);
        const int m = x_row(i);
        if (m < a.m && n < a.n) a.out[m * a.out_stride + n] = acc[i >> 2][i & 3];
      }
      continue;
    }
    // The partials of up to kFlushTiles tiles, added by the cluster in rank order: block r
    // stores the outputs of the slots i with i % splits == r.
    const int held = tile % kFlushTiles;
#pragma unroll
    for (int i = 0; i < kSlots; ++i) partial[(held * kSlots + i) * kThreads + tid] = acc[i >> 2][i & 3];
    if (held != kFlushTiles - 1 && tile != my_tiles - 1) continue;
    cluster.sync();
    constexpr int kRanks = static_cast<int>(kMaxClusterBlocks);
    for (int h = 0; h <= held; ++h) {
#pragma unroll
      for (int i = 0; i < kSlots; ++i) {
        if (i % splits != rank) continue;
        float part[kRanks];
#pragma unroll
        for (int r = 0; r < kRanks; ++r) {
          part[r] = r < splits ? cluster.map_shared_rank(partial, r)[(h * kSlots + i) * kThreads + tid] : 0.0f;
        }
        float sum = 0.0f;
#pragma unroll
        for (int r = 0; r < kRanks; ++r) {
          if (r < splits) sum += part[r];
        }
        const int64_t n = out_row(tile - held + h, i);
        const int m = x_row(i);
        if (m < a.m && n < a.n) a.out[m * a.out_stride + n] = sum;
      }
    }
    cluster.sync();  // each block's partials stay until every block of the cluster has read them
  }
  cp_async_wait<0>();
}

template <DType W, int NT>
void register_x8(KernelRegistry& registry, const char* prefix) {
  constexpr int bytes = Ring<W>::ring_bytes + cuda_mm_x8_flush_tiles(NT) * NT * 4 * kThreads * 4 +
                        static_cast<int>(kCudaMmX8XBytes);
  static_assert(bytes <= 227 * 1024, "shared memory");
  const auto shared = static_cast<uint32_t>(bytes);
  Kernel kernel = make_cuda_kernel<ops::MatmulArgs>(std::string(prefix) + std::string(dtype_name(W)) + "_f32",
                                                    reinterpret_cast<const void*>(&mm_x8_kernel<W, NT>), kThreads,
                                                    true, shared);
  kernel.cluster_rows = true;
  registry.add(std::move(kernel));
}

template <DType W>
void register_x8(KernelRegistry& registry) {
  register_x8<W, 1>(registry, "mm_x8_");
  if constexpr (W != DType::q4_k) register_x8<W, 4>(registry, "mm_x8_m32_");  // cuda_mm_x8
}

}  // namespace

void register_matmul_x8_cuda_kernels(KernelRegistry& registry) {
  register_x8<DType::q4_0>(registry);
  register_x8<DType::q4_1>(registry);
  register_x8<DType::q8_0>(registry);
  register_x8<DType::q5_0>(registry);
  register_x8<DType::q5_1>(registry);
  register_x8<DType::q4_k>(registry);
  register_x8<DType::q5_k>(registry);
  register_x8<DType::q6_k>(registry);
}

}  // namespace onepass::cuda
