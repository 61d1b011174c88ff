#include "onepass/backends/factory.h"

#include "cpu/cpu_backend.h"
#include "onepass/core/error.h"
#include "onepass/ops/fusion_rules.h"

#if ONEPASS_HAVE_CUDA
#include "cuda/cuda_backend.h"
#endif

namespace onepass {

BackendChoice parse_backend_choice(std::string_view text) {
  if (text == "auto") return BackendChoice::automatic;
  if (text == "cpu") return BackendChoice::cpu;
  if (text == "cuda" || text == "gpu") return BackendChoice::cuda;
  fail("backend", "unknown backend '", text, "' (expected auto, cpu or cuda)");
}

std::shared_ptr<Backend> make_cpu_backend(const Options& options) {
  auto backend = std::make_shared<cpu::CpuBackend>(options);
  ops::register_fusion_rules(backend->fusion_rules());
  return backend;
}

bool cuda_compiled() { return ONEPASS_HAVE_CUDA != 0; }

int cuda_device_count() {
#if ONEPASS_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

std::shared_ptr<Backend> make_cuda_backend(int ordinal, const Options& options) {
#if ONEPASS_HAVE_CUDA
  auto backend = cuda::make_backend(ordinal, options);
  ops::register_fusion_rules(backend->fusion_rules());
  return backend;
#else
  (void)ordinal;
  (void)options;
  fail("backend", "this build of onepass has no CUDA backend (configure with -DONEPASS_CUDA=ON)");
#endif
}

std::shared_ptr<Backend> make_backend(BackendChoice choice, const Options& options) {
  switch (choice) {
    case BackendChoice::cpu:
      return make_cpu_backend(options);
    case BackendChoice::cuda:
      return make_cuda_backend(0, options);
    case BackendChoice::automatic:
      return cuda_device_count() > 0 ? make_cuda_backend(0, options) : make_cpu_backend(options);
  }
  return make_cpu_backend(options);
}

}  // namespace onepass
