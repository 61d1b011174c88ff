// CUDA kernels mv1_<W>_f32[_fused] for the block formats but q6_k (mv1_q6k.cu): one row
// of x (the decode step), weights loaded into a register ring of items per warp.
//
// A warp's work is one flat stream of items (row pair, chunk of 32 units) and
// mv1_ring_depth items are always in flight: the next row pair's weights are requested
// while this one is computed, where the general body (mv_general.cu) waits for them at
// every row pair. Indexing is 32-bit within a row; weights are read through the
// non-coherent path (read-only for the pass). Dynamic shared memory: x quantized
// (cuda_mv_shared_bytes), then each warp's staging area for its chunks.
#include "launch.h"
#include "../kernels/common.cuh"
#include "../kernels/quant_dot.cuh"
#include "../kernels/registration.h"
#include "mv1_common.cuh"
#include "mv_common.cuh"
#include "onepass/ops/matmul.h"
#include "register.h"
#include "x_staging.cuh"

namespace onepass::cuda {
namespace {

// Weight items (chunks of a warp's row pair) in flight per warp. The one-unit formats
// (q4_0, q4_1, q8_0) take this body only for rows shorter than kCudaMv1BulkMinK or
// not in whole 16-byte words (the others take mv1_bulk_body): such rows give a warp few
// items, which two in flight cover, while a deeper unrolled ring costs instruction-cache
// footprint on every launch. The k-quants keep four items when a chunk of both rows takes
// at most 16 registers per lane, else three. Chosen by `onepass bench` decode on the H100.
template <DType W>
constexpr int mv1_ring_depth() {
  if constexpr (W == DType::q4_0 || W == DType::q4_1 || W == DType::q8_0) return 2;
  return (mv_stage_words<W>() + 31) / 32 <= 2 ? 4 : 3;
}

template <DType W>
__device__ __forceinline__ void mv1_quant_body(const ops::MatmulArgs& a, const MvFusion& f) {
  using F = quantdot::Format<W>;
  constexpr int kWords = mv_stage_words<W>();
  constexpr int kLoads = (kWords + 31) / 32;
  constexpr int kChunkBytes = 32 / F::kUnits * F::kBlockBytes;
  constexpr int kDepth = mv1_ring_depth<W>();
  static_assert(kDepth <= 32, "a lane per row finished in a pass (Mv1FinishedRows)");
  using Stage = uint4[kMvRowsPerWarp][kLoads * 32];
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float inv_rms[kMvMaxRows];
  __shared__ __align__(16) float scratch[32];
  __shared__ Mv1PartSums part_sums;
  __shared__ Mv1FirstSlots first_slots;
  const int64_t xq_bytes = (a.k + 15) / 16 * 16;
  XQuantSmem xs{reinterpret_cast<int8_t*>(smem), reinterpret_cast<float4*>(smem + xq_bytes)};
  const Mv1Shape sh = mv1_shape();
  Stage& stage = reinterpret_cast<Stage*>(smem + xq_bytes + a.k / 32 * 16)[sh.stage_warp];
  const int lane = sh.lane;
  const int units = static_cast<int>(a.k / 32);
  const Mv1Chunks mine = mv1_chunks((units + 31) / 32, sh);
  const int c_first = mine.first;
  const int chunks = mine.count;
  const int row_bytes = static_cast<int>(a.w_row_bytes);
  const auto* w = static_cast<const uint8_t*>(a.w);
  const Mv1Rows rows = mv1_rows(a, f, sh);
  const int n = rows.n, first = rows.first, step_rows = rows.step;
  using Chunk = uint4[kMvRowsPerWarp][kLoads];
  Chunk ring[kDepth];
  // Item cursors: output j0 of the row pair and chunk c, for the loads and the sums.
  int load_j0 = first, load_c = 0;
  auto load_next = [&](Chunk& into) {
#pragma unroll
    for (int r = 0; r < kMvRowsPerWarp; ++r) {
      const uint8_t* row = w + mv_weight_row(a, f, load_j0, r) * a.w_row_bytes;
      const int offset = (c_first + load_c) * kChunkBytes;
      const uintptr_t begin = reinterpret_cast<uintptr_t>(row) + offset;
      const int bytes = min(kChunkBytes, row_bytes - offset);
      const uintptr_t aligned = begin & ~uintptr_t{15};
      const int words = static_cast<int>((begin + bytes - aligned + 15) / 16);
      const auto* src = reinterpret_cast<const uint4*>(aligned);
#pragma unroll
      for (int i = 0; i < kLoads; ++i) {
        const int word = lane + 32 * i;
        into[r][i] = word < words ? __ldg(src + word) : make_uint4(0, 0, 0, 0);
      }
    }
    if (++load_c == chunks) {
      load_c = 0;
      load_j0 += step_rows;
    }
  };
  // Prologue before the PDL wait. Weights are read-only for the pass: the first items are
  // requested here, so their latency overlaps the predecessor's tail and the x staging;
  // then the norm weight and the first pair's early epilogue inputs.
#pragma unroll
  for (int d = 0; d < kDepth; ++d) {
    if (load_j0 < n) load_next(ring[d]);
  }
  const Mv1XPath x_path = mv1_x_path(a, f);
  const bool norm_w_in_registers = x_path == Mv1XPath::deferred_norm;
  float4 norm_w[kXBatch];
  mv1_norm_weight_prologue(a, f, norm_w_in_registers, norm_w);
  mv1_first_pair_copy_prologue(a, f, sh, first_slots[sh.slot]);
  pdl_wait();
  const float x_scale = mv1_quantize_x(a, f, x_path, inv_rms, scratch, xs, norm_w, norm_w_in_registers);
  mv1_first_pair_copy_after_staging<true>(a, f, sh, first_slots[sh.slot]);

  int j0 = first, c = 0, parity = 0;
  Mv1FinishedRows done;
  bool first_pass = true;
  float acc0 = 0.0f, acc1 = 0.0f;
  const int local_block = lane / F::kUnits;
  const int sub = lane - local_block * F::kUnits;
  while (j0 < n) {
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      if (j0 < n) {  // warp-uniform
        __syncwarp();  // every lane is done with the previous item's stage
#pragma unroll
        for (int r = 0; r < kMvRowsPerWarp; ++r) {
#pragma unroll
          for (int i = 0; i < kLoads; ++i) stage[r][lane + 32 * i] = ring[d][r][i];
        }
        __syncwarp();
        if (load_j0 < n) load_next(ring[d]);  // kDepth items ahead
        const int u = (c_first + c) * 32 + lane;
        if (u < units) {
          const float4 g = xs.groups[u];
          const auto x = quantdot::XGroup::load(xs.q + u * 32, g.x, g.y, g.z);
          float part[kMvRowsPerWarp];
#pragma unroll
          for (int r = 0; r < kMvRowsPerWarp; ++r) {
            const uintptr_t begin =
                reinterpret_cast<uintptr_t>(w + mv_weight_row(a, f, j0, r) * a.w_row_bytes) + (c_first + c) * kChunkBytes;
            const auto* staged = reinterpret_cast<const uint8_t*>(&stage[r][0]) + (begin & 15) +
                                 local_block * F::kBlockBytes;
            part[r] = F::unit_dot(staged, sub, x);
          }
          acc0 += part[0];
          acc1 += part[1];
        }
        if (++c == chunks) {
          done.add(lane, warp_sum(acc0), warp_sum(acc1));
          acc0 = acc1 = 0.0f;
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
__global__ void __launch_bounds__(kCudaMv1MaxThreads, 1) mv1_quant_kernel(const __grid_constant__ ops::MatmulArgs a) {
  mv1_quant_body<W>(a, MvFusion{});
}

template <DType W>
__global__ void __launch_bounds__(kCudaMv1MaxThreads, 1) mv1_quant_fused_kernel(const __grid_constant__ ops::FusedMatvecArgs f) {
  mv1_quant_body<W>(f.mm, fusion_of(f));
}

template <DType W>
void register_weight_type(KernelRegistry& registry) {
  const std::string t(dtype_name(W));
  registry.add(make_cuda_kernel<ops::MatmulArgs>("mv1_" + t + "_f32", reinterpret_cast<const void*>(&mv1_quant_kernel<W>),
                                                 kCudaMv1MaxThreads, true, kMvSharedBytes));
  registry.add(make_cuda_kernel<ops::FusedMatvecArgs>("mv1_" + t + "_f32_fused",
                                                      reinterpret_cast<const void*>(&mv1_quant_fused_kernel<W>),
                                                      kCudaMv1MaxThreads, true, kMvSharedBytes));
}

}  // namespace

void register_mv1_quant_kernels(KernelRegistry& registry) {
  register_weight_type<DType::q4_0>(registry);
  register_weight_type<DType::q4_1>(registry);
  register_weight_type<DType::q8_0>(registry);
  register_weight_type<DType::q4_k>(registry);
  register_weight_type<DType::q5_k>(registry);
  register_weight_type<DType::q5_0>(registry);
  register_weight_type<DType::q5_1>(registry);
  register_weight_type<DType::q2_k>(registry);
  register_weight_type<DType::q3_k>(registry);
  register_weight_type<DType::iq4_nl>(registry);
  register_weight_type<DType::iq4_xs>(registry);
}

}  // namespace onepass::cuda
