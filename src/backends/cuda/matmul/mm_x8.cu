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

#include "../kernels/ptx.cuh"
#include "../kernels/registration.h"
#include "onepass/ops/matmul.h"
#include "x8_units.cuh"

namespace onepass::cuda {
namespace {

namespace cg = cooperative_groups;
using ptx::cp_async16;
using ptx::cp_async8;
using ptx::cp_async_commit;
using ptx::cp_async_wait;
using ptx::smem_addr;
using x8::biased;
using x8::kIntBias;
using x8::kRows;
using x8::kStageK;
using x8::ld_u32;
using x8::Unit;
using x8::X8;

constexpr int kThreads = 2 * kRows;
constexpr int kXPitch = kCudaMmX8XRowBytes - kCudaMmX8ScaleRowBytes;  // int8 x of a row in a stage
constexpr int kSPitch = kCudaMmX8ScaleRowBytes;  // its 8 (d, z, Σ x, 0) quadruples, padded
static_assert(kXPitch == kStageK + 16 && kSPitch == 144, "pitches of 4 (mod 8) words and 16-byte rows");

// The weight ring: as many stages as kCudaMmX8RingBytes holds, 3 to 6. The partial sums of
// a tile and the int8 x of the block's whole K range follow it.
template <DType W>
struct Ring : x8::WeightStage<W> {
  static constexpr int fit = static_cast<int>(kCudaMmX8RingBytes) / x8::WeightStage<W>::stage_bytes;
  static constexpr int stages = fit < 3 ? 3 : fit > 6 ? 6 : fit;
  static constexpr int ring_bytes = stages * x8::WeightStage<W>::stage_bytes;
};

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
  if constexpr (W == DType::q6_k) register_x8<W, 4>(registry, "mm_x8_m32_");  // cuda_mm_x8
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
