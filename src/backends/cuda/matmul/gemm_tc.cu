// CUDA kernels mm_<W>_f32 for W = f16, bf16 and the GGML block formats: the
// matrix-matrix product (prefill) on tensor cores. out [M, N] = x [M, K] · wᵀ.
//
// A block of 4 warps owns a kTcTileM x kTcTileN tile of out and walks K in steps of
// kTcStepK values. A ring of kStages shared-memory stages, filled with cp.async, keeps
// the global loads of the next steps in flight while the warps multiply the current one:
//   x      the f32 rows of the step, converted to f16 (bf16 for bf16 weights) as the
//          warps load their fragments;
//   w      f16/bf16 weights: the rows of the step, used as they are;
//          block formats: the raw bytes of the rows' blocks (one step of 64 values for
//          q8_0, 256 values = 4 steps for the others),
//          which the threads dequantize to f16, one 32-value unit each, into one of two
//          operand tiles a step ahead of the products.
// One barrier per step. Warps take 32 x 32 sub-tiles: ldmatrix / shared loads for the
// fragments, mma.sync m16n8k16, f32 accumulators.
//
// Rounding: x is rounded to f16 (bf16 for bf16 weights), the block formats' dequantized
// weights to f16; f16 and bf16 weights are exact. Products and sums are f32. The op
// tests' tolerance carries the input rounding (tests/ops/cases_matmul.cpp).
// Blocks along grid x share one weight tile (x tiles fastest), so a weight tile is read
// from DRAM about once and from L2 by the other M tiles.
#include <type_traits>

#include "../kernels/common.cuh"
#include "../kernels/ptx.cuh"
#include "../kernels/quant_dot.cuh"
#include "../kernels/registration.h"
#include "launch.h"
#include "dequant_unit.cuh"
#include "gemm_tc.cuh"
#include "onepass/ops/matmul.h"

namespace onepass::cuda {
namespace {

using namespace tc;

template <DType W>
__global__ void __launch_bounds__(kThreads) mm_tc_kernel(const __grid_constant__ ops::MatmulArgs a) {
  using L = Layout<W>;
  using T = typename Operand<W>::T;
  extern __shared__ __align__(16) unsigned char smem[];
  const int64_t m0 = int64_t{blockIdx.x} * kBM;
  const int64_t n0 = int64_t{blockIdx.y} * kBN;
  const int64_t steps = (a.k + kBK - 1) / kBK;
  const bool x_vec = a.x_stride % 4 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  const bool w_vec = a.w_row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(a.w) % 16 == 0 && L::raw_bytes % 16 == 0;
  const uint32_t base = smem_addr(smem);
  const XPlan xp = x_plan(a, m0, base + L::x_offset);
  const WPlan wp = w_plan<W>(a, n0, base + L::raw_offset);
  float acc[2][4][4] = {};
  pdl_wait();
  // Stages 0 .. kStages - 2 in flight; stage 0's weights dequantized.
#pragma unroll
  for (int q = 0; q < kStages - 1; ++q) {
    if (q < steps) {
      x_issue(a, xp, x_vec, q * kBK, q);
      w_issue<W>(a, wp, w_vec, q);
    }
    cp_async_commit();
  }
  if constexpr (!kDense<W>) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    dequant_step<W>(a, wp, w_vec, smem, 0);
  }
  for (int64_t s = 0; s < steps; ++s) {
    // Stage s + 1 has landed (this thread's copies; the barrier makes everyone's
    // visible), every warp is done with step s - 1 and step s's operand tile is complete.
    cp_async_wait<kStages - 3>();
    __syncthreads();
    const int64_t next = s + kStages - 1;
    if (next < steps) {
      x_issue(a, xp, x_vec, next * kBK, static_cast<int>(next % kStages));
      w_issue<W>(a, wp, w_vec, next);
    }
    cp_async_commit();
    const float* xs = reinterpret_cast<const float*>(smem + L::x_offset + (s % kStages) * kXStage);
    const T* ws = kDense<W> ? reinterpret_cast<const T*>(smem + L::raw_offset + (s % kStages) * kBN * L::raw_pitch)
                            : reinterpret_cast<const T*>(smem + L::tile_offset + (s & 1) * kWTile);
    multiply_step<W>(xs, ws, acc);
    if constexpr (!kDense<W>) {
      if (s + 1 < steps) dequant_step<W>(a, wp, w_vec, smem, s + 1);
    }
  }
  cp_async_wait<0>();
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int lane = static_cast<int>(threadIdx.x & 31);
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int64_t m = m0 + 32 * (warp & 1) + 16 * mi + (lane >> 2) + 8 * hf;
      if (m >= a.m) continue;
      float* row = a.out + m * a.out_stride;
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int64_t n = n0 + 32 * (warp >> 1) + 8 * ni + 2 * (lane & 3);
        if (n < a.n) row[n] = acc[mi][ni][2 * hf];
        if (n + 1 < a.n) row[n + 1] = acc[mi][ni][2 * hf + 1];
      }
    }
  }
}

template <DType W>
void register_tc(KernelRegistry& registry) {
  static_assert(Layout<W>::bytes <= 227 * 1024, "shared memory");
  registry.add(make_cuda_kernel<ops::MatmulArgs>("mm_" + std::string(dtype_name(W)) + "_f32",
                                                 reinterpret_cast<const void*>(&mm_tc_kernel<W>), kThreads, true,
                                                 Layout<W>::bytes));
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
  register_tc<DType::q5_0>(registry);
  register_tc<DType::q5_1>(registry);
  register_tc<DType::q2_k>(registry);
  register_tc<DType::q3_k>(registry);
  register_tc<DType::iq4_nl>(registry);
  register_tc<DType::iq4_xs>(registry);
}

}  // namespace onepass::cuda
