// Microbenchmark: a chain of dependent phases inside one thread-block cluster (one launch).
// Each phase: every block computes 8 values from all the previous phase's values and sends
// them into every block's shared memory. Mode 0: remote st.shared::cluster + barrier.cluster.
// Mode 1: st.async counted on a transaction barrier in each receiver (no cluster barrier).
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cstdint>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s line %d\n", #x, cudaGetErrorString(e), __LINE__); exit(1); } } while (0)

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ uint32_t mapa(uint32_t a, uint32_t r) { uint32_t o; asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(o) : "r"(a), "r"(r)); return o; }
__device__ __forceinline__ uint32_t cluster_rank() { uint32_t r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ uint32_t cluster_n() { uint32_t r; asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

constexpr int kThreads = 256;
__global__ void __launch_bounds__(kThreads) chain(float* out, int phases, int mode, int work) {
  __shared__ float buf[2][16 * 8];
  __shared__ float red[8];
  __shared__ __align__(8) uint64_t bar[2];
  const uint32_t rank = cluster_rank(), n = cluster_n();
  const int t = threadIdx.x;
  if (t < 16 * 8) { buf[0][t] = 0.5f; buf[1][t] = 0.5f; }
  if (t == 0) {
    for (int i = 0; i < 2; ++i) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bar[i])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  cluster_sync();
  const uint32_t bytes = n * 8 * 4;
  float last = 0.f;
  for (int p = 0; p < phases; ++p) {
    const int in = (p + 1) & 1, o = p & 1;
    // compute from buf[in] (phase p-1's values; initial 0.5 for p = 0)
    float s = 0.f;
    if (t < (int)n * 8) { const float v = buf[in][t]; s = v * v; }
    for (int r = 0; r < work; ++r) s = s * 0.999f + 1e-3f;
    for (int k = 16; k > 0; k >>= 1) s += __shfl_xor_sync(0xffffffffu, s, k);
    if ((t & 31) == 0) red[t >> 5] = s;
    __syncthreads();
    float tot = 0.f;
    for (int w = 0; w < kThreads / 32; ++w) tot += red[w];
    last = tot;
    // send 8 values to every block: thread (dst, j) for dst < n, j < 8
    if (mode == 1 && t == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(&bar[o])), "r"(bytes) : "memory");
    }
    if (t < (int)n * 8) {
      const uint32_t dst = t >> 3, j = t & 7;
      const float v = 1.0f / (1.0f + tot * 1e-6f) + 1e-7f * (rank * 8 + j);
      const uint32_t remote = mapa(smem_addr(&buf[o][rank * 8 + j]), dst);
      if (mode == 0) {
        asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(remote), "f"(v) : "memory");
      } else {
        const uint32_t rbar = mapa(smem_addr(&bar[o]), dst);
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(remote), "r"(__float_as_uint(v)), "r"(rbar) : "memory");
      }
    }
    if (mode == 0) {
      cluster_sync();
    } else {
      const uint32_t parity = (p >> 1) & 1;
      uint32_t done = 0;
      while (!done) {
        asm volatile("{ .reg .pred q; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 q, [%1], %2; selp.u32 %0, 1, 0, q; }"
                     : "=r"(done) : "r"(smem_addr(&bar[o])), "r"(parity) : "memory");
      }
      __syncthreads();  // red reuse
    }
  }
  if (t == 0) out[blockIdx.x] = last;
  cluster_sync();  // no block exits while others may still write into it
}

int main() {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  float* out;
  CK(cudaMalloc(&out, 4096 * 4));
  CK(cudaFuncSetAttribute(chain, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  for (int cs : {8, 16}) {
    for (int smem_kb : {0, 200}) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(cs); cfg.blockDim = dim3(kThreads); cfg.dynamicSmemBytes = smem_kb * 1024;
      if (smem_kb) CK(cudaFuncSetAttribute(chain, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_kb * 1024));
      cudaLaunchAttribute a[1]; a[0].id = cudaLaunchAttributeClusterDimension; a[0].val.clusterDim.x = cs; a[0].val.clusterDim.y = 1; a[0].val.clusterDim.z = 1;
      cfg.attrs = a; cfg.numAttrs = 1;
      int nc = 0; CK(cudaOccupancyMaxActiveClusters(&nc, chain, &cfg));
      printf("cluster %d, dyn smem %d KB: max active clusters %d\n", cs, smem_kb, nc);
    }
  }
  CK(cudaFuncSetAttribute(chain, cudaFuncAttributeMaxDynamicSharedMemorySize, 0));
  cudaStream_t st; CK(cudaStreamCreate(&st));
  const int phases = 300;
  printf("%7s %5s %5s %10s\n", "cluster", "mode", "work", "us/phase");
  for (int work : {0, 200})
  for (int cs : {4, 8, 16})
  for (int mode : {0, 1}) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(cs); cfg.blockDim = dim3(kThreads); cfg.stream = st;
    cudaLaunchAttribute a[1]; a[0].id = cudaLaunchAttributeClusterDimension; a[0].val.clusterDim.x = cs; a[0].val.clusterDim.y = 1; a[0].val.clusterDim.z = 1;
    cfg.attrs = a; cfg.numAttrs = 1;
    for (int i = 0; i < 5; ++i) CK(cudaLaunchKernelEx(&cfg, chain, out, phases, mode, work));
    CK(cudaStreamSynchronize(st));
    std::vector<float> ts;
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    for (int rep = 0; rep < 7; ++rep) {
      // difference of two phase counts removes the launch cost
      float ms[2];
      for (int k = 0; k < 2; ++k) {
        CK(cudaEventRecord(e0, st));
        for (int i = 0; i < 10; ++i) CK(cudaLaunchKernelEx(&cfg, chain, out, k ? phases : 20, mode, work));
        CK(cudaEventRecord(e1, st)); CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms[k], e0, e1));
      }
      ts.push_back((ms[1] - ms[0]) * 1000.f / 10 / (phases - 20));
    }
    std::sort(ts.begin(), ts.end());
    printf("%7d %5d %5d %10.3f\n", cs, mode, work, ts[3]);
  }
  std::vector<float> h(16); CK(cudaMemcpy(h.data(), out, 64, cudaMemcpyDeviceToHost));
  printf("check %f %f\n", h[0], h[15]);
  return 0;
}
