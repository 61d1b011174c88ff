// CUDA kernels mv1_<W>_f32[_fused] for W = f32, f16, bf16: one row of x (the decode step),
// dense weights in 16-byte words (the op picks them only when K and the rows allow such
// loads).
//
// The flat item stream of mv1_quant_body (mv1_quant.cu): kMv1DenseDepth items of both rows
// in flight per warp in a register ring, x as f32 in shared memory, the same block shape
// (Mv1Shape). Splitting K between parts lets products with few row pairs keep more weight
// bytes in flight.
#include "launch.h"
#include "../kernels/common.cuh"
#include "../kernels/registration.h"
#include "mv1_common.cuh"
#include "mv_common.cuh"
#include "onepass/ops/matmul.h"
#include "register.h"
#include "x_staging.cuh"

namespace onepass::cuda {
namespace {

// Items in flight per warp: f32 weights take twice the registers per item, so two.
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
  // Prologue before the PDL wait: the first items and the norm weight (read-only for the
  // pass). The first pair's epilogue inputs are copied after the staging.
#pragma unroll
  for (int d = 0; d < kMv1DenseDepth<W>; ++d) {
    if (load_j0 < n) load_next(ring[d]);
  }
  const Mv1XPath x_path = mv1_x_path(a, f);
  const bool norm_w_in_registers = x_path == Mv1XPath::deferred_norm;
  float4 norm_w[kXBatch];
  mv1_norm_weight_prologue(a, f, norm_w_in_registers, norm_w);
  pdl_wait();
  const float x_scale = mv1_stage_x_f32(a, f, x_path, xs, inv_rms, scratch, norm_w, norm_w_in_registers);
  mv1_first_pair_copy_after_staging<false>(a, f, sh, first_slots[sh.slot]);

  int j0 = first, c = 0, parity = 0;
  Mv1FinishedRows done;
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

// Up to 512 threads per block (cuda_mv1_dims): 128 registers per thread at most.
template <DType W>
__global__ void __launch_bounds__(kCudaMv1MaxThreads, 1) mv1_dense_kernel(const __grid_constant__ ops::MatmulArgs a) {
  mv1_dense_body<W>(a, MvFusion{});
}

template <DType W>
__global__ void __launch_bounds__(kCudaMv1MaxThreads, 1) mv1_dense_fused_kernel(const __grid_constant__ ops::FusedMatvecArgs f) {
  mv1_dense_body<W>(f.mm, fusion_of(f));
}

template <DType W>
void register_weight_type(KernelRegistry& registry) {
  const std::string t(dtype_name(W));
  registry.add(make_cuda_kernel<ops::MatmulArgs>("mv1_" + t + "_f32", reinterpret_cast<const void*>(&mv1_dense_kernel<W>),
                                                 kCudaMv1MaxThreads, true, kMvSharedBytes));
  registry.add(make_cuda_kernel<ops::FusedMatvecArgs>("mv1_" + t + "_f32_fused",
                                                      reinterpret_cast<const void*>(&mv1_dense_fused_kernel<W>),
                                                      kCudaMv1MaxThreads, true, kMvSharedBytes));
}

}  // namespace

void register_mv1_dense_kernels(KernelRegistry& registry) {
  register_weight_type<DType::f32>(registry);
  register_weight_type<DType::f16>(registry);
  register_weight_type<DType::bf16>(registry);
}

}  // namespace onepass::cuda
