// Memory read bandwidth of this machine: T threads each sum their share of a buffer far
// larger than the caches, as a decode step streams the weights (in 2 MiB pages where the
// kernel gives them, as the CPU backend's large allocations are). The per-token floor of a
// CPU decode is (weight bytes + KV bytes read) / this bandwidth.
//
//   read_bandwidth [--mib N] [--threads T ...] [--reps R]
//     --mib      buffer size (default 512 MiB)
//     --threads  thread counts to measure (default: 1 and every hardware thread)
//     --reps     passes per thread count; the median is printed (default 9)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <sys/mman.h>

namespace {

// Sum of the 64-bit words in [begin, end): 8 independent sums, so the loop streams memory
// rather than waiting on one chain of adds.
uint64_t sum_words(const uint64_t* begin, const uint64_t* end) {
  uint64_t s[8] = {};
  const uint64_t* p = begin;
  for (; p + 8 <= end; p += 8) {
    for (int j = 0; j < 8; ++j) s[j] += p[j];
  }
  for (; p < end; ++p) s[0] += *p;
  return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = 512;
  int reps = 9;
  std::vector<int> thread_counts;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--mib" && i + 1 < argc) {
      mib = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--threads" && i + 1 < argc) {
      while (i + 1 < argc && argv[i + 1][0] != '-') thread_counts.push_back(std::max(1, std::atoi(argv[++i])));
    } else {
      std::fprintf(stderr, "usage: read_bandwidth [--mib N] [--threads T ...] [--reps R]\n");
      return 2;
    }
  }
  const int hw = std::max(1u, std::thread::hardware_concurrency());
  if (thread_counts.empty()) thread_counts = hw > 1 ? std::vector<int>{1, hw} : std::vector<int>{1};

  const size_t huge_page = size_t{2} << 20;
  const size_t bytes = (mib * (size_t{1} << 20) + huge_page - 1) / huge_page * huge_page;
  const size_t words = bytes / sizeof(uint64_t);
  std::unique_ptr<uint64_t, decltype(&std::free)> storage(
      static_cast<uint64_t*>(std::aligned_alloc(huge_page, bytes)), &std::free);
  if (!storage) {
    std::fprintf(stderr, "read_bandwidth: cannot allocate %zu MiB\n", mib);
    return 1;
  }
  (void)madvise(storage.get(), bytes, MADV_HUGEPAGE);
  uint64_t* const buffer = storage.get();
  for (size_t i = 0; i < words; ++i) buffer[i] = i * 0x9E3779B97F4A7C15ull;  // touch every page

  std::printf("read bandwidth, %zu MiB buffer, median of %d passes\n", mib, reps);
  volatile uint64_t sink = 0;
  for (int threads : thread_counts) {
    std::vector<double> rates;
    for (int rep = 0; rep < reps; ++rep) {
      std::vector<uint64_t> sums(static_cast<size_t>(threads));
      std::vector<std::thread> pool;
      const auto t0 = std::chrono::steady_clock::now();
      for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
          const size_t begin = words * static_cast<size_t>(t) / static_cast<size_t>(threads);
          const size_t end = words * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
          sums[static_cast<size_t>(t)] = sum_words(buffer + begin, buffer + end);
        });
      }
      for (std::thread& t : pool) t.join();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      for (uint64_t s : sums) sink = sink + s;
      rates.push_back(static_cast<double>(bytes) / seconds / 1e9);
    }
    std::printf("  %2d thread(s): %6.1f GB/s (passes %.1f .. %.1f)\n", threads, median(rates),
                *std::min_element(rates.begin(), rates.end()), *std::max_element(rates.begin(), rates.end()));
  }
  return 0;
}
