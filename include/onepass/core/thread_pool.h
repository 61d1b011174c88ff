// A fixed pool of worker threads running parallel-for jobs. The caller's thread takes
// part in every job, so a pool of N threads has N-1 workers.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace onepass {

class ThreadPool {
 public:
  /// More threads than this many per hardware thread only add switching: a pool asked
  /// for more gets max_threads().
  static constexpr int kMaxThreadsPerHardwareThread = 4;
  /// std::thread::hardware_concurrency(), at least 1.
  static int hardware_threads();
  static int max_threads() { return kMaxThreadsPerHardwareThread * hardware_threads(); }

  /// `threads` <= 0 means one per hardware thread; at most max_threads().
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  /// Calls task(i) for every i in [0, count), spread over all threads; returns when all
  /// calls have returned. The first exception thrown by a task is rethrown here.
  /// Not re-entrant: a task must not call parallel_for on the same pool.
  void parallel_for(size_t count, const std::function<void(size_t)>& task);

 private:
  void worker_loop();
  void run_tasks();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(size_t)>* task_ = nullptr;
  size_t count_ = 0;
  std::atomic<size_t> next_{0};
  size_t active_ = 0;        // workers still inside the current job
  uint64_t generation_ = 0;  // bumped per job so workers see each job once
  bool stopping_ = false;
  std::exception_ptr error_;
  std::mutex job_mutex_;  // serialises callers
};

}  // namespace onepass
