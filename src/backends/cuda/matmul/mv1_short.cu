// CUDA kernels mv1_short_<W>_f32[_fused] for q4_0, q4_1 and q8_0: one row of x (the
// decode step), short rows (at most 32 units, K <= 1024), two row pairs per item.
//
// Such a row is a single chunk, so mv1_quant_body's item would be a whole row pair with
// 32 - units lanes idle, and each item would pay two full warp reductions (10 shuffles)
// and the epilogue: small models' LM heads (tens of thousands of short rows) are then
// bound by instruction issue. Here an item is two row pairs (outputs j0 and j0 + per: four
// rows), a row per 8 lanes, each lane the units sub, sub + 8, ... of its row, so three
// shuffles finish a row. The rows are copied by cp.async into a ring of
// kCudaMv1ShortStages shared-memory stages per warp (the first before the PDL wait),
// and each lane's x groups stay in registers for the whole kernel (the units of a lane
// never change). The op picks these kernels by cuda_mv1_short_rows.
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
  const float x_scale = mv1_cp_async_ring_prologue<kShortStages>(a, f, issue_next, inv_rms, scratch, xs);
  const bool storer = sub == 0 && (row & 1) == 0;  // lanes 0 and 16: one pair each
  const float2 first_residual = mv1_load_first_residual(a, f, first + (row >> 1) * per, storer);
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

// Kernels of their own rather than a branch inside mv1_quant_kernel, which would cost the
// other bodies registers and stack. At most 8 warps per block, 2 blocks per SM: a third
// block (80 registers) spills. Chosen by `onepass bench` decode.
template <DType W>
__global__ void __launch_bounds__(8 * 32, 2) mv1_short_kernel(const __grid_constant__ ops::MatmulArgs a) {
  mv1_short_body<W>(a, MvFusion{});
}

template <DType W>
__global__ void __launch_bounds__(8 * 32, 2) mv1_short_fused_kernel(const __grid_constant__ ops::FusedMatvecArgs f) {
  mv1_short_body<W>(f.mm, fusion_of(f));
}

template <DType W>
void register_weight_type(KernelRegistry& registry) {
  const std::string t(dtype_name(W));
  registry.add(make_cuda_kernel<ops::MatmulArgs>("mv1_short_" + t + "_f32",
                                                 reinterpret_cast<const void*>(&mv1_short_kernel<W>),
                                                 kCudaMv1MaxThreads, true, kMvSharedBytes));
  registry.add(make_cuda_kernel<ops::FusedMatvecArgs>("mv1_short_" + t + "_f32_fused",
                                                      reinterpret_cast<const void*>(&mv1_short_fused_kernel<W>),
                                                      kCudaMv1MaxThreads, true, kMvSharedBytes));
}

}  // namespace

void register_mv1_short_kernels(KernelRegistry& registry) {
  register_weight_type<DType::q4_0>(registry);
  register_weight_type<DType::q4_1>(registry);
  register_weight_type<DType::q8_0>(registry);
}

}  // namespace onepass::cuda
