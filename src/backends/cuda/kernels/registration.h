// Host-side helper for registering CUDA kernels (included by the .cu files).
#pragma once

#include <string>

#include "onepass/exec/kernel.h"

namespace onepass::cuda {

/// A Kernel entry for a __global__ function taking `Args` by value.
template <typename Args>
Kernel make_cuda_kernel(std::string name, const void* function, uint32_t max_threads = 1024,
                        bool pdl = true, uint32_t max_shared_bytes = 0) {
  Kernel k;
  k.name = std::move(name);
  k.args_size = sizeof(Args);
  k.cuda = function;
  k.max_threads = max_threads;
  k.pdl = pdl;
  k.max_shared_bytes = max_shared_bytes;
  return k;
}

}  // namespace onepass::cuda
