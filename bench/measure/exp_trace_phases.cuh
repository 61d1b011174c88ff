// Phases build only (bench/measure/README.md): %globaltimer stamps of every block of the
// decode kernels into a device ring, dumped by the bench tool (ONEPASS_TRACE=dir): start,
// eight phase stamps (EXP_TRACE_AT / EXP_TRACE_ONCE: thread 0, first time) and the end
// (96-byte records). Copied into src/backends/cuda/kernels/ as exp_trace.cuh for that build,
// never part of the library.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <cuda_runtime.h>
namespace onepass::cuda::exptrace {
struct Rec {
  uint32_t tag, n, k, blk;
  unsigned long long t0, t1, t2, t3, t4, t5, t6, t7, t8, t9;
};
constexpr uint32_t kCap = 1u << 20;
static __device__ Rec g_recs[kCap];
static __device__ unsigned g_count;
__device__ __forceinline__ unsigned long long now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
struct Block {
  unsigned long long t[9];
  unsigned done;
};
#define EXP_TRACE_SHARED __shared__ onepass::cuda::exptrace::Block exp_tr
#define EXP_TRACE_START() do { if (threadIdx.x == 0) { exp_tr.t[0] = onepass::cuda::exptrace::now(); exp_tr.t[1] = 0; exp_tr.t[2] = 0; exp_tr.t[3] = 0; exp_tr.t[4] = 0; exp_tr.t[5] = 0; exp_tr.t[6] = 0; exp_tr.t[7] = 0; exp_tr.t[8] = 0; exp_tr.done = 0; } } while (0)
#define EXP_TRACE_AT(i) do { if (threadIdx.x == 0) exp_tr.t[i] = onepass::cuda::exptrace::now(); } while (0)
#define EXP_TRACE_ONCE(i) do { if (threadIdx.x == 0 && threadIdx.y == 0 && exp_tr.t[i] == 0) exp_tr.t[i] = onepass::cuda::exptrace::now(); } while (0)
#define EXP_TRACE_END(tag, nn, kk) do { \
    if ((threadIdx.x & 31) == 0) { \
      if (atomicAdd(&exp_tr.done, 1u) == (blockDim.x >> 5) - 1) { \
        const unsigned i = atomicAdd(&onepass::cuda::exptrace::g_count, 1u) & (onepass::cuda::exptrace::kCap - 1); \
        onepass::cuda::exptrace::Rec r{static_cast<uint32_t>(tag), static_cast<uint32_t>(nn), static_cast<uint32_t>(kk), \
                                       blockIdx.y * gridDim.x + blockIdx.x, exp_tr.t[0], exp_tr.t[1], exp_tr.t[2], exp_tr.t[3], exp_tr.t[4], exp_tr.t[5], exp_tr.t[6], exp_tr.t[7], exp_tr.t[8], \
                                       onepass::cuda::exptrace::now()}; \
        onepass::cuda::exptrace::g_recs[i] = r; \
      } \
    } } while (0)
static void dump(const char* dir, const char* name) {
  unsigned count = 0;
  cudaDeviceSynchronize();
  cudaMemcpyFromSymbol(&count, g_count, sizeof(count));
  const unsigned m = count < kCap ? count : kCap;
  Rec* h = new Rec[m];
  cudaMemcpyFromSymbol(h, g_recs, m * sizeof(Rec));
  std::string p = std::string(dir) + "/" + name;
  FILE* f = fopen(p.c_str(), "wb");
  fwrite(&m, 4, 1, f);
  fwrite(h, sizeof(Rec), m, f);
  fclose(f);
  delete[] h;
  fprintf(stderr, "trace %s: %u records\n", p.c_str(), m);
}
}  // namespace onepass::cuda::exptrace
