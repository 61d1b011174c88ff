// CUDA test kernels: test_mix_u32 (support/synthetic.h) and test_fault.
#include <cstdint>
#include <utility>

#include "cuda/test_kernels.h"
#include "support/synthetic.h"

namespace onepass::testing {
namespace {

// Waits for the predecessor grid under programmatic dependent launch, as the library's
// kernels do.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__global__ void mix_kernel(const __grid_constant__ MixArgs a) {
  pdl_wait();
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= a.n) return;
  const uint32_t b = a.b_len > 0 ? a.b[i % a.b_len] : 0u;
  a.out[i] = mix_u32(a.a[i], b, a.salt);
}

// Writes through a null pointer: lets the tests check that a device fault becomes an
// onepass::Error instead of an abort.
__global__ void fault_kernel(const __grid_constant__ MixArgs a) {
  if (threadIdx.x == 0) *reinterpret_cast<volatile uint32_t*>(a.out) = 1u;
}

Kernel cuda_kernel(const char* name, const void* function, bool pdl) {
  Kernel k;
  k.name = name;
  k.args_size = sizeof(MixArgs);
  k.cuda = function;
  k.max_threads = 1024;
  k.pdl = pdl;
  return k;
}

}  // namespace

void add_cuda_test_kernels(Backend& backend) {
  backend.add_kernel(cuda_kernel("test_mix_u32", reinterpret_cast<const void*>(&mix_kernel), true));
  backend.add_kernel(
      cuda_kernel("test_fault", reinterpret_cast<const void*>(&fault_kernel), false));
}

}  // namespace onepass::testing
