#include "onepass/core/thread_pool.h"

#include <algorithm>
#include <utility>

#include "onepass/core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace onepass {
namespace {

// Tells the core this is a spin-wait (x86 PAUSE), so the other hyperthread runs freely.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

constexpr int kFieldBits = 24;
constexpr uint64_t kFieldMask = (uint64_t{1} << kFieldBits) - 1;

constexpr uint64_t pack(uint64_t generation, uint64_t count, uint64_t index) {
  return (generation << (2 * kFieldBits)) | (count << kFieldBits) | index;
}
constexpr uint64_t generation_of(uint64_t job) { return job >> (2 * kFieldBits); }
constexpr uint64_t count_of(uint64_t job) { return (job >> kFieldBits) & kFieldMask; }
constexpr uint64_t index_of(uint64_t job) { return job & kFieldMask; }

int pool_threads(int threads) {
  return threads > 0 ? std::min(threads, ThreadPool::max_threads()) : ThreadPool::hardware_threads();
}

std::chrono::nanoseconds default_spin(int threads) {
  if (pool_threads(threads) > ThreadPool::hardware_threads()) return std::chrono::nanoseconds(0);
  return ThreadPool::kDefaultSpin;
}

}  // namespace

int ThreadPool::hardware_threads() {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

ThreadPool::ThreadPool(int threads) : ThreadPool(threads, default_spin(threads)) {}

ThreadPool::ThreadPool(int threads, std::chrono::nanoseconds spin) : spin_(spin) {
  const int n = pool_threads(threads);
  workers_.reserve(static_cast<size_t>(n - 1));
  for (int i = 0; i + 1 < n; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stopping_.store(true, std::memory_order_seq_cst);
  { std::lock_guard<std::mutex> lock(mutex_); }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

// Claims and runs tasks of job `generation` until it has none left.
void ThreadPool::work(uint64_t generation) {
  for (;;) {
    uint64_t job = job_.load(std::memory_order_acquire);
    do {
      if (generation_of(job) != generation || index_of(job) >= count_of(job)) return;
    } while (!job_.compare_exchange_weak(job, job + 1, std::memory_order_acq_rel, std::memory_order_acquire));
    // The claimed task keeps the caller waiting, so task_ is this job's until done_ counts it.
    if (!failed_.load(std::memory_order_relaxed)) {
      try {
        (*task_)(static_cast<size_t>(index_of(job)));
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
        failed_.store(true, std::memory_order_relaxed);
      }
    }
    done_.fetch_add(1, std::memory_order_release);
  }
}

// Polls for a job newer than `seen` for spin_, then sleeps. False when stopping.
bool ThreadPool::wait_for_job(uint64_t& seen) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + spin_;
  for (uint32_t polls = 1;; ++polls) {
    const uint64_t g = generation_of(job_.load(std::memory_order_acquire));
    if (g != seen) {
      seen = g;
      return true;
    }
    if (stopping_.load(std::memory_order_relaxed)) return false;
    if (polls % 64 == 0 && Clock::now() >= deadline) break;  // a clock read costs ~20 ns
    cpu_relax();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  // seq_cst pairs with the caller's publish then load of sleepers_: either the caller sees
  // this sleeper and notifies under the mutex, or this check sees the new job.
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  wake_.wait(lock, [&] {
    return generation_of(job_.load(std::memory_order_seq_cst)) != seen || stopping_.load(std::memory_order_seq_cst);
  });
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
  const uint64_t g = generation_of(job_.load(std::memory_order_acquire));
  if (g == seen) return false;  // woken to stop
  seen = g;
  return true;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  while (wait_for_job(seen)) work(seen);
}

void ThreadPool::parallel_for(size_t count, TaskRef task) {
  if (count == 0) return;
  std::lock_guard<std::mutex> job_lock(job_mutex_);
  if (workers_.empty() || count == 1) {
    for (size_t i = 0; i < count; ++i) task(i);
    return;
  }
  check(count <= kFieldMask, "thread pool", "parallel_for over ", count, " tasks; at most ", kFieldMask);
  const uint64_t generation = (generation_of(job_.load(std::memory_order_relaxed)) + 1) & 0xffff;
  task_ = &task;
  failed_.store(false, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  job_.store(pack(generation, count, 0), std::memory_order_seq_cst);  // publishes the job
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(mutex_); }
    wake_.notify_all();
  }
  work(generation);
  // The last tasks run on other threads; after a while (a worker descheduled on a busy
  // machine) give the core away instead of polling.
  for (uint32_t polls = 0; done_.load(std::memory_order_acquire) != count; ++polls) {
    if (polls < 4096) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(error_mutex_);
    error = std::exchange(error_, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace onepass
