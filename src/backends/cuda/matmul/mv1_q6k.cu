// CUDA kernels mv1_q6_k_f32[_fused]: one row of x (the decode step), q6_k weights, a lane
// per half super-block.
//
// mv1_quant_body gives each lane one 32-value unit, so q6_k's shared bytes would be read
// and unpacked again by every unit that uses them: each qh byte by four lanes, each ql
// byte by two, which makes large q6_k products (the LM heads of the 4-bit models) bound by
// instruction issue. Here a lane owns half a super-block (128 values, the four units that
// share its 64 ql and 32 qh bytes) of one row: an item is a row pair and kQ6Blocks
// super-blocks, lanes 0-15 on the first row and 16-31 on the second. An item's 3.4 KB are
// copied by cp.async into a ring of kQ6Stages shared-memory stages per warp (a register
// ring that large would not fit), kQ6Stages - 1 items ahead, the first before the PDL wait.
#include "launch.h"
#include "../kernels/common.cuh"
#include "../kernels/ptx.cuh"
#include "../kernels/quant_dot.cuh"
#include "../kernels/registration.h"
#include "epilogue.cuh"
#include "mv1_common.cuh"
#include "mv_common.cuh"
#include "onepass/ops/matmul.h"
#include "register.h"
#include "x_staging.cuh"

namespace onepass::cuda {
namespace {

constexpr int kQ6BlockBytes = 210;
constexpr int kQ6Blocks = 8;                                              // super-blocks per row and item
constexpr int kQ6RowWords = (kQ6Blocks * kQ6BlockBytes + 15) / 16 + 1;   // one more for a 16-byte lead
// Ring depth: a deeper ring leaves room for fewer warps per block; chosen by the LM
// head's kernel time on the H200.
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
  const float x_scale = mv1_cp_async_ring_prologue<kQ6Stages>(a, f, issue_next, inv_rms, scratch, xs);
  const float2 first_residual = mv1_load_first_residual(a, f, first, lane == 0 && sh.part == 0);

  const int row = lane >> 4;                   // this lane's row of the pair
  const int block_in_item = (lane & 15) >> 1;  // its super-block in the item
  const int h = lane & 1;                      // and which half
  // The x groups of this lane's four units, in registers: read again only when the item's
  // super-blocks change (never for rows of at most 8 super-blocks, such as the LM heads of
  // the reference models). The 16 lanes of a row read records 128 bytes apart, all in the
  // same banks, so reading them per item would cost more than the unpacking they feed.
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

// Up to 512 threads per block (cuda_mv1_dims): 128 registers per thread at most.
__global__ void __launch_bounds__(kCudaMv1MaxThreads, 1) mv1_q6k_kernel(const __grid_constant__ ops::MatmulArgs a) {
  mv1_q6k_body(a, MvFusion{});
}

__global__ void __launch_bounds__(kCudaMv1MaxThreads, 1) mv1_q6k_fused_kernel(const __grid_constant__ ops::FusedMatvecArgs f) {
  mv1_q6k_body(f.mm, fusion_of(f));
}

}  // namespace

void register_mv1_q6k_kernels(KernelRegistry& registry) {
  const std::string t(dtype_name(DType::q6_k));
  registry.add(make_cuda_kernel<ops::MatmulArgs>("mv1_" + t + "_f32", reinterpret_cast<const void*>(&mv1_q6k_kernel),
                                                 kCudaMv1MaxThreads, true, kMvSharedBytes));
  registry.add(make_cuda_kernel<ops::FusedMatvecArgs>("mv1_" + t + "_f32_fused",
                                                      reinterpret_cast<const void*>(&mv1_q6k_fused_kernel),
                                                      kCudaMv1MaxThreads, true, kMvSharedBytes));
}

}  // namespace onepass::cuda
