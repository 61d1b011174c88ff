// Thin wrappers over the PTX instructions the CUDA kernels share: asynchronous global ->
// shared copies (sm_80+), hand-offs between the blocks of a cluster (sm_90), ldmatrix and
// the tensor-core products (mma.sync: m16n8k16 on f16/bf16, m16n8k32 on 8-bit integers).
#pragma once

#include <cstdint>

namespace onepass::cuda::ptx {

/// Shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// 16-byte asynchronous copy (bypassing L1), in this thread's current commit group.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
/// 8-byte asynchronous copy (through L1).
__device__ __forceinline__ void cp_async8(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(dst), "l"(src) : "memory");
}
/// 4-byte asynchronous copy (through L1).
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}
/// Closes this thread's current group of asynchronous copies.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
/// Waits until at most `Pending` of this thread's newest groups are still in flight (the
/// copies of other threads need a barrier after their own wait to be visible).
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(Pending) : "memory");
}

// ---- one-way hand-offs inside a thread-block cluster (sm_90) ----------------------------
// A receiving block initialises a transaction barrier (mbarrier) and arms it with the bytes
// it expects; the other blocks store into its shared memory with st.async, each store
// counting its bytes on that barrier, and need not wait for anything; the receiver waits
// for the barrier's phase 0. The barrier must be initialised before the cluster barrier
// that the senders wait on before their first store.

/// Initialises the mbarrier at `bar` for one arrival per phase (no fence: see
/// mbarrier_init_for_receive).
__device__ __forceinline__ void mbarrier_init_one(uint32_t bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
}
/// Makes this thread's mbarrier initialisations visible to the cluster and to the
/// asynchronous proxy (the TMA unit, st.async).
__device__ __forceinline__ void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
/// Initialises the mbarrier at `bar` for one arrival (the receiver's own, made by
/// mbarrier_expect_bytes) and makes the initialisation visible to the cluster.
__device__ __forceinline__ void mbarrier_init_for_receive(uint32_t bar) {
  mbarrier_init_one(bar);
  fence_mbarrier_init();
}
/// The receiver's arrival: phase 0 completes once `bytes` have landed.
__device__ __forceinline__ void mbarrier_expect_bytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.relaxed.cta.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
/// Waits (every calling thread) until phase 0 of the mbarrier at `bar` completes; the
/// bytes counted on it are then visible to the thread.
__device__ __forceinline__ void mbarrier_wait_phase0(uint32_t bar) {
  for (uint32_t done = 0; !done;) {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(bar)
        : "memory");
  }
}
// ---- weights copied by the TMA unit into a ring of shared-memory slots (mv1_bulk) -------
// Each slot has an mbarrier for one arrival per phase: the producer arms it with the bytes
// of the slot's next copies (mbarrier_arrive_expect_tx) and issues them; the consumers wait
// for the phase's parity. Before a slot read through the generic proxy is refilled, the
// producer orders those reads before the copy's writes (fence_proxy_async_shared).

/// The producer's arrival at `bar` for a phase whose copies bring `bytes`.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
/// Waits (every calling thread) until the phase of parity `parity` of the mbarrier at `bar`
/// completes; its bytes are then visible to the thread.
__device__ __forceinline__ void mbarrier_wait_parity(uint32_t bar, uint32_t parity) {
  for (uint32_t done = 0; !done;) {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
}
/// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global `src` to shared
/// `dst` by the TMA unit, counted on the mbarrier at `bar`.
__device__ __forceinline__ void cp_async_bulk_to_shared(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
/// Orders this thread's earlier generic-proxy accesses to shared memory before later
/// asynchronous-proxy ones (a TMA copy into a slot it has read).
__device__ __forceinline__ void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

/// This thread's arrival at the cluster barrier, without release ordering: for a hand-off
/// whose only shared state is an mbarrier published by fence_mbarrier_init (the release
/// arrival compiles to a MEMBAR.GPU on the path to the PDL wait). Pair with
/// barrier.cluster.wait before the first st.async into another block.
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

/// The address in cluster block `rank`'s shared memory of this block's address `addr`.
__device__ __forceinline__ uint32_t cluster_shared_addr(uint32_t addr, uint32_t rank) {
  uint32_t remote;
  asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
  return remote;
}
/// Stores 4 bytes at `remote` (a cluster_shared_addr) and counts them on the receiver's
/// mbarrier at `remote_bar`.
__device__ __forceinline__ void st_async_b32(uint32_t remote, uint32_t value, uint32_t remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(remote), "r"(value),
               "r"(remote_bar)
               : "memory");
}

__device__ __forceinline__ void st_shared_v4(uint32_t dst, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(dst), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

/// Four 8x8 b16 matrices from shared memory (lanes 8i..8i+7 give the rows of matrix i).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
/// The same, each matrix transposed.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/// c += a · b for one m16n8k16 tile, f16 operands, f32 accumulators.
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/// The same with bf16 operands.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// c += a · b for one m16n8k32 tile of 8-bit integers, s32 accumulators: a unsigned
/// (A_UNSIGNED) or signed, b signed.
template <bool A_UNSIGNED>
__device__ __forceinline__ void mma_i8(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (A_UNSIGNED) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

}  // namespace onepass::cuda::ptx
