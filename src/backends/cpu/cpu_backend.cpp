#include "cpu_backend.h"
#include "select.h"

#include <sys/sysinfo.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "onepass/core/error.h"
#include "onepass/exec/profile.h"

namespace onepass::cpu {
namespace {

constexpr size_t kAlignment = 256;  // matches BufferPool's default and CUDA's

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// One appended dispatch and what it waits for.
struct Item {
  Dispatch dispatch;
  std::vector<uint32_t> deps;  // dataflow mode
  uint32_t group = 0;          // barrier mode: index of its concurrent group
};

// Runs a list of items level by level: a level is a concurrent group (barrier mode) or
// the set of dispatches whose dependencies are all in earlier levels (dataflow mode).
class Scheduler {
 public:
  Scheduler(CpuBackend& backend, std::string label) : backend_(backend), label_(std::move(label)) {}

  // Runs items[first, end). Returns the elapsed ns.
  uint64_t run(const std::vector<Item>& items, size_t first, size_t end, bool dataflow) {
    const uint64_t start = now_ns();
    if (first >= end) return 0;
    const Options& o = backend_.options();
    std::vector<uint32_t> level(end - first, 0);
    uint32_t max_level = 0;
    for (size_t i = first; i < end; ++i) {
      uint32_t l = 0;
      if (dataflow) {
        for (uint32_t dep : items[i].deps) {
          check(dep >= first && dep < i, "cpu", "dispatch ", i, " depends on ", dep,
                " which is not before it in the same run");
          l = std::max(l, level[dep - first] + 1);
        }
      } else {
        l = items[i].group - items[first].group;
      }
      level[i - first] = l;
      max_level = std::max(max_level, l);
    }
    std::vector<std::vector<const Item*>> levels(max_level + 1);
    for (size_t i = first; i < end; ++i) levels[level[i - first]].push_back(&items[i]);
    const bool one_at_a_time = o.force_serial || o.cpu_schedule == CpuSchedule::sequential ||
                               o.check_annotations || o.profile_dispatches;
    uint32_t index = 0;
    for (uint32_t l = 0; l <= max_level; ++l) {
      auto& group = levels[l];
      if (one_at_a_time || group.size() == 1) {
        for (const Item* item : group) run_one(item->dispatch, index++, l, start);
      } else {
        run_concurrently(group);
        index += static_cast<uint32_t>(group.size());
      }
    }
    return now_ns() - start;
  }

 private:
  static void check_dispatch(const Dispatch& d) {
    check(d.kernel != nullptr && d.kernel->cpu != nullptr, "cpu", "kernel ", d.name(),
          " has no CPU entry point");
  }

  size_t chunks_for(uint64_t blocks) const {
    const auto threads = static_cast<uint64_t>(backend_.pool().size());
    return static_cast<size_t>(std::min<uint64_t>(blocks, threads * 4));
  }

  static void run_chunk(const Dispatch& d, uint64_t blocks, size_t chunks, size_t c) {
    const uint64_t begin = blocks * c / chunks;
    const uint64_t stop = blocks * (c + 1) / chunks;
    if (begin < stop) d.kernel->cpu(d.args_data(), d.dims, begin, stop);
  }

  void run_one(const Dispatch& d, uint32_t index, uint32_t lane, uint64_t submission_start) {
    check_dispatch(d);
    const Options& o = backend_.options();
    std::vector<std::pair<uint64_t, std::vector<std::byte>>> before;
    if (o.check_annotations) before = snapshot();
    const uint64_t blocks = d.dims.grid.count();
    const size_t chunks = chunks_for(blocks);
    const uint64_t t0 = now_ns();
    backend_.pool().parallel_for(chunks, [&](size_t c) { run_chunk(d, blocks, chunks, c); });
    const uint64_t t1 = now_ns();
    if (o.check_annotations) verify(d, before);
    if (o.profile_dispatches) {
      DispatchSample s = describe_dispatch(d, index);
      s.submission = label_;
      s.lane = lane;
      s.start_ns = t0 - submission_start;
      s.end_ns = t1 - submission_start;
      Profiler::global().record_dispatch(std::move(s));
    }
  }

  // All dispatches of a group at once, their chunks queued in reverse program order so
  // that a dispatch reading another's output without a barrier between them sees stale
  // data.
  void run_concurrently(const std::vector<const Item*>& group) {
    struct Task {
      const Dispatch* d;
      uint64_t blocks;
      size_t chunks;
      size_t chunk;
    };
    std::vector<Task> tasks;
    for (auto it = group.rbegin(); it != group.rend(); ++it) {
      const Dispatch& d = (*it)->dispatch;
      check_dispatch(d);
      const uint64_t blocks = d.dims.grid.count();
      const size_t chunks = chunks_for(blocks);
      for (size_t c = 0; c < chunks; ++c) tasks.push_back({&d, blocks, chunks, c});
    }
    backend_.pool().parallel_for(tasks.size(), [&](size_t i) {
      const Task& t = tasks[i];
      run_chunk(*t.d, t.blocks, t.chunks, t.chunk);
    });
  }

  std::vector<std::pair<uint64_t, std::vector<std::byte>>> snapshot() const {
    std::vector<std::pair<uint64_t, std::vector<std::byte>>> out;
    for (const auto& [address, bytes] : backend_.allocations()) {
      std::vector<std::byte> copy(bytes);
      std::memcpy(copy.data(), reinterpret_cast<const void*>(address), bytes);
      out.emplace_back(address, std::move(copy));
    }
    return out;
  }

  static void verify(const Dispatch& d,
                     const std::vector<std::pair<uint64_t, std::vector<std::byte>>>& before) {
    for (const auto& [address, copy] : before) {
      const auto* now = reinterpret_cast<const std::byte*>(address);
      for (size_t i = 0; i < copy.size(); ++i) {
        if (now[i] == copy[i]) continue;
        const uint64_t a = address + i;
        const bool declared = std::any_of(d.writes.begin(), d.writes.end(),
                                          [&](const MemRange& r) { return a >= r.begin && a < r.end; });
        check(declared, "annotation check", "dispatch ", d.name(), " '", d.label,
              "' wrote address 0x", std::hex, a, std::dec, " (byte ", i, " of an allocation of ",
              copy.size(), ") outside its declared writes");
      }
    }
  }

  CpuBackend& backend_;
  std::string label_;
};

class CpuExecutable final : public Executable {
 public:
  CpuExecutable(CpuBackend& backend, std::vector<Item> items, bool dataflow, std::string label)
      : backend_(backend), items_(std::move(items)), dataflow_(dataflow), label_(std::move(label)) {}

  void launch() override {
    Scheduler scheduler(backend_, label_);
    last_ns_ = scheduler.run(items_, 0, items_.size(), dataflow_);
  }
  void wait() override {}
  std::optional<uint64_t> gpu_time_ns() const override { return last_ns_; }
  void set_timing(bool) override {}  // the CPU always measures (steady_clock)
  size_t dispatch_count() const override { return items_.size(); }

 private:
  CpuBackend& backend_;
  std::vector<Item> items_;
  bool dataflow_;
  std::string label_;
  std::optional<uint64_t> last_ns_;
};

class CpuSubmission final : public Submission {
 public:
  CpuSubmission(CpuBackend& backend, SubmitMode mode, std::string label)
      : backend_(backend), mode_(mode), label_(std::move(label)) {}

  void dispatch(const Dispatch& d) override {
    check(!dataflow_, "cpu", "dispatch() after dispatch_after() in one submission");
    check(!committed_, "cpu", "dispatch after commit");
    items_.push_back({d, {}, group_});
    barrier_mode_ = true;
  }

  void dispatch_after(const Dispatch& d, std::span<const uint32_t> deps) override {
    check(!barrier_mode_, "cpu", "dispatch_after() after dispatch() in one submission");
    check(!committed_, "cpu", "dispatch after commit");
    items_.push_back({d, std::vector<uint32_t>(deps.begin(), deps.end()), 0});
    dataflow_ = true;
  }

  void barrier() override {
    check(!dataflow_, "cpu", "barrier() in a dataflow submission");
    ++group_;
    // Direct mode runs each group as soon as it is closed, like a GPU would start it.
    if (mode_ == SubmitMode::immediate) run_pending();
  }

  void commit() override {
    check(!committed_, "cpu", "submission committed twice");
    committed_ = true;
    run_pending();
  }

  void wait() override {}
  std::optional<uint64_t> gpu_time_ns() const override { return elapsed_ns_; }
  size_t dispatch_count() const override { return items_.size(); }
  void set_label(std::string_view label) override { label_ = std::string(label); }

  std::unique_ptr<Executable> instantiate() override {
    check(executed_ == 0, "cpu", "instantiate() after part of the submission already ran");
    committed_ = true;
    return std::make_unique<CpuExecutable>(backend_, std::move(items_), dataflow_, label_);
  }

 private:
  void run_pending() {
    Scheduler scheduler(backend_, label_);
    elapsed_ns_ += scheduler.run(items_, executed_, items_.size(), dataflow_);
    executed_ = items_.size();
  }

  CpuBackend& backend_;
  SubmitMode mode_;
  std::string label_;
  std::vector<Item> items_;
  uint32_t group_ = 0;
  size_t executed_ = 0;
  bool barrier_mode_ = false;
  bool dataflow_ = false;
  bool committed_ = false;
  uint64_t elapsed_ns_ = 0;
};

}  // namespace

CpuBackend::CpuBackend(const Options& options) : Backend(options), pool_(options.cpu_threads) {
  info_.name = cat("cpu (", pool_.size(), " threads)");
  info_.kind = BackendKind::cpu;
  info_.threads = pool_.size();
  struct sysinfo si {};
  if (sysinfo(&si) == 0) info_.total_memory = static_cast<size_t>(si.totalram) * si.mem_unit;
  register_cpu_kernels(registry_);
  register_cpu_selectors(selectors());
}

CpuBackend::~CpuBackend() = default;

std::unique_ptr<Submission> CpuBackend::new_submission(SubmitMode mode, std::string_view label) {
  return std::make_unique<CpuSubmission>(*this, mode, std::string(label));
}

void* CpuBackend::allocate_raw(size_t bytes) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) {
    fail("cpu", "out of memory: could not allocate ", bytes, " bytes (", free_memory(),
         " bytes free)");
  }
  std::lock_guard<std::mutex> lock(allocations_mutex_);
  allocations_[reinterpret_cast<uint64_t>(p)] = bytes;
  return p;
}

void CpuBackend::free_raw(void* data, size_t) noexcept {
  {
    std::lock_guard<std::mutex> lock(allocations_mutex_);
    allocations_.erase(reinterpret_cast<uint64_t>(data));
  }
  std::free(data);
}

std::map<uint64_t, size_t> CpuBackend::allocations() const {
  std::lock_guard<std::mutex> lock(allocations_mutex_);
  return allocations_;
}

void CpuBackend::copy_from_host(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void CpuBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void CpuBackend::copy_on_device(void* dst, const void* src, size_t bytes) {
  std::memmove(dst, src, bytes);
}
void CpuBackend::fill(void* dst, uint8_t byte, size_t bytes) { std::memset(dst, byte, bytes); }

size_t CpuBackend::free_memory() const {
  struct sysinfo si {};
  if (sysinfo(&si) != 0) return 0;
  return static_cast<size_t>(si.freeram) * si.mem_unit;
}

}  // namespace onepass::cpu
