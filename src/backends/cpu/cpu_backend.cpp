#include "cpu_backend.h"
#include "select.h"
#include "cpu_kernels.h"
#include "cpu_launch.h"
#include "kernels/quant_blocks.h"

#include <sys/sysinfo.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
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

// What a pool thread needs to run blocks of a dispatch: its entry point, launch shape and
// argument bytes (in the plan's argument pool). A stored plan keeps these instead of whole
// Dispatches, whose fixed-size argument array and annotations cost ~1 KB each.
struct Launch {
  CpuKernelFn fn;
  LaunchDims dims;
  const void* args;
};

// A run of consecutive blocks of one dispatch: the unit of work a pool thread takes.
struct Task {
  const Launch* launch;
  uint64_t begin;
  uint64_t end;
};

// Cuts a dispatch's blocks into the tasks pool threads take one at a time. One thread runs
// a dispatch in one call, and so does a small one (kCpuOneThreadBytes). A kernel that prepares its input in every call (the
// matrix-vector products: x rounded, or normalised by a fused norm) gets one even run of
// blocks per thread, so that work is done once per thread; its blocks all cost the same.
// Other kernels take shrinking runs (guided self-scheduling): each task is a
// 1 / (kCpuTasksPerThread * threads) share of the blocks not yet handed out, at least one
// block, so the first tasks are large (few claims) and the last ones small, and a thread
// that finishes early waits for at most one small task of the other threads (blocks of
// unequal cost, such as causal attention rows, stay balanced).
uint64_t touched_bytes(const Dispatch& d) {
  if (d.moved_bytes > 0) return d.moved_bytes;
  uint64_t bytes = 0;
  for (const MemRange& r : d.reads) bytes += r.size();
  for (const MemRange& r : d.writes) bytes += r.size();
  return bytes;
}

void cut_into_tasks(const Dispatch& d, const Launch* launch, int threads,
                    std::vector<Task>& tasks) {
  const uint64_t blocks = d.dims.grid.count();
  if (threads <= 1 || touched_bytes(d) < kCpuOneThreadBytes) {
    tasks.push_back({launch, 0, blocks});
    return;
  }
  if (prepares_input_per_call(d.kernel->cpu)) {
    const uint64_t runs = std::min<uint64_t>(blocks, static_cast<uint64_t>(threads));
    for (uint64_t i = 0; i < runs; ++i)
      tasks.push_back({launch, blocks * i / runs, blocks * (i + 1) / runs});
    return;
  }
  const uint64_t share = kCpuTasksPerThread * static_cast<uint64_t>(threads);
  for (uint64_t begin = 0; begin < blocks;) {
    const uint64_t size = std::max<uint64_t>(1, (blocks - begin) / share);
    tasks.push_back({launch, begin, begin + size});
    begin += size;
  }
}

// items[first, end) as levels: a level is a concurrent group (barrier mode) or the
// dispatches whose dependencies are all in earlier levels (dataflow mode). Each dispatch's
// grid is cut into tasks once, so replaying a stored schedule allocates nothing. The tasks
// point into the plan's own launches, so the items may be dropped once it is built (then
// `items` is cleared; checks and profiles need them).
struct Plan {
  struct Level {
    uint32_t items_begin, items_end;  // in `items`
    uint32_t tasks_begin, tasks_end;  // in `tasks`
  };
  std::vector<const Item*> items;  // level by level, program order within a level
  std::vector<std::pair<uint32_t, uint32_t>> item_tasks;  // each item's range in `tasks`
  std::vector<Task> tasks;  // level by level; within a level, later dispatches first
  std::vector<Level> levels;
  std::vector<Launch> launches;  // one per item, in `items` order
  std::vector<std::byte> args;   // the launches' argument structs, each at a multiple of 16

  Plan(const std::vector<Item>& all, size_t first, size_t end, bool dataflow, int threads) {
    if (first >= end) return;
    // Sized once: tasks and launches point into these.
    constexpr size_t kArgAlign = 16;
    static_assert(__STDCPP_DEFAULT_NEW_ALIGNMENT__ >= kArgAlign,
                  "args.data() must be 16-byte aligned");
    size_t arg_bytes = 0;
    for (size_t i = first; i < end; ++i)
      arg_bytes += (all[i].dispatch.args_size + kArgAlign - 1) / kArgAlign * kArgAlign;
    args.resize(arg_bytes);
    launches.reserve(end - first);
    std::vector<uint32_t> level(end - first, 0);
    uint32_t max_level = 0;
    for (size_t i = first; i < end; ++i) {
      uint32_t l = 0;
      if (dataflow) {
        for (uint32_t dep : all[i].deps) {
          check(dep >= first && dep < i, "cpu", "dispatch ", i, " depends on ", dep,
                " which is not before it in the same run");
          l = std::max(l, level[dep - first] + 1);
        }
      } else {
        l = all[i].group - all[first].group;
      }
      level[i - first] = l;
      max_level = std::max(max_level, l);
    }
    std::vector<std::vector<const Item*>> by_level(max_level + 1);
    for (size_t i = first; i < end; ++i) by_level[level[i - first]].push_back(&all[i]);
    item_tasks.resize(end - first);
    size_t arg_offset = 0;
    for (const auto& group : by_level) {
      Level lv{};
      lv.items_begin = static_cast<uint32_t>(items.size());
      lv.tasks_begin = static_cast<uint32_t>(tasks.size());
      items.insert(items.end(), group.begin(), group.end());
      lv.items_end = static_cast<uint32_t>(items.size());
      // Reverse program order, so that a dispatch reading another's output without a
      // barrier between them sees stale data.
      for (size_t g = group.size(); g-- > 0;) {
        const Dispatch& d = group[g]->dispatch;
        check(d.kernel != nullptr && d.kernel->cpu != nullptr, "cpu", "kernel ", d.name(),
              " has no CPU entry point");
        std::byte* arg = args.data() + arg_offset;
        if (d.args_size > 0) std::memcpy(arg, d.args_data(), d.args_size);
        arg_offset += (d.args_size + kArgAlign - 1) / kArgAlign * kArgAlign;
        const Launch* launch = &launches.emplace_back(Launch{d.kernel->cpu, d.dims, arg});
        const auto task_begin = static_cast<uint32_t>(tasks.size());
        cut_into_tasks(d, launch, threads, tasks);
        item_tasks[lv.items_begin + g] = {task_begin, static_cast<uint32_t>(tasks.size())};
      }
      lv.tasks_end = static_cast<uint32_t>(tasks.size());
      levels.push_back(lv);
    }
  }
};

thread_local uint64_t tls_level_id = 0;

// A new level id (cpu_level_id) for every level run, over all backends of the process.
uint64_t new_level_id() {
  static std::atomic<uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

// Runs a plan level by level on the backend's pool; within a level, the threads take its
// tasks one at a time from a shared counter.
class Scheduler {
 public:
  Scheduler(CpuBackend& backend, const std::string& label) : backend_(backend), label_(label) {}

  // Returns the elapsed ns.
  uint64_t run(const Plan& plan) {
    const uint64_t start = now_ns();
    if (plan.levels.empty()) return 0;
    const Options& o = backend_.options();
    const bool one_at_a_time = o.force_serial || o.cpu_schedule == CpuSchedule::sequential ||
                               o.check_annotations || o.profile_dispatches;
    const Task* tasks = plan.tasks.data();
    // One copy of every allocation per launch, brought up to date after each dispatch: a
    // dispatch's check reads all memory but copies only what changed.
    if (o.check_annotations) shadow_ = snapshot();
    for (uint32_t l = 0; l < plan.levels.size(); ++l) {
      const Plan::Level& lv = plan.levels[l];
      if (one_at_a_time) {
        for (uint32_t i = lv.items_begin; i < lv.items_end; ++i) {
          run_one(plan, i, l, start);
        }
      } else {
        const Task* level_tasks = tasks + lv.tasks_begin;
        const uint64_t level = new_level_id();
        backend_.pool().parallel_for(lv.tasks_end - lv.tasks_begin,
                                     [level_tasks, level](size_t i) { run_task(level_tasks[i], level); });
      }
    }
    return now_ns() - start;
  }

 private:
  static void run_task(const Task& t, uint64_t level) {
    if (t.begin >= t.end) return;
    tls_level_id = level;
    t.launch->fn(t.launch->args, t.launch->dims, t.begin, t.end);
    tls_level_id = 0;
  }

  void run_one(const Plan& plan, uint32_t index, uint32_t lane, uint64_t submission_start) {
    const Options& o = backend_.options();
    const auto [first_task, end_task] = plan.item_tasks[index];
    const Task* tasks = plan.tasks.data() + first_task;
    const uint64_t t0 = now_ns();
    const uint64_t level = new_level_id();
    backend_.pool().parallel_for(end_task - first_task, [tasks, level](size_t i) { run_task(tasks[i], level); });
    const uint64_t t1 = now_ns();
    if (!o.check_annotations && !o.profile_dispatches) return;
    check(!plan.items.empty(), "cpu",
          "this executable was instantiated with annotation checks and dispatch profiling off, so "
          "it keeps no dispatches to check or profile; record it again with the options set");
    const Dispatch& d = plan.items[index]->dispatch;
    if (o.check_annotations) verify(d, shadow_);
    if (o.profile_dispatches) {
      DispatchSample s = describe_dispatch(d, index);
      s.submission = label_;
      s.lane = lane;
      s.start_ns = t0 - submission_start;
      s.end_ns = t1 - submission_start;
      Profiler::global().record_dispatch(std::move(s));
    }
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

  // Every byte that differs from `shadow` must lie in one of d's declared writes; the
  // shadow then takes the new contents. Blocks are compared with memcmp first, so the bytes
  // of unchanged memory (the weights) are only read.
  static void verify(const Dispatch& d, std::vector<std::pair<uint64_t, std::vector<std::byte>>>& shadow) {
    constexpr size_t kBlock = 4096;
    for (auto& [address, copy] : shadow) {
      const auto* now = reinterpret_cast<const std::byte*>(address);
      if (std::memcmp(now, copy.data(), copy.size()) == 0) continue;
      for (size_t block = 0; block < copy.size(); block += kBlock) {
        const size_t n = std::min(kBlock, copy.size() - block);
        if (std::memcmp(now + block, copy.data() + block, n) == 0) continue;
        for (size_t i = block; i < block + n; ++i) {
          if (now[i] == copy[i]) continue;
          const uint64_t a = address + i;
          const bool declared = std::any_of(d.writes.begin(), d.writes.end(),
                                            [&](const MemRange& r) { return a >= r.begin && a < r.end; });
          check(declared, "annotation check", "dispatch ", d.name(), " '", d.label,
                "' wrote address 0x", std::hex, a, std::dec, " (byte ", i, " of an allocation of ",
                copy.size(), ") outside its declared writes");
        }
        std::memcpy(copy.data() + block, now + block, n);
      }
    }
  }

  CpuBackend& backend_;
  const std::string& label_;
  std::vector<std::pair<uint64_t, std::vector<std::byte>>> shadow_;  // ONEPASS_CHECK_ANNOTATIONS
};

class CpuExecutable final : public Executable {
 public:
  CpuExecutable(CpuBackend& backend, std::vector<Item> items, bool dataflow, std::string label)
      : backend_(backend),
        items_(std::move(items)),
        plan_(items_, 0, items_.size(), dataflow, backend.pool().size()),
        dispatches_(items_.size()),
        label_(std::move(label)) {
    const Options& o = backend.options();
    if (o.check_annotations || o.profile_dispatches) return;
    // Replays need only the plan's launches: keep the buffers the dispatches hold alive, one
    // reference each, and drop the dispatches.
    for (const Item& item : items_) {
      for (const std::shared_ptr<Buffer>& b : item.dispatch.retained) retained_.push_back(b);
    }
    std::sort(retained_.begin(), retained_.end());
    retained_.erase(std::unique(retained_.begin(), retained_.end()), retained_.end());
    retained_.shrink_to_fit();
    plan_.items.clear();
    plan_.items.shrink_to_fit();
    std::vector<Item>().swap(items_);
  }

  void launch() override { last_ns_ = Scheduler(backend_, label_).run(plan_); }
  void wait() override {}
  std::optional<uint64_t> gpu_time_ns() const override { return last_ns_; }
  void set_timing(bool) override {}  // the CPU always measures (steady_clock)
  size_t dispatch_count() const override { return dispatches_; }

 private:
  CpuBackend& backend_;
  std::vector<Item> items_;  // empty unless checks or profiles need the dispatches
  Plan plan_;                // its `items` point into items_
  size_t dispatches_;
  std::vector<std::shared_ptr<Buffer>> retained_;
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
    const Plan plan(items_, executed_, items_.size(), dataflow_, backend_.pool().size());
    elapsed_ns_ += Scheduler(backend_, label_).run(plan);
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

uint64_t cpu_level_id() { return tls_level_id; }

CpuBackend::CpuBackend(const Options& options)
    : Backend(options), pool_(options.cpu_threads), arena_(kAlignment) {
  info_.name = cat("cpu (", pool_.size(), " threads)");
  info_.kind = BackendKind::cpu;
  info_.threads = pool_.size();
  info_.isa = isa_name(active_isa());
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
  std::lock_guard<std::mutex> lock(allocations_mutex_);
  void* p = rounded >= HugePageArena::kMinBytes ? arena_.allocate(rounded) : std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) {
    fail("cpu", "out of memory: could not allocate ", bytes, " bytes (", free_memory(),
         " bytes free)");
  }
  allocations_[reinterpret_cast<uint64_t>(p)] = bytes;
  return p;
}

void CpuBackend::free_raw(void* data, size_t) noexcept {
  std::lock_guard<std::mutex> lock(allocations_mutex_);
  allocations_.erase(reinterpret_cast<uint64_t>(data));
  if (!arena_.release(data)) std::free(data);
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
