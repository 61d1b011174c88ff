// The CPU backend: host memory, kernels as C++ functions, a thread pool that runs the
// dispatches between two barriers concurrently (see CpuSchedule).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "huge_page_arena.h"
#include "onepass/core/thread_pool.h"
#include "onepass/exec/backend.h"

namespace onepass::cpu {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const Options& options);
  ~CpuBackend() override;

  const DeviceInfo& info() const override { return info_; }
  const KernelRegistry& registry() const override { return registry_; }
  KernelRegistry& mutable_registry() { return registry_; }
  void add_kernel(Kernel kernel) override { registry_.add(std::move(kernel)); }
  std::unique_ptr<Submission> new_submission(SubmitMode mode, std::string_view label) override;

  void copy_from_host(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void copy_on_device(void* dst, const void* src, size_t bytes) override;
  void fill(void* dst, uint8_t byte, size_t bytes) override;
  void synchronize() override {}
  size_t free_memory() const override;

  ThreadPool& pool() { return pool_; }
  /// Snapshot of every live allocation: (address, bytes). For the annotation checker.
  std::map<uint64_t, size_t> allocations() const;

 protected:
  void* allocate_raw(size_t bytes) override;
  void free_raw(void* data, size_t bytes) noexcept override;

 private:
  DeviceInfo info_;
  KernelRegistry registry_;
  ThreadPool pool_;
  mutable std::mutex allocations_mutex_;  // guards allocations_ and arena_
  std::map<uint64_t, size_t> allocations_;
  HugePageArena arena_;
};

/// Registers every CPU kernel (the list lives in cpu_kernels.cpp).
void register_cpu_kernels(KernelRegistry& registry);

}  // namespace onepass::cpu
