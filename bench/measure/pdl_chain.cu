// Microbenchmark (built by hand, see bench/measure/README.md): a chain of small dependent
// kernels in a CUDA graph, ordered by
// (0) plain stream order, (1) PDL + griddepcontrol.wait, (2) PDL + a per-kernel completion
// counter (blocks signal with a release add, consumers poll with acquire loads).
// Each kernel: every block reads the whole 576-float x (written by its predecessor),
// reduces its sum of squares, and writes 8 floats of the next x.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s line %d\n", #x, cudaGetErrorString(e), __LINE__); exit(1); } } while (0)

constexpr int kN = 576;

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void red_release(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__global__ void __launch_bounds__(256) step(const float* in, float* out, unsigned* counters, int idx, int chain,
                                            int mode, unsigned prev_blocks, int work) {
  __shared__ float red[8];
  if (mode == 1) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  } else if (mode == 2) {
    if (idx > 0 && threadIdx.x == 0) {
      while (ld_acquire(counters + idx - 1) < prev_blocks) {
      }
    }
    __syncthreads();
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      // counters[idx - 2]: every block of idx - 1 has passed its poll of it (they all signalled)
      if (idx >= 2) counters[idx - 2] = 0;
      if (idx == 0) { counters[chain - 1] = 0; counters[chain - 2] = 0; }
    }
  }
  float s = 0.f;
  for (int i = threadIdx.x; i < kN; i += blockDim.x) { float v = in[i]; s += v * v; }
  for (int r = 0; r < work; ++r) s = s * 0.999f + 1e-3f;
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
  __syncthreads();
  float t = 0.f;
  for (int w = 0; w < 8; ++w) t += red[w];
  if (threadIdx.x < 8) {
    const int j = blockIdx.x * 8 + threadIdx.x;
    if (j < kN) out[j] = 1.0f / (1.0f + t * 1e-6f) + 1e-7f * j;
  }
  if (mode == 2) {
    __syncthreads();
    if (threadIdx.x == 0) red_release(counters + idx, 1u);
  }
}

int main() {
  const int chain = 150;
  float *x0, *x1;
  unsigned* counters;
  CK(cudaMalloc(&x0, 4096 * 4));
  CK(cudaMalloc(&x1, 4096 * 4));
  CK(cudaMalloc(&counters, chain * 4));
  CK(cudaMemset(counters, 0, chain * 4));
  std::vector<float> h(4096, 0.5f);
  CK(cudaMemcpy(x0, h.data(), 4096 * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(x1, h.data(), 4096 * 4, cudaMemcpyHostToDevice));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  printf("%6s %6s %5s %12s\n", "blocks", "work", "mode", "us/kernel");
  for (int work : {0, 200}) {
    for (int blocks : {24, 72, 132, 264}) {
      for (int mode : {0, 1, 2}) {
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        for (int k = 0; k < chain; ++k) {
          cudaLaunchConfig_t cfg = {};
          cfg.gridDim = dim3(blocks);
          cfg.blockDim = dim3(256);
          cfg.stream = st;
          cudaLaunchAttribute attr[1];
          attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
          attr[0].val.programmaticStreamSerializationAllowed = 1;
          cfg.attrs = attr;
          cfg.numAttrs = (mode == 0 || k == 0) ? 0 : 1;
          const float* in = (k % 2) ? x1 : x0;
          float* out = (k % 2) ? x0 : x1;
          CK(cudaLaunchKernelEx(&cfg, step, in, out, counters, k, chain, mode, (unsigned)blocks, work));
        }
        CK(cudaStreamEndCapture(st, &g));
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
          ts.push_back(ms * 1000.f / 50 / chain);
        }
        std::sort(ts.begin(), ts.end());
        printf("%6d %6d %5d %12.3f\n", blocks, work, mode, ts[3]);
        CK(cudaGraphExecDestroy(ge));
        CK(cudaGraphDestroy(g));
      }
    }
  }
  std::vector<float> o(kN);
  CK(cudaMemcpy(o.data(), x0, kN * 4, cudaMemcpyDeviceToHost));
  printf("check %f\n", o[5]);
  return 0;
}
