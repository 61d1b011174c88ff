// Creating backends: the entry point of the runtime.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "onepass/core/options.h"
#include "onepass/exec/backend.h"

namespace onepass {

enum class BackendChoice { automatic, cpu, cuda };

/// "auto", "cpu" or "cuda"; throws Error otherwise.
BackendChoice parse_backend_choice(std::string_view text);

/// The CPU backend with all CPU kernels and the op library's fusion rules.
std::shared_ptr<Backend> make_cpu_backend(const Options& options = Options::defaults());
/// The CUDA backend on device `ordinal`; throws Error when onepass was built without
/// CUDA or no such device exists.
std::shared_ptr<Backend> make_cuda_backend(int ordinal = 0,
                                           const Options& options = Options::defaults());
/// automatic: CUDA when a GPU is present, else the CPU.
std::shared_ptr<Backend> make_backend(BackendChoice choice = BackendChoice::automatic,
                                      const Options& options = Options::defaults());

/// Whether this build has the CUDA backend compiled in.
bool cuda_compiled();
/// Number of usable CUDA devices (0 without CUDA or without a GPU); never throws.
int cuda_device_count();

}  // namespace onepass
