// CUDA kernels: moe_route, one warp per token: the router logits in shared memory, each slot
// chosen by a warp-wide (value, index) reduction over the experts not yet taken; and
// moe_combine, grid {n / 256, tokens}, one output value per thread summed over the slots.
#include <cmath>

#include "common.cuh"
#include "onepass/ops/moe.h"
#include "registration.h"

namespace onepass::cuda {
namespace {

// (value, index) a beats b: larger, or equal at a lower index; NaN below every number.
// Index -1 is "no candidate", beaten by anything.
__device__ __forceinline__ bool beats(float a, int ia, float b, int ib) {
  if (ib < 0) return ia >= 0;
  if (ia < 0) return false;
  if (isnan(a)) return isnan(b) && ia < ib;
  if (isnan(b)) return true;
  return a > b || (a == b && ia < ib);
}

__global__ void moe_route_kernel(const __grid_constant__ ops::MoeRouteArgs a) {
  __shared__ float logits[ops::kMoeMaxExperts];
  __shared__ bool taken[ops::kMoeMaxExperts];
  __shared__ int chosen[ops::kMoeMaxSlots];
  pdl_wait();
  const int64_t t = blockIdx.x;
  if (t >= a.tokens) return;
  const int lane = static_cast<int>(threadIdx.x);
  const int experts = static_cast<int>(a.n_experts);
  const float* l = a.logits + t * a.logits_stride;
  for (int e = lane; e < experts; e += 32) {
    logits[e] = l[e];
    taken[e] = false;
  }
  __syncwarp();
  for (int s = 0; s < a.slots; ++s) {
    float best_v = 0.0f;
    int best_i = -1;
    for (int e = lane; e < experts; e += 32) {
      if (!taken[e] && beats(logits[e], e, best_v, best_i)) {
        best_v = logits[e];
        best_i = e;
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float v = __shfl_xor_sync(0xffffffffu, best_v, offset);
      const int i = __shfl_xor_sync(0xffffffffu, best_i, offset);
      if (beats(v, i, best_v, best_i)) {
        best_v = v;
        best_i = i;
      }
    }
    if (lane == 0) {
      taken[best_i] = true;
      chosen[s] = best_i;
    }
    __syncwarp();
  }
  const float max = logits[chosen[0]];
  float sum = 0.0f;
  if (a.weighting == ops::MoeWeighting::softmax_all) {
    for (int e = lane; e < experts; e += 32) sum += expf(logits[e] - max);
  } else {
    for (int s = lane; s < a.slots; s += 32) sum += expf(logits[chosen[s]] - max);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  for (int s = lane; s < a.slots; s += 32) {
    a.ids[t * a.slots + s] = chosen[s];
    a.weights[t * a.slots + s] = expf(logits[chosen[s]] - max) / sum;
  }
}

__global__ void moe_combine_kernel(const __grid_constant__ ops::MoeCombineArgs a) {
  pdl_wait();
  const int64_t t = blockIdx.y;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= a.tokens || i >= a.n) return;
  const float* y = a.y + t * a.y_token_stride + i;
  const float* w = a.weights + t * a.slots;
  float sum = w[0] * y[0];
  for (int64_t s = 1; s < a.slots; ++s) sum += w[s] * y[s * a.n];
  a.out[t * a.out_stride + i] = sum;
}

}  // namespace

void register_moe_cuda_kernels(KernelRegistry& registry) {
  registry.add(make_cuda_kernel<ops::MoeRouteArgs>("moe_route", reinterpret_cast<const void*>(&moe_route_kernel), 32));
  registry.add(make_cuda_kernel<ops::MoeCombineArgs>("moe_combine", reinterpret_cast<const void*>(&moe_combine_kernel),
                                                     256));
}

}  // namespace onepass::cuda
