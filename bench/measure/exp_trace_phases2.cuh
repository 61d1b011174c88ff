// Measurement build only: %globaltimer stamps per block (t[0] start, t[1..5] phase stamps by
// flat thread 0, end by the last warp) into a device ring dumped by the bench tool.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <cuda_runtime.h>
namespace onepass::cuda::exptrace {
struct Rec {
  uint32_t tag, n, k, blk;
  unsigned long long t[7];
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
  unsigned long long t[6];
  unsigned done;
};
}  // namespace onepass::cuda::exptrace
#define EXP_TRACE_SHARED __shared__ onepass::cuda::exptrace::Block exp_tr
#define EXP_T0 (threadIdx.x == 0 && threadIdx.y == 0)
#define EXP_TRACE_START() do { if (EXP_T0) { exp_tr.t[0] = onepass::cuda::exptrace::now(); for (int q_ = 1; q_ < 6; ++q_) exp_tr.t[q_] = 0; exp_tr.done = 0; } } while (0)
#define EXP_TRACE_AT(i) do { if (EXP_T0) exp_tr.t[i] = onepass::cuda::exptrace::now(); } while (0)
#define EXP_TRACE_END(tag, nn, kk) do { \
    if (((threadIdx.y * blockDim.x + threadIdx.x) & 31) == 0) { \
      if (atomicAdd(&exp_tr.done, 1u) == ((blockDim.x * blockDim.y) >> 5) - 1) { \
        const unsigned i_ = atomicAdd(&onepass::cuda::exptrace::g_count, 1u) & (onepass::cuda::exptrace::kCap - 1); \
        onepass::cuda::exptrace::Rec r_{static_cast<uint32_t>(tag), static_cast<uint32_t>(nn), static_cast<uint32_t>(kk), \
                                       blockIdx.y * gridDim.x + blockIdx.x, \
                                       {exp_tr.t[0], exp_tr.t[1], exp_tr.t[2], exp_tr.t[3], exp_tr.t[4], exp_tr.t[5], \
                                        onepass::cuda::exptrace::now()}}; \
        onepass::cuda::exptrace::g_recs[i_] = r_; \
      } \
    } } while (0)
namespace onepass::cuda::exptrace {
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
