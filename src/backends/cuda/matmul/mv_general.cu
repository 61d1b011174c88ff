// CUDA kernels mv_<W>_f32[_fused]: matrix-vector products for up to kMvMaxRows rows of x,
// out [M, N] = x [M, K] · wᵀ, for W = f32, f16, bf16 and the GGML block formats.
//
// Block formats: x is quantized to int8 per 32 values in shared memory once per block
// (x_staging.cuh), then each warp computes two output rows at a time with dp4a over
// 32-weight units (quant_dot.cuh), lanes striding over the units of the rows so that a
// warp reads contiguous weight bytes, two chunks of 32 units ahead.
// Dense weights: the same with x kept in f32 and 16-byte weight loads when aligned.
// The grid is persistent and fully resident: blocks loop over row pairs, so x is staged
// once per block.
#include "launch.h"
#include "../kernels/common.cuh"
#include "../kernels/quant_dot.cuh"
#include "../kernels/registration.h"
#include "epilogue.cuh"
#include "mv_common.cuh"
#include "onepass/ops/matmul.h"
#include "register.h"
#include "x_staging.cuh"

namespace onepass::cuda {
namespace {

// The rows a warp works on in one iteration: two consecutive outputs, or with SiLU one
// output from its gate row j and up row j + n.
struct MvRows {
  int64_t first;   // first output of this warp
  int64_t step;    // outputs between a warp's iterations
  int64_t outputs; // per iteration: 2, or 1 with SiLU
};

__device__ __forceinline__ MvRows mv_rows(const ops::MatmulArgs& a, const MvFusion& f) {
  const int warp = threadIdx.x >> 5;
  const int64_t per = f.silu ? 1 : kMvRowsPerWarp;
  return {(int64_t{blockIdx.x} * kMvWarps + warp) * per, int64_t{gridDim.x} * kMvWarps * per, per};
}

template <DType W>
__device__ __forceinline__ void mv_quant_body(const ops::MatmulArgs& a, const MvFusion& f) {
  using F = quantdot::Format<W>;
  constexpr int kWords = mv_stage_words<W>();
  constexpr int kLoads = (kWords + 31) / 32;  // 16-byte loads per lane and row
  constexpr int kChunkBytes = 32 / F::kUnits * F::kBlockBytes;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float inv_rms[kMvMaxRows];
  __shared__ __align__(16) float scratch[32];
  // Each warp's staging area: kLoads * 32 words per row.
  __shared__ uint4 stage[kMvWarps][kMvRowsPerWarp][kLoads * 32];
  const int64_t xq_bytes = (a.m * a.k + 15) / 16 * 16;
  XQuantSmem xs{reinterpret_cast<int8_t*>(smem), reinterpret_cast<float4*>(smem + xq_bytes)};
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t units = a.k / 32;
  const int64_t chunks = (units + 31) / 32;
  const auto* w = static_cast<const uint8_t*>(a.w);
  const MvRows rows_of = mv_rows(a, f);
  const uint8_t* rows[kMvRowsPerWarp];
  auto set_rows = [&](int64_t j0) {
#pragma unroll
    for (int r = 0; r < kMvRowsPerWarp; ++r) rows[r] = w + mv_weight_row(a, f, j0, r) * a.w_row_bytes;
  };
  // Coalesced 16-byte loads of a chunk's bytes (from the 16-byte boundary at or before
  // its start; allocations are padded so the last row's tail stays inside).
  // Two chunks in flight while one is computed, so that a long row does not pay one load
  // latency per chunk.
  using Chunk = uint4[kMvRowsPerWarp][kLoads];
  Chunk ring0, ring1;
  auto load_chunk = [&](int64_t c, Chunk& into) {
#pragma unroll
    for (int r = 0; r < kMvRowsPerWarp; ++r) {
      const uintptr_t begin = reinterpret_cast<uintptr_t>(rows[r]) + c * kChunkBytes;
      const int64_t bytes = min(int64_t{kChunkBytes}, a.w_row_bytes - c * kChunkBytes);
      const uintptr_t aligned = begin & ~uintptr_t{15};
      const int words = static_cast<int>((begin + bytes - aligned + 15) / 16);
#pragma unroll
      for (int i = 0; i < kLoads; ++i) {
        const int word = lane + 32 * i;
        into[r][i] = word < words ? reinterpret_cast<const uint4*>(aligned)[word] : make_uint4(0, 0, 0, 0);
      }
    }
  };
  auto load_first_chunks = [&](int64_t j0) {
    set_rows(j0);
    load_chunk(0, ring0);
    if (chunks > 1) load_chunk(1, ring1);
  };
  // Weights are read-only for the whole pass: the first chunks of this warp's first rows
  // are loaded into registers before waiting for the predecessor, so the weight latency
  // overlaps its tail and the x staging below. Only those chunks: prefetching the rest of
  // the rows into L2 would compete with the predecessor's own weight stream.
  if (rows_of.first < a.n) load_first_chunks(rows_of.first);
  pdl_wait();
  quantize_x_to_smem(a, f, inv_rms, scratch, xs);
  __syncthreads();

  for (int64_t j0 = rows_of.first; j0 < a.n; j0 += rows_of.step) {
    const int32_t position = rope_position(f);
    float acc[kMvMaxRows][kMvRowsPerWarp];
#pragma unroll
    for (int m = 0; m < kMvMaxRows; ++m) {
#pragma unroll
      for (int r = 0; r < kMvRowsPerWarp; ++r) acc[m][r] = 0.0f;
    }
    auto step = [&](int64_t c, Chunk& held) {
      __syncwarp();  // every lane is done with the previous chunk's stage
#pragma unroll
      for (int r = 0; r < kMvRowsPerWarp; ++r) {
#pragma unroll
        for (int i = 0; i < kLoads; ++i) stage[warp][r][lane + 32 * i] = held[r][i];
      }
      __syncwarp();
      if (c + 2 < chunks) load_chunk(c + 2, held);  // in flight while this chunk is computed
      const int64_t u = c * 32 + lane;
      if (u < units) {
        const int local_block = lane / F::kUnits;
        const int sub = lane - local_block * F::kUnits;
#pragma unroll
        for (int m = 0; m < kMvMaxRows; ++m) {
          if (m >= a.m) break;
          const float4 g = xs.groups[m * units + u];
          const auto x = quantdot::XGroup::load(xs.q + (m * units + u) * 32, g.x, g.y, g.z);
#pragma unroll
          for (int r = 0; r < kMvRowsPerWarp; ++r) {
            const uintptr_t begin = reinterpret_cast<uintptr_t>(rows[r]) + c * kChunkBytes;
            const auto* staged = reinterpret_cast<const uint8_t*>(&stage[warp][r][0]) + (begin & 15) +
                                 local_block * F::kBlockBytes;
            acc[m][r] += F::unit_dot(staged, sub, x);
          }
        }
      }
    };
    for (int64_t c = 0; c < chunks; c += 2) {
      step(c, ring0);
      if (c + 1 < chunks) step(c + 1, ring1);
    }
    // The next rows' first chunks are in flight during this iteration's sums and stores.
    if (j0 + rows_of.step < a.n) load_first_chunks(j0 + rows_of.step);
    mv_store(a, f, j0, acc, position);
  }
}

template <DType W>
__device__ __forceinline__ void mv_dense_body(const ops::MatmulArgs& a, const MvFusion& f) {
  using S = typename Elem<W>::storage;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float inv_rms[kMvMaxRows];
  __shared__ __align__(16) float scratch[32];
  float* xs = reinterpret_cast<float*>(smem);  // [M, K]
  const int lane = threadIdx.x & 31;
  constexpr int kVec = 16 / sizeof(S);  // values per 16-byte load
  const auto* wb = static_cast<const unsigned char*>(a.w);
  const bool vector = a.k % kVec == 0 && a.w_row_bytes % 16 == 0 && (reinterpret_cast<uintptr_t>(wb) & 15) == 0;
  const MvRows rows_of = mv_rows(a, f);
  const int64_t row_words = a.k / kVec;
  constexpr int kChunkWords = 32 * kDenseLoads;
  const int64_t chunks = (row_words + kChunkWords - 1) / kChunkWords;
  const uint4* rows[kMvRowsPerWarp];
  using Chunk = uint4[kMvRowsPerWarp][kDenseLoads];
  Chunk ring0, ring1;
  // Word lane + 32 i of chunk c of each row (zeros past the row).
  auto load_chunk = [&](int64_t c, Chunk& into) {
#pragma unroll
    for (int r = 0; r < kMvRowsPerWarp; ++r) {
#pragma unroll
      for (int i = 0; i < kDenseLoads; ++i) {
        const int64_t word = c * kChunkWords + lane + 32 * i;
        into[r][i] = word < row_words ? rows[r][word] : make_uint4(0, 0, 0, 0);
      }
    }
  };
  auto load_first_chunks = [&](int64_t j0) {
#pragma unroll
    for (int r = 0; r < kMvRowsPerWarp; ++r) {
      rows[r] = reinterpret_cast<const uint4*>(wb + mv_weight_row(a, f, j0, r) * a.w_row_bytes);
    }
    load_chunk(0, ring0);
    if (chunks > 1) load_chunk(1, ring1);
  };
  // Weights are read-only for the pass: the first two chunks of this warp's first rows are
  // loaded into registers before waiting for the predecessor, so their latency overlaps its
  // tail and the x staging. Only those chunks: an L2 prefetch of whole rows competes with
  // the predecessor's weight stream.
  if (vector && rows_of.first < a.n) load_first_chunks(rows_of.first);
  pdl_wait();
  stage_x_f32(a, f, xs, inv_rms, scratch);
  for (int64_t j0 = rows_of.first; j0 < a.n; j0 += rows_of.step) {
    const int32_t position = rope_position(f);
    float acc[kMvMaxRows][kMvRowsPerWarp];
#pragma unroll
    for (int m = 0; m < kMvMaxRows; ++m) {
#pragma unroll
      for (int r = 0; r < kMvRowsPerWarp; ++r) acc[m][r] = 0.0f;
    }
    if (vector) {
      auto step = [&](int64_t c, Chunk& held) {
        float wv[kMvRowsPerWarp][kDenseLoads][kVec];
#pragma unroll
        for (int r = 0; r < kMvRowsPerWarp; ++r) {
#pragma unroll
          for (int i = 0; i < kDenseLoads; ++i) {
            const S* vals = reinterpret_cast<const S*>(&held[r][i]);
#pragma unroll
            for (int e = 0; e < kVec; ++e) wv[r][i][e] = Elem<W>::load(vals[e]);
          }
        }
        if (c + 2 < chunks) load_chunk(c + 2, held);  // in flight while this chunk is computed
#pragma unroll
        for (int i = 0; i < kDenseLoads; ++i) {
          const int64_t word = c * kChunkWords + lane + 32 * i;
          if (word >= row_words) break;
#pragma unroll
          for (int m = 0; m < kMvMaxRows; ++m) {
            if (m >= a.m) break;
            const float* xv = xs + m * a.k + word * kVec;
#pragma unroll
            for (int e = 0; e < kVec; ++e) {
              const float xe = xv[e];
#pragma unroll
              for (int r = 0; r < kMvRowsPerWarp; ++r) acc[m][r] = fmaf(wv[r][i][e], xe, acc[m][r]);
            }
          }
        }
      };
      for (int64_t c = 0; c < chunks; c += 2) {
        step(c, ring0);
        if (c + 1 < chunks) step(c + 1, ring1);
      }
      // The next rows' first chunks are in flight during this iteration's sums and stores.
      if (j0 + rows_of.step < a.n) load_first_chunks(j0 + rows_of.step);
    } else {
      const S* srows[kMvRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kMvRowsPerWarp; ++r) {
        srows[r] = reinterpret_cast<const S*>(wb + mv_weight_row(a, f, j0, r) * a.w_row_bytes);
      }
      for (int64_t k = lane; k < a.k; k += 32) {
        float wv[kMvRowsPerWarp];
#pragma unroll
        for (int r = 0; r < kMvRowsPerWarp; ++r) wv[r] = Elem<W>::load(srows[r][k]);
#pragma unroll
        for (int m = 0; m < kMvMaxRows; ++m) {
          if (m >= a.m) break;
          const float xe = xs[m * a.k + k];
#pragma unroll
          for (int r = 0; r < kMvRowsPerWarp; ++r) acc[m][r] = fmaf(wv[r], xe, acc[m][r]);
        }
      }
    }
    mv_store(a, f, j0, acc, position);
  }
}

template <DType W>
__global__ void __launch_bounds__(kMvWarps * 32, kCudaMvBlocksPerSm) mv_quant_kernel(const __grid_constant__ ops::MatmulArgs a) {
  mv_quant_body<W>(a, MvFusion{});
}

template <DType W>
__global__ void __launch_bounds__(kMvWarps * 32, kCudaMvBlocksPerSm) mv_dense_kernel(const __grid_constant__ ops::MatmulArgs a) {
  mv_dense_body<W>(a, MvFusion{});
}

template <DType W>
__global__ void __launch_bounds__(kMvWarps * 32, kCudaMvBlocksPerSm) mv_quant_fused_kernel(const __grid_constant__ ops::FusedMatvecArgs f) {
  mv_quant_body<W>(f.mm, fusion_of(f));
}

template <DType W>
__global__ void __launch_bounds__(kMvWarps * 32, kCudaMvBlocksPerSm) mv_dense_fused_kernel(const __grid_constant__ ops::FusedMatvecArgs f) {
  mv_dense_body<W>(f.mm, fusion_of(f));
}

template <DType W>
void register_weight_type(KernelRegistry& registry) {
  const std::string t(dtype_name(W));
  if constexpr (W == DType::f32 || W == DType::f16 || W == DType::bf16) {
    registry.add(make_cuda_kernel<ops::MatmulArgs>("mv_" + t + "_f32", reinterpret_cast<const void*>(&mv_dense_kernel<W>),
                                                   kMvWarps * 32, true, kMvSharedBytes));
    registry.add(make_cuda_kernel<ops::FusedMatvecArgs>("mv_" + t + "_f32_fused",
                                                        reinterpret_cast<const void*>(&mv_dense_fused_kernel<W>),
                                                        kMvWarps * 32, true, kMvSharedBytes));
  } else {
    registry.add(make_cuda_kernel<ops::MatmulArgs>("mv_" + t + "_f32", reinterpret_cast<const void*>(&mv_quant_kernel<W>),
                                                   kMvWarps * 32, true, kMvSharedBytes));
    registry.add(make_cuda_kernel<ops::FusedMatvecArgs>("mv_" + t + "_f32_fused",
                                                        reinterpret_cast<const void*>(&mv_quant_fused_kernel<W>),
                                                        kMvWarps * 32, true, kMvSharedBytes));
  }
}

}  // namespace

void register_mv_general_kernels(KernelRegistry& registry) {
  register_weight_type<DType::f32>(registry);
  register_weight_type<DType::f16>(registry);
  register_weight_type<DType::bf16>(registry);
  register_weight_type<DType::q4_0>(registry);
  register_weight_type<DType::q4_1>(registry);
  register_weight_type<DType::q8_0>(registry);
  register_weight_type<DType::q4_k>(registry);
  register_weight_type<DType::q5_k>(registry);
  register_weight_type<DType::q6_k>(registry);
  register_weight_type<DType::q5_0>(registry);
  register_weight_type<DType::q5_1>(registry);
  register_weight_type<DType::q2_k>(registry);
  register_weight_type<DType::q3_k>(registry);
  register_weight_type<DType::iq4_nl>(registry);
  register_weight_type<DType::iq4_xs>(registry);
}

}  // namespace onepass::cuda
