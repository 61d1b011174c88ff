// icache_chain: what a kernel's code size costs in a chain of dependent PDL kernels, where
// every kernel runs its code once per launch (as a decode step does). A chain of 150 kernels of
// 132 blocks x 256 threads runs as one CUDA graph; each kernel waits on its predecessor
// (griddepcontrol.wait), reads the 576-float x, runs N FMAs in 8 independent chains, reduces
// and writes 8 floats of the next x. The FMAs are either straight-line code (N instructions,
// each fetched once per launch and SM) or a loop over a 64-FMA body (the same work in ~1 KB of
// code), and the chain cycles over 1, 2, 3 or 5 distinct kernel binaries (a SmolLM2 layer runs
// five). It prints µs per step for each code size and number of binaries. Needs sm_90.
//
// Build: with the project (ONEPASS_CUDA=ON, target `icache_chain`), or alone:
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -std=c++17 bench/icache_chain.cu -o icache_chain
// Run: build/bin/icache_chain
#include "chain_timing.cuh"

constexpr int kN = kChainN;

// kStraight: N FMAs unrolled; otherwise a loop of N / 64 passes over 64 unrolled FMAs.
// Salt makes each instantiation's code distinct (different constants).
template <int N, bool kStraight, int Salt>
__global__ void __launch_bounds__(256) step(const float* in, float* out) {
  __shared__ float red[8];
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  float s = 0.f;
  for (int i = threadIdx.x; i < kN; i += blockDim.x) {
    const float v = in[i];
    s += v * v;
  }
  float c[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) c[k] = s + static_cast<float>(k + Salt);
  const float m = 0.999f - 1e-6f * s;
  if constexpr (kStraight) {
#pragma unroll
    for (int r = 0; r < N / 8; ++r) {
#pragma unroll
      for (int k = 0; k < 8; ++k) c[k] = fmaf(c[k], m, 1e-3f * static_cast<float>((r * 8 + k + Salt) % 97));
    }
  } else {
#pragma unroll 1
    for (int p = 0; p < N / 64; ++p) {
#pragma unroll
      for (int r = 0; r < 8; ++r) {
#pragma unroll
        for (int k = 0; k < 8; ++k) c[k] = fmaf(c[k], m, 1e-3f * static_cast<float>((r * 8 + k + Salt) % 97));
      }
    }
  }
  float t0 = 0.f;
#pragma unroll
  for (int k = 0; k < 8; ++k) t0 += c[k];
  chain_reduce_and_store(t0, red, out, 1e-9f);
}

using StepFn = void (*)(const float*, float*);

template <int N, bool kStraight>
std::vector<StepFn> kernels() {
  return {step<N, kStraight, 0>, step<N, kStraight, 1>, step<N, kStraight, 2>, step<N, kStraight, 3>,
          step<N, kStraight, 4>};
}

float run(const std::vector<StepFn>& fns, int distinct, int blocks, float* x0, float* x1, cudaStream_t st) {
  const int chain = 150;
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  for (int k = 0; k < chain; ++k) {
    ChainLaunch launch(blocks, st, k > 0);
    const float* in = (k % 2) ? x1 : x0;
    float* out = (k % 2) ? x0 : x1;
    CK(cudaLaunchKernelEx(&launch.cfg, fns[static_cast<size_t>(k % distinct)], in, out));
  }
  CK(cudaStreamEndCapture(st, &g));
  return time_graph_per_step(g, st, chain);
}

int main() {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  float *x0, *x1;
  CK(cudaMalloc(&x0, 4096 * 4));
  CK(cudaMalloc(&x1, 4096 * 4));
  std::vector<float> h(4096, 0.5f);
  CK(cudaMemcpy(x0, h.data(), 4096 * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(x1, h.data(), 4096 * 4, cudaMemcpyHostToDevice));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  struct Variant {
    const char* name;
    int fmas;
    bool straight;
    std::vector<StepFn> fns;
  };
  std::vector<Variant> variants = {
      {"loop", 0, false, kernels<0, false>()},          {"loop", 1024, false, kernels<1024, false>()},
      {"straight", 1024, true, kernels<1024, true>()},  {"straight", 1536, true, kernels<1536, true>()},
      {"loop", 2048, false, kernels<2048, false>()},    {"straight", 2048, true, kernels<2048, true>()},
      {"straight", 2560, true, kernels<2560, true>()},  {"straight", 3072, true, kernels<3072, true>()},
      {"loop", 4096, false, kernels<4096, false>()},    {"straight", 3584, true, kernels<3584, true>()},
      {"straight", 4096, true, kernels<4096, true>()},
  };
  printf("%-9s %6s | us per step, 132 blocks, cycling over 1 / 2 / 3 / 5 binaries\n", "code", "fmas");
  for (const Variant& v : variants) {
    printf("%-9s %6d |", v.name, v.fmas);
    for (int distinct : {1, 2, 3, 5}) printf(" %8.3f", run(v.fns, distinct, 132, x0, x1, st));
    printf("\n");
  }
  std::vector<float> o(kN);
  CK(cudaMemcpy(o.data(), x0, kN * 4, cudaMemcpyDeviceToHost));
  printf("check %f\n", o[5]);
  return 0;
}
