// cuBLAS, opened with dlopen the first time the CUDA backend multiplies through it. A
// program linked against a CUDA-enabled onepass then needs no cuBLAS (nor, with cudart
// linked statically, any CUDA library) until it uses the GPU: `--version` and `--backend
// cpu` run on machines without them, and do not map cuBLAS's ~200 MB.
#pragma once

#include <cublas_v2.h>

namespace onepass::cuda {

/// The cuBLAS entry points the backend calls, resolved from libcublas.so.<major> (the
/// major version of the headers it was compiled with).
struct CublasLibrary {
  decltype(&::cublasCreate_v2) create;
  decltype(&::cublasDestroy_v2) destroy;
  decltype(&::cublasSetStream_v2) set_stream;
  decltype(&::cublasSetWorkspace_v2) set_workspace;
  // The C entry point (the headers overload it in C++ with a cudaDataType compute type).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*,
                            cudaDataType, int, const void*, void*, cudaDataType, int,
                            cublasComputeType_t, cublasGemmAlgo_t);
  decltype(&::cublasGetStatusName) status_name;
  decltype(&::cublasGetStatusString) status_string;
};

/// The library, opened on the first call (thread-safe); throws Error("[cuda] ...") naming
/// the library and the loader's reason when it cannot be opened or lacks an entry point.
const CublasLibrary& cublas_library();

}  // namespace onepass::cuda
