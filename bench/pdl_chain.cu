// pdl_chain: what one hand-off between dependent kernels costs on the GPU. A chain of 150
// small steps runs as one CUDA graph; each step's blocks read the whole 576-float x that the
// previous step wrote (the size of SmolLM2's hidden state), reduce its sum of squares and write
// 8 floats of the next x. The hand-off is one of seven modes:
//   0  plain stream order (each kernel starts after its predecessor has finished)
//   1  programmatic dependent launch (PDL): griddepcontrol.wait, as onepass's kernels do
//   2  PDL, then a per-kernel completion counter (release add, acquire poll) instead of the wait
//   3  one persistent kernel with a counter per step
//   4  one persistent kernel with one monotonic counter
//   5  one persistent kernel whose values carry their step's tag in the same 64-bit word
//   6  separate kernels launched at once by PDL that poll tagged values instead of waiting
// It prints µs per step for 24, 72, 132 and 264 blocks of 256 threads, with no extra work and
// with 200 dependent FMAs per thread. Needs sm_90 (Hopper).
//
// Build: with the project (ONEPASS_CUDA=ON, target `pdl_chain`), or alone:
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -std=c++17 bench/pdl_chain.cu -o pdl_chain
// Run: build/bin/pdl_chain
#include "chain_timing.cuh"

constexpr int kN = kChainN;

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
  chain_reduce_and_store(s, red, out, 1e-6f);
  if (mode == 2) {
    __syncthreads();
    if (threadIdx.x == 0) red_release(counters + idx, 1u);
  }
}


// (3) one persistent kernel running every phase: a block signals the phase's counter with a
// release add and polls it (acquire) until every block has signalled. (4) the same with one
// monotonic counter (phase p waits for blocks * p arrivals), (5) as 4 but a whole warp polls.
__global__ void __launch_bounds__(256) persistent(float* x0, float* x1, unsigned* counters, int chain,
                                                  unsigned blocks, int work, int mode) {
  __shared__ float red[8];
  for (int idx = 0; idx < chain; ++idx) {
    const float* in = (idx % 2) ? x1 : x0;
    float* out = (idx % 2) ? x0 : x1;
    if (idx > 0) {
      if (mode == 3) {
        if (threadIdx.x == 0) while (ld_acquire(counters + idx - 1) < blocks) {}
      } else {
        if (threadIdx.x == 0) while (ld_acquire(counters) < blocks * (unsigned)idx) {}
      }
      __syncthreads();
    }
    float s = 0.f;
    for (int i = threadIdx.x; i < kN; i += blockDim.x) { float v = __ldcg(in + i); s += v * v; }
    for (int r = 0; r < work; ++r) s = s * 0.999f + 1e-3f;
    chain_reduce_and_store(s, red, out, 1e-6f);
    __syncthreads();
    if (threadIdx.x == 0) red_release(mode == 3 ? counters + idx : counters, 1u);
  }
}


// (5) one persistent kernel, no counters: every value travels with its phase's tag in one
// 64-bit word (value bits | tag << 32); a reader re-reads a word until its tag is the phase's.
__device__ __forceinline__ unsigned long long ld_relaxed64(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed64(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
// One step of modes 5 and 6: waits until every input word carries tag `want` (step 0 takes
// its input as it is), reduces, and writes 8 values tagged want + 1 (a grid-stride loop, so
// that every word of the next input is written whatever the grid). Ends with a barrier:
// `red` is rewritten by the next step of a persistent kernel.
__device__ __forceinline__ void tagged_step_body(const unsigned long long* in, unsigned long long* out,
                                                 unsigned want, int idx, int work, float* red) {
  constexpr int kPer = (kN + 255) / 256;
  unsigned long long w[kPer];
  for (;;) {
    bool ok = true;
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int i = threadIdx.x + u * 256;
      w[u] = i < kN ? ld_relaxed64(in + i) : 0ull;
      if (i < kN && idx > 0 && (unsigned)(w[u] >> 32) != want) ok = false;
    }
    if (ok) break;
  }
  float s = 0.f;
#pragma unroll
  for (int u = 0; u < kPer; ++u) { const float v = __uint_as_float((unsigned)w[u]); s += v * v; }
  for (int r = 0; r < work; ++r) s = s * 0.999f + 1e-3f;
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
  __syncthreads();
  float t = 0.f;
  for (int k = 0; k < 8; ++k) t += red[k];
  __syncthreads();
  if (threadIdx.x < 8)
    for (int j = blockIdx.x * 8 + threadIdx.x; j < kN; j += gridDim.x * 8) {
      const float v = 1.0f / (1.0f + t * 1e-6f) + 1e-7f * j;
      st_relaxed64(out + j, (unsigned long long)__float_as_uint(v) | ((unsigned long long)(want + 1) << 32));
    }
}

__global__ void __launch_bounds__(256) tagged(unsigned long long* x0, unsigned long long* x1,
                                              const unsigned* epoch_p, int chain, int work) {
  __shared__ float red[8];
  const unsigned epoch = *epoch_p;
  for (int idx = 0; idx < chain; ++idx) {
    const unsigned long long* in = (idx % 2) ? x1 : x0;
    unsigned long long* out = (idx % 2) ? x0 : x1;
    tagged_step_body(in, out, epoch * (unsigned)chain + (unsigned)idx, idx, work, red);
  }
}

// (6) separate kernels again, each launched early by PDL (it lets its successor launch as
// soon as it starts) but never waiting on the grid: it polls its tagged input instead
// (as in 5), so a hand-off costs a store's and a load's trip through L2 rather than the
// predecessor's completion and memory flush. Kernel 0 waits on the grid (for the epoch).
__global__ void __launch_bounds__(256) tagged_step(const unsigned long long* in, unsigned long long* out,
                                                   const unsigned* epoch_p, int idx, int chain, int work) {
  __shared__ float red[8];
  if (idx == 0) asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  tagged_step_body(in, out, *epoch_p * (unsigned)chain + (unsigned)idx, idx, work, red);
}

__global__ void bump(unsigned* e) { if (threadIdx.x == 0) *e += 1; }

__global__ void reset_counters(unsigned* c, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) c[i] = 0;
}

int main() {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const int chain = 150;
  float *x0, *x1;
  unsigned* counters;
  CK(cudaMalloc(&x0, 4096 * 4));
  CK(cudaMalloc(&x1, 4096 * 4));
  CK(cudaMalloc(&counters, (chain + 1) * 4));
  unsigned long long *tx0, *tx1;
  CK(cudaMalloc(&tx0, 4096 * 8));
  CK(cudaMalloc(&tx1, 4096 * 8));
  CK(cudaMemset(tx0, 0, 4096 * 8));
  CK(cudaMemset(tx1, 0, 4096 * 8));
  CK(cudaMemset(counters, 0, (chain + 1) * 4));
  std::vector<float> h(4096, 0.5f);
  CK(cudaMemcpy(x0, h.data(), 4096 * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(x1, h.data(), 4096 * 4, cudaMemcpyHostToDevice));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  printf("%6s %6s %5s %12s\n", "blocks", "work", "mode", "us/kernel");
  for (int work : {0, 200}) {
    for (int blocks : {24, 72, 132, 264}) {
      for (int mode : {0, 1, 2, 3, 4, 5, 6}) {
        cudaGraph_t g;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        if (mode == 5) {
          bump<<<1, 32, 0, st>>>(counters + chain);
          tagged<<<blocks, 256, 0, st>>>(tx0, tx1, counters + chain, chain, work);
        } else if (mode >= 3) {
          reset_counters<<<1, 256, 0, st>>>(counters, chain);
          persistent<<<blocks, 256, 0, st>>>(x0, x1, counters, chain, (unsigned)blocks, work, mode);
        }
        if (mode == 6) bump<<<1, 32, 0, st>>>(counters + chain);
        for (int k = 0; mode == 6 && k < chain; ++k) {
          ChainLaunch launch(blocks, st, true);
          const unsigned long long* in = (k % 2) ? tx1 : tx0;
          unsigned long long* out = (k % 2) ? tx0 : tx1;
          CK(cudaLaunchKernelEx(&launch.cfg, tagged_step, in, out, (const unsigned*)(counters + chain), k, chain, work));
        }
        for (int k = 0; mode < 3 && k < chain; ++k) {
          ChainLaunch launch(blocks, st, mode != 0 && k != 0);
          const float* in = (k % 2) ? x1 : x0;
          float* out = (k % 2) ? x0 : x1;
          CK(cudaLaunchKernelEx(&launch.cfg, step, in, out, counters, k, chain, mode, (unsigned)blocks, work));
        }
        CK(cudaStreamEndCapture(st, &g));
        const float per_step = time_graph_per_step(g, st, chain);
        printf("%6d %6d %5d %12.3f\n", blocks, work, mode, per_step);
      }
    }
  }
  std::vector<float> o(kN);
  CK(cudaMemcpy(o.data(), x0, kN * 4, cudaMemcpyDeviceToHost));
  printf("check %f\n", o[5]);
  return 0;
}
