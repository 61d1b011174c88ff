#include "cublas_library.h"

#include <dlfcn.h>

#include <string>

#include "onepass/core/error.h"

namespace onepass::cuda {
namespace {

#define ONEPASS_STRINGIFY2(x) #x
#define ONEPASS_STRINGIFY(x) ONEPASS_STRINGIFY2(x)
// The soname of the cuBLAS these headers describe; the unversioned name (a development
// symlink) only as a fallback.
constexpr const char* kSonames[] = {"libcublas.so." ONEPASS_STRINGIFY(CUBLAS_VER_MAJOR), "libcublas.so"};

template <typename Fn>
void resolve(void* handle, const char* soname, const char* symbol, Fn& out) {
  void* address = ::dlsym(handle, symbol);
  check(address != nullptr, "cuda", soname, " has no ", symbol, " (cuBLAS ",
        CUBLAS_VER_MAJOR, ".x expected)");
  out = reinterpret_cast<Fn>(address);
}

CublasLibrary open_library() {
  void* handle = nullptr;
  std::string reasons;
  const char* soname = kSonames[0];
  for (const char* name : kSonames) {
    handle = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      soname = name;
      break;
    }
    const char* reason = ::dlerror();
    reasons += cat(reasons.empty() ? "" : "; ", reason != nullptr ? reason : name);
  }
  check(handle != nullptr, "cuda", "cannot load cuBLAS (", reasons,
        "); the CUDA backend's matrix products need it (ONEPASS_CUBLAS=0 avoids it)");
  // The handle stays open for the life of the process: kernels and handles refer to it.
  CublasLibrary lib{};
  resolve(handle, soname, "cublasCreate_v2", lib.create);
  resolve(handle, soname, "cublasDestroy_v2", lib.destroy);
  resolve(handle, soname, "cublasSetStream_v2", lib.set_stream);
  resolve(handle, soname, "cublasSetWorkspace_v2", lib.set_workspace);
  resolve(handle, soname, "cublasGemmEx", lib.gemm_ex);
  resolve(handle, soname, "cublasGetStatusName", lib.status_name);
  resolve(handle, soname, "cublasGetStatusString", lib.status_string);
  return lib;
}

}  // namespace

const CublasLibrary& cublas_library() {
  static const CublasLibrary library = open_library();
  return library;
}

}  // namespace onepass::cuda
