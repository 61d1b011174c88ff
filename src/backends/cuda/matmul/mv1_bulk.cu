// CUDA kernels mv1_bulk_<W>_f32[_fused] for q4_0, q4_1 and q8_0: one row of x (the
// decode step), weights copied by the TMA unit into a shared-memory ring per warp.
//
// mv1_quant_body (mv1_quant.cu) with the weights copied by cp.async.bulk: each warp's
// items (a row pair's chunk) land in a ring of `depth` shared-memory slots (one copy per
// row, issued by lane 0 and counted on the slot's transaction barrier), where
// mv1_quant_body loads them into registers and stores them into the warp's stage with
// every lane. No per-lane load, store or register ring per item: ~70 registers instead
// of 128, and room for 16-warp blocks (cuda_mv1_dims). Needs rows and chunks of whole
// 16-byte words at 16-byte aligned addresses (the op picks it by cuda_mv1_bulk).
#include "launch.h"
#include "../kernels/common.cuh"
#include "../kernels/ptx.cuh"
#include "../kernels/quant_dot.cuh"
#include "../kernels/registration.h"
#include "mv1_common.cuh"
#include "mv_common.cuh"
#include "onepass/ops/matmul.h"
#include "register.h"
#include "x_staging.cuh"

namespace onepass::cuda {
namespace {

// The ring takes what the dynamic shared memory leaves after x:
// depth = min(kMv1BulkMaxDepth, room / (warps * 2 * chunk bytes)).
constexpr int kMv1BulkMaxDepth = 4;

template <DType W>
__device__ __forceinline__ void mv1_bulk_body(const ops::MatmulArgs& a, const MvFusion& f) {
  using F = quantdot::Format<W>;
  constexpr int kChunkBytes = 32 / F::kUnits * F::kBlockBytes;
  static_assert(kChunkBytes % 16 == 0, "a chunk is whole 16-byte words");
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float inv_rms[kMvMaxRows];
  __shared__ __align__(16) float scratch[32];
  __shared__ Mv1PartSums part_sums;
  __shared__ Mv1FirstSlots first_slots;
  __shared__ uint64_t bars[kMv1MaxSlots * kMv1MaxParts][kMv1BulkMaxDepth];
  const int64_t xq_bytes = (a.k + 15) / 16 * 16;
  XQuantSmem xs{reinterpret_cast<int8_t*>(smem), reinterpret_cast<float4*>(smem + xq_bytes)};
  const Mv1Shape sh = mv1_shape();
  const int warps = sh.slots * sh.parts;
  const uint32_t x_bytes = static_cast<uint32_t>(xq_bytes + a.k / 32 * 16);
  uint32_t dynamic_bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_bytes));
  const int depth =
      min(kMv1BulkMaxDepth, static_cast<int>((dynamic_bytes - x_bytes) / (static_cast<uint32_t>(warps) * 2 * kChunkBytes)));
  unsigned char* ring = smem + x_bytes + static_cast<uint32_t>(sh.stage_warp * depth) * 2 * kChunkBytes;
  uint64_t* bar = bars[sh.stage_warp];
  const int lane = sh.lane;
  const int units = static_cast<int>(a.k / 32);
  const Mv1Chunks mine = mv1_chunks((units + 31) / 32, sh);
  const int c_first = mine.first;
  const int chunks = mine.count;
  const int row_bytes = static_cast<int>(a.w_row_bytes);
  const auto* w = static_cast<const uint8_t*>(a.w);
  const Mv1Rows rows = mv1_rows(a, f, sh);
  const int n = rows.n, first = rows.first, step_rows = rows.step;
  // Lane 0 requests the items: output j0 of the row pair and chunk c, into slot `slot`.
  int load_j0 = first, load_c = 0;
  auto issue_next = [&](int slot) {
    const int offset = (c_first + load_c) * kChunkBytes;
    const uint32_t bytes = static_cast<uint32_t>(min(kChunkBytes, row_bytes - offset));
    const uint32_t b = ptx::smem_addr(&bar[slot]);
    ptx::mbarrier_arrive_expect_tx(b, 2 * bytes);
#pragma unroll
    for (int r = 0; r < kMvRowsPerWarp; ++r) {
      const uint8_t* src = w + mv_weight_row(a, f, load_j0, r) * a.w_row_bytes + offset;
      ptx::cp_async_bulk_to_shared(ptx::smem_addr(ring + (slot * 2 + r) * kChunkBytes), src, bytes, b);
    }
    if (++load_c == chunks) {
      load_c = 0;
      load_j0 += step_rows;
    }
  };
  // Prologue before the PDL wait. Weights are read-only for the pass: the first items are
  // requested here. The norm weight is only prefetched into L2 (mv1_norm_weight_prologue),
  // and the first pair's epilogue inputs are copied after the staging.
  if (lane == 0) {
    for (int d = 0; d < depth; ++d) ptx::mbarrier_init_one(ptx::smem_addr(&bar[d]));
    ptx::fence_mbarrier_init();
    for (int d = 0; d < depth && load_j0 < n; ++d) issue_next(d);
  }
  __syncwarp();
  mv1_prefetch_norm_weight(a, f);
  const Mv1XPath x_path = mv1_x_path(a, f);
  pdl_wait();
  const float x_scale = mv1_quantize_x(a, f, x_path, inv_rms, scratch, xs);
  mv1_first_pair_copy_after_staging<false>(a, f, sh, first_slots[sh.slot]);

  int j0 = first, c = 0, parity = 0;
  Mv1FinishedRows done;
  bool first_pass = true;
  float acc0 = 0.0f, acc1 = 0.0f;
  const int local_block = lane / F::kUnits;
  const int sub = lane - local_block * F::kUnits;
  int slot = 0;
  uint32_t phase = 0;  // of the slots' barriers in this pass over the ring
  while (j0 < n) {
    for (int d = 0; d < kMv1BulkMaxDepth; ++d) {
      if (d >= depth || j0 >= n) break;  // warp-uniform
      ptx::mbarrier_wait_parity(ptx::smem_addr(&bar[slot]), phase);
      const int u = (c_first + c) * 32 + lane;
      if (u < units) {
        const float4 g = xs.groups[u];
        const auto x = quantdot::XGroup::load(xs.q + u * 32, g.x, g.y, g.z);
        float part[kMvRowsPerWarp];
#pragma unroll
        for (int r = 0; r < kMvRowsPerWarp; ++r) {
          part[r] = F::unit_dot(ring + (slot * 2 + r) * kChunkBytes + local_block * F::kBlockBytes, sub, x);
        }
        acc0 += part[0];
        acc1 += part[1];
      }
      __syncwarp();  // every lane is done with the slot
      if (lane == 0 && load_j0 < n) {
        ptx::fence_proxy_async_shared();  // the warp's reads of the slot before the copy's writes
        issue_next(slot);  // depth items ahead
      }
      if (++slot == depth) {
        slot = 0;
        phase ^= 1u;
      }
      if (++c == chunks) {
        done.add(lane, warp_sum(acc0), warp_sum(acc1));
        acc0 = acc1 = 0.0f;
        c = 0;
        j0 += step_rows;
        if (j0 >= n) break;  // the warp's last row: to its store without the slots' checks
      }
    }
    mv1_finish_rows(a, f, sh, done, part_sums, parity, j0, step_rows, x_scale, first_pass, first_slots[sh.slot]);
  }
}

template <DType W>
__global__ void __launch_bounds__(kCudaMv1MaxThreads, 1) mv1_bulk_kernel(const __grid_constant__ ops::MatmulArgs a) {
  mv1_bulk_body<W>(a, MvFusion{});
}

template <DType W>
__global__ void __launch_bounds__(kCudaMv1MaxThreads, 1) mv1_bulk_fused_kernel(const __grid_constant__ ops::FusedMatvecArgs f) {
  mv1_bulk_body<W>(f.mm, fusion_of(f));
}

template <DType W>
void register_weight_type(KernelRegistry& registry) {
  const std::string t(dtype_name(W));
  registry.add(make_cuda_kernel<ops::MatmulArgs>("mv1_bulk_" + t + "_f32",
                                                 reinterpret_cast<const void*>(&mv1_bulk_kernel<W>),
                                                 kCudaMv1MaxThreads, true, kCudaMv1BulkSharedLimit));
  registry.add(make_cuda_kernel<ops::FusedMatvecArgs>("mv1_bulk_" + t + "_f32_fused",
                                                      reinterpret_cast<const void*>(&mv1_bulk_fused_kernel<W>),
                                                      kCudaMv1MaxThreads, true, kCudaMv1BulkSharedLimit));
}

}  // namespace

void register_mv1_bulk_kernels(KernelRegistry& registry) {
  register_weight_type<DType::q4_0>(registry);
  register_weight_type<DType::q4_1>(registry);
  register_weight_type<DType::q8_0>(registry);
}

}  // namespace onepass::cuda
