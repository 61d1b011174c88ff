// Shared by the chain microbenchmarks (pdl_chain.cu, icache_chain.cu): error checks, the
// PDL launch attribute, and the median time per step of an instantiated graph.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e = (x);                                                               \
    if (e != cudaSuccess) {                                                            \
      printf("%s: %s line %d\n", #x, cudaGetErrorString(e), __LINE__);                 \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

constexpr int kChainN = 576;  // floats of x per step

// The end of a step: the block's sum of `s` (256 threads, red[8] in shared memory), and 8
// floats of the next x from it (block b writes [8 b, 8 b + 8) below kChainN).
__device__ __forceinline__ void chain_reduce_and_store(float s, float* red, float* out, float scale) {
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
  __syncthreads();
  float t = 0.f;
  for (int w = 0; w < 8; ++w) t += red[w];
  if (threadIdx.x < 8) {
    const int j = blockIdx.x * 8 + threadIdx.x;
    if (j < kChainN) out[j] = 1.0f / (1.0f + fabsf(t) * scale) + 1e-7f * j;
  }
}

// A launch of `blocks` x 256 threads on `st`, with programmatic dependent launch when `pdl`.
struct ChainLaunch {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  ChainLaunch(int blocks, cudaStream_t st, bool pdl) {
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(256);
    cfg.stream = st;
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
  }
};

// Median over 7 runs of 50 launches of the graph captured on `st` (destroyed after), in µs
// per step of a `chain`-step graph; 20 launches of warm-up first.
inline float time_graph_per_step(cudaGraph_t g, cudaStream_t st, int chain) {
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < 20; ++i) CK(cudaGraphLaunch(ge, st));
  CK(cudaStreamSynchronize(st));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ts;
  for (int rep = 0; rep < 7; ++rep) {
    CK(cudaEventRecord(e0, st));
    for (int i = 0; i < 50; ++i) CK(cudaGraphLaunch(ge, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ts.push_back(ms * 1000.f / 50 / static_cast<float>(chain));
  }
  std::sort(ts.begin(), ts.end());
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  return ts[3];
}
