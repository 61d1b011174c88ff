// Shared pieces of the mv1 kernels (one row of x, the decode step's shape; device code):
// block shape, row streams, split K, the rows a warp finished in a pass, and the inputs of
// a warp's first epilogue copied into shared memory.
//
// Block shape: blockDim.x = 32 * S warps, each its own stream of row pairs ("slots"), and
// blockDim.y = P parts of K: the warps (slot, 0..P-1) take the same row pairs and
// consecutive ranges of the rows' chunks, and part 0 adds the others' sums
// (cuda_mv1_dims picks S and P; P > 1 needs S < 16: one named barrier per slot).
#pragma once

#include "launch.h"
#include "../kernels/common.cuh"
#include "../kernels/ptx.cuh"
#include "epilogue.cuh"
#include "mv_common.cuh"
#include "onepass/ops/matmul.h"
#include "x_staging.cuh"

namespace onepass::cuda {

struct Mv1Shape {
  int lane, slot, slots, part, parts;
  int stage_warp;  // the warp's index in the block: part * slots + slot
};

__device__ __forceinline__ Mv1Shape mv1_shape() {
  Mv1Shape s;
  s.lane = static_cast<int>(threadIdx.x & 31);
  s.slot = static_cast<int>(threadIdx.x >> 5);
  s.slots = static_cast<int>(blockDim.x >> 5);
  s.part = static_cast<int>(threadIdx.y);
  s.parts = static_cast<int>(blockDim.y);
  s.stage_warp = s.part * s.slots + s.slot;
  return s;
}

// A warp's row stream: its first output j0 (a row pair, or one output of a gate/up pair
// with SiLU fused), then every `step` outputs below n.
struct Mv1Rows {
  int n, first, step;
};
__device__ __forceinline__ Mv1Rows mv1_rows(const ops::MatmulArgs& a, const MvFusion& f, const Mv1Shape& s) {
  const int per = f.silu ? 1 : kMvRowsPerWarp;
  return {static_cast<int>(a.n), (static_cast<int>(blockIdx.x) * s.slots + s.slot) * per,
          static_cast<int>(gridDim.x) * s.slots * per};
}

// The chunks [first, first + count) of every row that part `part` of `parts` reads.
struct Mv1Chunks {
  int first, count;
};
__device__ __forceinline__ Mv1Chunks mv1_chunks(int all_chunks, const Mv1Shape& s) {
  const int first = s.part * all_chunks / s.parts;
  return {first, (s.part + 1) * all_chunks / s.parts - first};
}

constexpr int kMv1MaxSlots = 16;  // 512 threads
constexpr int kMv1MaxParts = static_cast<int>(kCudaMv1MaxParts);

// Split K: parts 1..P-1 hand their row pair's two sums (held by lane `owner`) to part 0
// of the same slot, whose lane `owner` adds them in part order. Slots alternate with the
// pair's parity: a part writes a slot again only after the next barrier, which part 0
// reaches after reading it.
using Mv1PartSums = float2[kMv1MaxSlots][2][kMv1MaxParts - 1];
__device__ __forceinline__ void mv1_add_parts(Mv1PartSums& sums, const Mv1Shape& s, int& parity, int owner,
                                              float& v0, float& v1) {
  if (s.part > 0 && s.lane == owner) sums[s.slot][parity][s.part - 1] = make_float2(v0, v1);
  asm volatile("bar.sync %0, %1;" ::"r"(1 + s.slot), "r"(32 * s.parts) : "memory");  // this slot's warps
  if (s.part == 0 && s.lane == owner) {
    for (int p = 1; p < s.parts; ++p) {
      const float2 other = sums[s.slot][parity][p - 1];
      v0 += other.x;
      v1 += other.y;
    }
  }
  parity ^= 1;
}

// The residual of a warp's first row pair in registers (for the storer lane), requested
// once x is staged, so that its L2 latency overlaps the sums instead of lengthening the
// first store (the cp.async ring bodies: q6_k, short rows).
__device__ __forceinline__ float2 mv1_load_first_residual(const ops::MatmulArgs& a, const MvFusion& f, int first,
                                                          bool storer) {
  float2 r = make_float2(0.0f, 0.0f);
  if (f.residual != nullptr && storer && first < a.n) {
    r.x = f.residual[first];
    if (!f.silu && first + 1 < a.n) r.y = f.residual[first + 1];
  }
  return r;
}

// The start of the bodies that copy their weights by cp.async into a ring of Stages
// shared-memory stages per warp (q6_k, short rows): the first Stages - 1 items are
// requested before the PDL wait (weights are read-only for the pass), a fused norm's
// weight is prefetched into L2, and x is staged once the predecessor is done. Returns x's
// scale (mv1_quantize_x). issue_next(slot) requests the warp's next item into `slot`.
template <int Stages, typename Issue>
__device__ __forceinline__ float mv1_cp_async_ring_prologue(const ops::MatmulArgs& a, const MvFusion& f,
                                                            Issue& issue_next, float* inv_rms, float* scratch,
                                                            XQuantSmem xs) {
#pragma unroll
  for (int t = 0; t < Stages - 1; ++t) issue_next(t);
  mv1_prefetch_norm_weight(a, f);
  const Mv1XPath x_path = mv1_x_path(a, f);
  pdl_wait();
  return mv1_quantize_x(a, f, x_path, inv_rms, scratch, xs);
}

// ---- finished rows ----------------------------------------------------------------------
//
// Rows a warp finished during one pass over its ring of weight items (mv1_quant_body,
// mv1_bulk_body, mv1_dense_body): lane i keeps the pass's i-th row's two sums (warp_sum
// leaves them in every lane) and stores that row, so the epilogue (RoPE's powf and
// sincosf, every fusion path, the parts' barrier) is compiled once after the pass instead
// of once per unrolled ring slot. A pass's stores wait for its last item, so the warp's
// last row breaks out of the pass at once.
struct Mv1FinishedRows {
  float v0 = 0.0f, v1 = 0.0f;
  int count = 0;
  __device__ __forceinline__ void add(int lane, float s0, float s1) {
    if (lane == count) {
      v0 = s0;
      v1 = s1;
    }
    ++count;
  }
};

// ---- the first pair's epilogue inputs in shared memory ----------------------------------
//
// What the epilogue of a warp's first row pair reads from memory (its residual, or for a
// Q/K/V product with RoPE folded in the token's position and stored angles) is copied by
// cp.async into the warp's shared slot (by the storer, lane 0 of part 0), so that the copy
// overlaps the x staging and the sums and no register holds it meanwhile; the storer waits
// for it at its first store. Held in registers across the staging instead, ptxas keeps
// these values in local memory and the first dot product waits behind them.
//
// The copy is issued either in the prologue before the PDL wait, when the inputs are
// early reads of the dispatch (mv1_first_pair_copy_in_prologue), or once x is staged
// (mv1_first_pair_copy_after_staging). Only mv1_quant_body copies in the prologue: its
// products (small models) start well before their wait, while the bulk and dense bodies'
// products usually start when a predecessor that fills the SMs ends, which puts the
// prologue's work on the critical path (`onepass bench` decode, H100).
//
// Slot .x, .y: the residual pair, or RoPE's stored (cos, sin) (RopeCosSin::load); .z: the
// token's position (int bits) with RoPE.
using Mv1FirstSlots = float4[kMv1MaxSlots];

// The warp's first output, computed again from %ctaid.x (volatile: not merged with the
// kernel's first reading), so that no register holds it through the x staging (ptxas
// would keep it in local memory).
__device__ __forceinline__ int mv1_first_output_reread(const MvFusion& f, const Mv1Shape& sh) {
  uint32_t block;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(block));
  return (static_cast<int>(block) * sh.slots + sh.slot) * (f.silu ? 1 : kMvRowsPerWarp);
}

// The storer's copies of its first pair's RoPE inputs: the token's position into slot.z
// and, with the angles loaded (RopeCosSin::load), the pair's stored (cos, sin) into .x, .y,
// so that neither powf and sincosf nor a load lies between the warp's sums and its stores.
__device__ __forceinline__ void mv1_rope_inputs_copy(const ops::MatmulArgs& a, const MvFusion& f, int first,
                                                     float4& slot) {
  const ops::MatvecRope& r = *f.rope;
  const uint32_t at = ptx::smem_addr(&slot);
  ptx::cp_async4(at + 8, r.positions);
  const uint32_t d = static_cast<uint32_t>(first) % static_cast<uint32_t>(r.head_dim);
  if (r.cos_sin_in != nullptr && d < static_cast<uint32_t>(r.rotary_dims)) {  // v pairs are never rotated
    ptx::cp_async4(at, r.cos_sin_in + d);
    ptx::cp_async4(at + 4, r.cos_sin_in + d + 1);
  }
}

// The storer's copy of its first pair's residual into slot.x, .y.
__device__ __forceinline__ void mv1_residual_copy(const ops::MatmulArgs& a, const MvFusion& f, int first,
                                                  float4& slot) {
  const uint32_t at = ptx::smem_addr(&slot);
  ptx::cp_async4(at, f.residual + first);
  if (!f.silu && first + 1 < a.n) ptx::cp_async4(at + 4, f.residual + first + 1);
}

// Whether the first pair's inputs are early reads of the dispatch, which may be copied
// before the PDL wait: RoPE with loaded angles (the position and the angles were written
// before the predecessor), or a residual marked residual_early (written two or three
// dispatches before the product in a decode step).
__device__ __forceinline__ bool mv1_first_pair_copy_in_prologue(const MvFusion& f) {
  return f.rope != nullptr ? f.rope->cos_sin_in != nullptr : f.residual != nullptr && f.residual_early;
}

// The storer's copy request in the prologue before the PDL wait (only when
// mv1_first_pair_copy_in_prologue).
__device__ __forceinline__ void mv1_first_pair_copy_prologue(const ops::MatmulArgs& a, const MvFusion& f,
                                                             const Mv1Shape& sh, float4& slot) {
  if (!mv1_first_pair_copy_in_prologue(f) || sh.lane != 0 || sh.part != 0) return;
  const int first = mv1_first_output_reread(f, sh);
  if (first >= a.n) return;
  if (f.rope != nullptr) {
    mv1_rope_inputs_copy(a, f, first, slot);
  } else {
    mv1_residual_copy(a, f, first, slot);
  }
  ptx::cp_async_commit();
}

// The storer's copy request after x is staged: its RoPE inputs, or slot.x, .y = the
// residual pair. kAfterPrologueCopy: the body calls mv1_first_pair_copy_prologue, so what
// that copies is there already, and with RoPE otherwise only the position is left.
template <bool kAfterPrologueCopy>
__device__ __forceinline__ void mv1_first_pair_copy_after_staging(const ops::MatmulArgs& a, const MvFusion& f,
                                                                  const Mv1Shape& sh, float4& slot) {
  if (sh.lane != 0 || sh.part != 0 || (f.rope == nullptr && f.residual == nullptr)) return;
  if (kAfterPrologueCopy && mv1_first_pair_copy_in_prologue(f)) return;
  const int first = mv1_first_output_reread(f, sh);
  if (first >= a.n) return;
  if (f.rope != nullptr) {
    if constexpr (kAfterPrologueCopy) {
      ptx::cp_async4(ptx::smem_addr(&slot) + 8, f.rope->positions);
    } else {
      mv1_rope_inputs_copy(a, f, first, slot);
    }
  } else {
    mv1_residual_copy(a, f, first, slot);
  }
  ptx::cp_async_commit();
}

// At the storer's first store: the warp's slot, once its copies have landed.
__device__ __forceinline__ float4 mv1_first_pair_landed(const float4& slot) {
  ptx::cp_async_wait<0>();
  return slot;
}

// The finished rows: lane i of part 0 stores the pass's i-th row (the warp's outputs
// next - count * step ... next - step, in order), after the other parts' sums are added
// (split K: one barrier per row, as the parts' rows may finish in different passes).
// first_slot: the warp's Mv1FirstSlots entry, read by lane 0 in the first pass.
__device__ __forceinline__ void mv1_finish_rows(const ops::MatmulArgs& a, const MvFusion& f, const Mv1Shape& sh,
                                                Mv1FinishedRows& done, Mv1PartSums& part_sums, int& parity, int next,
                                                int step, float x_scale, bool& first_pass, const float4& first_slot) {
  if (sh.parts > 1) {
#pragma unroll 1
    for (int i = 0; i < done.count; ++i) mv1_add_parts(part_sums, sh, parity, i, done.v0, done.v1);
  }
  if (sh.part == 0 && sh.lane < done.count) {
    const int j0 = next - (done.count - sh.lane) * step;
    const bool is_first = first_pass && sh.lane == 0;
    const float4 slot = is_first ? mv1_first_pair_landed(first_slot) : make_float4(1.0f, 0.0f, 0.0f, 0.0f);
    const float2 pair = make_float2(slot.x, slot.y);  // the residual pair, or the stored (cos, sin)
    mv_store_row(a, f, 0, j0, done.v0 * x_scale, done.v1 * x_scale,
                 is_first && f.rope ? __float_as_int(slot.z) : rope_position(f), pair, is_first,
                 is_first ? reinterpret_cast<const float2*>(&first_slot) : nullptr);
  }
  if (done.count > 0) first_pass = false;
  done.count = 0;
}

}  // namespace onepass::cuda
