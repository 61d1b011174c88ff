// CUDA kernels mm_split_m<BM>_<W>_f32 (BM = 16, 32): the tensor-core matrix product of a
// few dozen rows of x (batched decode steps), out [M, N] = x [M, K] · wᵀ, with K split
// among the blocks of a thread-block cluster.
//
// Such products have too few kBN-row weight tiles to keep every SM streaming weights, and
// the 64-row tile of mm_<W>_f32 (gemm_tc.cu) leaves one block of 4 warps per SM. Here a
// block takes BM rows of x (a quarter or half of the x stages, so 3 to 4 blocks share an SM)
// and one range of K steps; grid {splits, N tiles, M tiles} in clusters of {splits, 1, 1}
// (cuda_mm_splits). The pipeline of each block is gemm_tc.cuh's: cp.async ring of x and raw
// weights, dequantization to f16 a step ahead, m16n8k16 products with f32 accumulators.
// The cluster then adds its partial tiles through distributed shared memory: block r
// stores the outputs of the accumulator slots i with i % splits == r, summing the partials
// in rank order, so every run gives the same sums. Rounding as gemm_tc.cu.
#include <cooperative_groups.h>

#include <string>

#include "../kernels/common.cuh"
#include "../kernels/registration.h"
#include "gemm_tc.cuh"
#include "launch.h"
#include "onepass/ops/matmul.h"

namespace onepass::cuda {
namespace {

using namespace tc;
namespace cg = cooperative_groups;

// The K steps of split `split` of `splits`: whole multiples of 4 steps (one raw stage of
// the 256-value formats and a whole turn of the x ring), so that every ring slot and
// operand tile is the same function of the absolute step as in an unsplit walk. The last
// splits may get no steps; they still add their zero partials.
struct StepRange {
  int64_t begin, end;
};
__device__ __forceinline__ StepRange split_steps(int64_t steps, int64_t split, int64_t splits) {
  const int64_t per = ((steps + 3) / 4 + splits - 1) / splits * 4;
  const int64_t begin = split * per < steps ? split * per : steps;
  return {begin, begin + per < steps ? begin + per : steps};
}

template <DType W, int BM>
__global__ void __launch_bounds__(kThreads) mm_split_kernel(const __grid_constant__ ops::MatmulArgs a) {
  using L = Layout<W, BM>;
  using S = Tile<BM>;
  using T = typename Operand<W>::T;
  extern __shared__ __align__(16) unsigned char smem[];
  const int64_t m0 = int64_t{blockIdx.z} * BM;
  const int64_t n0 = int64_t{blockIdx.y} * kBN;
  const StepRange range = split_steps((a.k + kBK - 1) / kBK, blockIdx.x, gridDim.x);
  const int64_t first = range.begin, steps = range.end;
  const bool x_vec = a.x_stride % 4 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  const bool w_vec = a.w_row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(a.w) % 16 == 0 && L::raw_bytes % 16 == 0;
  const uint32_t base = smem_addr(smem);
  const XPlan xp = x_plan<BM>(a, m0, base + L::x_offset);
  const WPlan wp = w_plan<W>(a, n0, base + L::raw_offset);
  float acc[S::mi][S::ni][4] = {};
  pdl_wait();
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    const int64_t q = first + i;
    if (q < steps) {
      x_issue<BM>(a, xp, x_vec, q * kBK, static_cast<int>(q % kStages));
      w_issue<W>(a, wp, w_vec, q);
    }
    cp_async_commit();
  }
  if constexpr (!kDense<W>) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (first < steps) dequant_step<W, BM>(a, wp, w_vec, smem, first);
  }
  for (int64_t s = first; s < steps; ++s) {
    cp_async_wait<kStages - 3>();
    __syncthreads();
    const int64_t next = s + kStages - 1;
    if (next < steps) {
      x_issue<BM>(a, xp, x_vec, next * kBK, static_cast<int>(next % kStages));
      w_issue<W>(a, wp, w_vec, next);
    }
    cp_async_commit();
    const float* xs = reinterpret_cast<const float*>(smem + L::x_offset + (s % kStages) * S::x_stage);
    const T* ws = kDense<W> ? reinterpret_cast<const T*>(smem + L::raw_offset + (s % kStages) * kBN * L::raw_pitch)
                            : reinterpret_cast<const T*>(smem + L::tile_offset + (s & 1) * kWTile);
    multiply_step<W, BM>(xs, ws, acc);
    if constexpr (!kDense<W>) {
      if (s + 1 < steps) dequant_step<W, BM>(a, wp, w_vec, smem, s + 1);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the stages: the partials go over them
  // Slot i = ((mi * 2 + hf) * ni + nj) * 2 + e holds acc[mi][nj][2 hf + e].
  constexpr int kSlots = S::mi * S::ni * 4;
  static_assert(kSlots * kThreads * 4 <= L::bytes, "partials fit the block's shared memory");
  auto* partial = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int e = i & 1, nj = (i >> 1) % S::ni, hf = (i / (2 * S::ni)) & 1, mi = i / (4 * S::ni);
    partial[i * kThreads + threadIdx.x] = acc[mi][nj][2 * hf + e];
  }
  const cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const auto splits = static_cast<int>(cluster.num_blocks());
  const auto rank = static_cast<int>(cluster.block_rank());
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int lane = static_cast<int>(threadIdx.x & 31);
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    if (i % splits != rank) continue;
    const int e = i & 1, nj = (i >> 1) % S::ni, hf = (i / (2 * S::ni)) & 1, mi = i / (4 * S::ni);
    const int64_t m = m0 + S::warp_rows * (warp % S::warps_m) + 16 * mi + (lane >> 2) + 8 * hf;
    const int64_t n = n0 + S::warp_cols * (warp / S::warps_m) + 8 * nj + 2 * (lane & 3) + e;
    float sum = 0.0f;
    for (int r = 0; r < splits; ++r) sum += cluster.map_shared_rank(partial, r)[i * kThreads + threadIdx.x];
    if (m < a.m && n < a.n) a.out[m * a.out_stride + n] = sum;
  }
  cluster.sync();  // each block's partials stay until every block of the cluster has read them
}

template <DType W, int BM>
void register_split(KernelRegistry& registry) {
  static_assert(Layout<W, BM>::bytes <= 227 * 1024, "shared memory");
  Kernel kernel = make_cuda_kernel<ops::MatmulArgs>(
      "mm_split_m" + std::to_string(BM) + "_" + std::string(dtype_name(W)) + "_f32", reinterpret_cast<const void*>(&mm_split_kernel<W, BM>),
      kThreads, true, Layout<W, BM>::bytes);
  kernel.cluster_rows = true;
  registry.add(std::move(kernel));
}

template <DType W>
void register_splits(KernelRegistry& registry) {
  register_split<W, 16>(registry);
  register_split<W, 32>(registry);
}

}  // namespace

void register_matmul_split_cuda_kernels(KernelRegistry& registry) {
  register_splits<DType::f16>(registry);
  register_splits<DType::bf16>(registry);
  register_splits<DType::q4_0>(registry);
  register_splits<DType::q4_1>(registry);
  register_splits<DType::q8_0>(registry);
  register_splits<DType::q4_k>(registry);
  register_splits<DType::q5_k>(registry);
  register_splits<DType::q6_k>(registry);
  register_splits<DType::q5_0>(registry);
  register_splits<DType::q5_1>(registry);
  register_splits<DType::q2_k>(registry);
  register_splits<DType::q3_k>(registry);
  register_splits<DType::iq4_nl>(registry);
  register_splits<DType::iq4_xs>(registry);
}

}  // namespace onepass::cuda
