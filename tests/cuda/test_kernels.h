// The CUDA test kernels (test_kernels.cu; built only with ONEPASS_CUDA).
#pragma once

#include "onepass/exec/backend.h"

namespace onepass::testing {

/// Adds to a CUDA backend test_mix_u32 (support/synthetic.h; PDL, one value per thread)
/// and test_fault (MixArgs; writes through `out`, a null pointer turns it into a device
/// fault).
void add_cuda_test_kernels(Backend& backend);

}  // namespace onepass::testing
