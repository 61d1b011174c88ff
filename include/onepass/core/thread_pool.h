// A fixed pool of worker threads running parallel-for jobs. The caller's thread takes
// part in every job, so a pool of N threads has N-1 workers. Between jobs the workers
// spin for a bounded time before they sleep, so a chain of short dependent jobs (the
// dispatches of one CPU decode step) hands over in about a microsecond.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <concepts>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace onepass {

/// A non-owning reference to a callable taking a task index; the callable must outlive
/// the call it is passed to (parallel_for returns only when every task has returned).
class TaskRef {
 public:
  template <typename F>
    requires(!std::same_as<std::remove_cvref_t<F>, TaskRef> && std::invocable<F&, size_t>)
  TaskRef(F&& f)  // NOLINT(google-explicit-constructor): takes lambdas like std::function
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, size_t i) { (*static_cast<std::remove_reference_t<F>*>(object))(i); }) {}

  void operator()(size_t i) const { call_(object_, i); }

 private:
  void* object_;
  void (*call_)(void*, size_t);
};

class ThreadPool {
 public:
  /// More threads than this many per hardware thread only add switching: a pool asked
  /// for more gets max_threads().
  static constexpr int kMaxThreadsPerHardwareThread = 4;
  /// std::thread::hardware_concurrency(), at least 1.
  static int hardware_threads();
  static int max_threads() { return kMaxThreadsPerHardwareThread * hardware_threads(); }

  /// How long an idle worker polls for the next job before it sleeps: covers the host's
  /// work between two decode steps; chosen with `onepass bench --backend cpu --decode 64`.
  static constexpr std::chrono::microseconds kDefaultSpin{500};

  /// `threads` <= 0 means one per hardware thread; at most max_threads(). Workers spin
  /// `kDefaultSpin` between jobs, unless the pool has more threads than the machine
  /// (spinning would then take the time of the threads doing the work).
  explicit ThreadPool(int threads = 0);
  /// As above with an explicit spin time (0: sleep as soon as a job is done).
  ThreadPool(int threads, std::chrono::nanoseconds spin);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  /// Calls task(i) for every i in [0, count), spread over all threads (each thread takes
  /// the next index from a shared counter); returns when all calls have returned. The
  /// first exception thrown by a task is rethrown here (the tasks not started by then are
  /// skipped). Allocates nothing. count must be below 2^24.
  /// Not re-entrant: a task must not call parallel_for on the same pool.
  void parallel_for(size_t count, TaskRef task);

 private:
  void worker_loop();
  bool wait_for_job(uint64_t& seen);
  void work(uint64_t generation);

  std::vector<std::thread> workers_;
  std::chrono::nanoseconds spin_;
  // The current job as one word: generation (16 bits) | task count | next index (24 bits
  // each). A thread claims an index by compare-and-swap only while the generation is the
  // one it saw, so a worker that wakes late never touches a later job, and the caller
  // never waits for a worker that has not started: it waits for `done_` tasks only.
  // job_ (claimed by every thread), done_ (counted by every thread) and the fields only
  // read during a job sit on separate cache lines, so a claim does not invalidate the line
  // a finishing thread writes, nor the one every task reads.
  static constexpr size_t kCacheLine = 64;
  alignas(kCacheLine) std::atomic<uint64_t> job_{0};
  alignas(kCacheLine) std::atomic<size_t> done_{0};
  alignas(kCacheLine) const TaskRef* task_ = nullptr;  // written before job_ is published (release)
  std::atomic<bool> failed_{false};
  std::atomic<bool> stopping_{false};
  // Sleeping workers: the caller takes mutex_ and notifies only when there are some.
  std::atomic<int> sleepers_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::mutex error_mutex_;
  std::exception_ptr error_;
  std::mutex job_mutex_;  // serialises callers
};

}  // namespace onepass
