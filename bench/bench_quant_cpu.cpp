// Matrix-vector throughput of the CPU kernels for the quantized weight formats, in GB/s of
// weights read, next to the machine's memcpy bandwidth.
//
//   bench_quant_cpu [--threads N] [--quick] [--only FORMAT[,FORMAT...]] [--shape NxK] [--rows M]
//
// For each format and shape N x K:
//   kernel  one thread calling the kernel directly on one cache-resident weight matrix
//           (compute speed of the inner loop)
//   hot     the op replayed through the thread pool on one weight matrix (stays in cache)
//   cold    the op on enough copies of the matrix (>= 512 MiB) that every replay reads the
//           weights from DRAM, as a decode step over a whole model does
// With --rows M (M > 1), the matrix-matrix product of M rows of x instead, in GMAC/s:
//   kernel  one thread calling the kernel directly on all blocks (compute speed per core)
//   hot     the op replayed through the thread pool on one weight matrix
// Medians over repetitions after warm-up; inputs are random, never zeros.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "onepass/ops/ops.h"
#include "onepass/backends/factory.h"
#include "onepass/exec/captured_graph.h"
#include "onepass/exec/graph_session.h"
#include "onepass/ops/affine.h"
#include "onepass/ops/matmul.h"
#include "onepass/ops/quant.h"

namespace {

using namespace onepass;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Median seconds of fn() over `reps` runs after `warmup` runs (at least min_seconds in all).
double median_seconds(const std::function<void()>& fn, int warmup, int reps,
                      double min_seconds = 0.2) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> times;
  const auto start = Clock::now();
  while (static_cast<int>(times.size()) < reps ||
         (seconds_since(start) < min_seconds && times.size() < 2000)) {
    const auto t0 = Clock::now();
    fn();
    times.push_back(seconds_since(t0));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Bytes read + written per second by memcpy of `bytes`, split over `threads` threads.
double memcpy_bandwidth(size_t bytes, int threads) {
  std::vector<char> src(bytes), dst(bytes);
  std::mt19937_64 rng(1);
  for (size_t i = 0; i < bytes; i += 4096) src[i] = static_cast<char>(rng());
  std::memset(dst.data(), 1, bytes);
  auto copy = [&] {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      const size_t begin = bytes * static_cast<size_t>(t) / static_cast<size_t>(threads);
      const size_t end = bytes * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
      pool.emplace_back(
          [&, begin, end] { std::memcpy(dst.data() + begin, src.data() + begin, end - begin); });
    }
    for (auto& th : pool) th.join();
  };
  const double s = median_seconds(copy, 2, 9, 0.5);
  return 2.0 * static_cast<double>(bytes) / s / 1e9;
}

struct Format {
  std::string name;
  DType type = DType::f32;  // GGML formats
  bool affine = false;
  AffineFormat affine_format;
};

// One weight matrix of a format on the device, with what a matmul needs.
struct Weights {
  TensorView w, scales, biases;
  size_t bytes = 0;  // everything the kernel reads for the weights
};

Weights make_weights(Backend& backend, const Format& f, int64_t n, int64_t k,
                     std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<float> values(static_cast<size_t>(n * k));
  for (float& v : values) v = dist(rng);
  Weights out;
  if (!f.affine) {
    out.w = backend.alloc_tensor(f.type, {n, k});
    std::vector<uint8_t> bytes(out.w.span_bytes());
    ops::quantize(f.type, values.data(), n * k, bytes.data());
    out.w.view.write(bytes);
    out.bytes = bytes.size();
    return out;
  }
  const AffineFormat& a = f.affine_format;
  const int64_t words = ops::affine_words_per_row(a, k);
  const int64_t groups = k / a.group_size;
  std::vector<uint32_t> packed(static_cast<size_t>(n * words));
  std::vector<uint16_t> scales(static_cast<size_t>(n * groups)), biases(scales.size());
  ops::affine_quantize(a, values.data(), n, k, packed.data(), scales.data(), biases.data());
  out.w = backend.alloc_tensor(DType::u32, {n, words});
  out.scales = backend.alloc_tensor(a.scale_type, {n, groups});
  out.biases = backend.alloc_tensor(a.scale_type, {n, groups});
  out.w.view.write(packed);
  out.scales.view.write(scales);
  out.biases.view.write(biases);
  out.bytes = packed.size() * 4 + scales.size() * 4;
  return out;
}

// A copy of `src` in new device memory.
Weights clone(Backend& backend, const Weights& src) {
  auto copy = [&](const TensorView& t) {
    if (!t.view) return TensorView();
    TensorView c = backend.alloc_tensor(t.dtype, t.shape);
    std::vector<uint8_t> bytes(t.span_bytes());
    t.view.read(bytes.data(), bytes.size());
    c.view.write(bytes);
    return c;
  };
  Weights out;
  out.w = copy(src.w);
  out.scales = copy(src.scales);
  out.biases = copy(src.biases);
  out.bytes = src.bytes;
  return out;
}

void emit(GraphSession& s, const Format& f, const TensorView& x, const Weights& w,
          const TensorView& out) {
  if (f.affine) {
    ops::matmul_affine(s, x, w.w, w.scales, w.biases, out, f.affine_format);
  } else {
    ops::matmul(s, x, w.w, out);
  }
}

// Seconds per matmul when the graph of all `weights` is replayed.
double replay_seconds(const std::shared_ptr<Backend>& backend, const Format& f, const TensorView& x,
                      const std::vector<Weights>& weights, int64_t n) {
  GraphExecutor executor(backend);
  GraphSession session = executor.begin_recorded();
  std::vector<TensorView> outs;
  for (const Weights& w : weights) {
    outs.push_back(backend->alloc_tensor(DType::f32, {x.rows(), n}));
    emit(session, f, x, w, outs.back());
  }
  CaptureOptions options;
  options.encoding = GraphEncoding::sequential;
  options.fuse = false;
  CapturedGraph graph(*backend, session.take_graph(), options);
  const double s = median_seconds([&] { graph.run(); }, 3, 15);
  return s / static_cast<double>(weights.size());
}

// Seconds per call of the kernel run directly on this thread (no pool, no dispatch).
double kernel_seconds(const std::shared_ptr<Backend>& backend, const Format& f, const TensorView& x,
                      const Weights& w, const TensorView& out, int64_t n, int64_t k) {
  if (f.affine) {
    ops::AffineMatmulArgs a{};
    a.x = static_cast<const float*>(x.data());
    a.w = static_cast<const uint32_t*>(w.w.data());
    a.scales = w.scales.data();
    a.biases = w.biases.data();
    a.out = static_cast<float*>(out.data());
    a.m = x.rows();
    a.n = n;
    a.k = k;
    a.x_stride = k;
    a.w_stride = w.w.cols();
    a.scale_stride = w.scales.cols();
    a.bias_stride = w.biases.cols();
    a.out_stride = n;
    a.bits = f.affine_format.bits;
    a.group_size = f.affine_format.group_size;
    KernelRequest r{"matmul_affine", f.affine_format.scale_type, f.affine_format.scale_type, a.m, n, &a, sizeof(a)};
    const KernelChoice c = backend->choose_kernel(r);
    return median_seconds([&] { c.kernel->cpu(&a, c.dims, 0, c.dims.grid.count()); }, 3, 15);
  }
  ops::MatmulArgs a{};
  a.x = static_cast<const float*>(x.data());
  a.w = w.w.data();
  a.out = static_cast<float*>(out.data());
  a.m = x.rows();
  a.n = n;
  a.k = k;
  a.x_stride = k;
  a.w_row_bytes = static_cast<int64_t>(w.w.row_stride);
  a.out_stride = n;
  KernelRequest r{"matmul", f.type, f.type, a.m, n, &a, sizeof(a)};
  const KernelChoice c = backend->choose_kernel(r);
  return median_seconds([&] { c.kernel->cpu(&a, c.dims, 0, c.dims.grid.count()); }, 3, 15);
}

}  // namespace

int main(int argc, char** argv) {
  Options options = Options::defaults();
  bool quick = false;
  std::string only;  // comma-separated format names; empty: all
  std::vector<std::pair<int64_t, int64_t>> chosen_shapes;
  int64_t rows = 1;  // rows of x
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--threads" && i + 1 < argc) {
      options.cpu_threads = std::atoi(argv[++i]);
    } else if (arg == "--quick") {
      quick = true;
    } else if (arg == "--only" && i + 1 < argc) {
      only = "," + std::string(argv[++i]) + ",";
    } else if (arg == "--shape" && i + 1 < argc) {
      long long n = 0, k = 0;
      if (std::sscanf(argv[++i], "%lldx%lld", &n, &k) != 2 || n <= 0 || k <= 0) {
        std::fprintf(stderr, "--shape takes NxK, e.g. 2048x2048\n");
        return 2;
      }
      chosen_shapes.emplace_back(n, k);
    } else if (arg == "--rows" && i + 1 < argc) {
      rows = std::atoll(argv[++i]);
      if (rows < 1) {
        std::fprintf(stderr, "--rows takes M >= 1\n");
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--threads N] [--quick] [--only FORMAT[,FORMAT...]] [--shape NxK] [--rows M]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    auto backend = make_cpu_backend(options);
    const int threads = backend->info().threads;
    const size_t copy_bytes = size_t{512} << 20;
    std::printf("backend: %s\n", backend->info().name.c_str());
#if defined(__x86_64__)
    __builtin_cpu_init();
    std::printf("cpu: avx2 %s, fma %s, avx512f %s; kernels use the widest (ONEPASS_CPU_ISA=%s)\n",
                __builtin_cpu_supports("avx2") ? "yes" : "no",
                __builtin_cpu_supports("fma") ? "yes" : "no",
                __builtin_cpu_supports("avx512f") ? "yes" : "no",
                std::getenv("ONEPASS_CPU_ISA") ? std::getenv("ONEPASS_CPU_ISA") : "unset");
#endif
    const double bw1 = memcpy_bandwidth(copy_bytes, 1);
    const double bwn = memcpy_bandwidth(copy_bytes, threads);
    std::printf(
        "memcpy bandwidth (512 MiB, bytes read + written): 1 thread %.1f GB/s, %d threads %.1f "
        "GB/s\n\n",
        bw1, threads, bwn);

    std::vector<Format> formats;
    for (DType t : {DType::q4_0, DType::q4_1, DType::q8_0, DType::q5_0, DType::q5_1, DType::iq4_nl,
                    DType::iq4_xs, DType::q2_k, DType::q3_k, DType::q4_k, DType::q5_k, DType::q6_k, DType::f16}) {
      formats.push_back({std::string(dtype_name(t)), t, false, {}});
    }
    Format mlx;
    mlx.name = "mlx4_g64";
    mlx.affine = true;
    mlx.affine_format.bits = 4;
    mlx.affine_format.group_size = 64;
    mlx.affine_format.scale_type = DType::bf16;
    formats.push_back(mlx);

    std::vector<std::pair<int64_t, int64_t>> shapes = {
        {1536, 576}, {576, 1536}, {8192, 2048}, {2048, 8192}};
    if (quick) shapes = {{1536, 576}, {8192, 2048}};
    if (!chosen_shapes.empty()) shapes = chosen_shapes;
    if (rows > 1) {
      std::printf("matrix-matrix (M = %lld), GMAC/s\n", static_cast<long long>(rows));
      std::printf("%-9s %-11s %9s %9s %9s %11s\n", "format", "N x K", "MB", "kernel", "hot", "hot us");
    } else {
      std::printf("matrix-vector (M = 1), GB/s of weights read (weights + scales)\n");
      std::printf("%-9s %-11s %9s %9s %9s %9s %11s %8s\n", "format", "N x K", "MB", "kernel", "hot",
                  "cold", "cold us", "cold/bw");
    }
    std::mt19937_64 rng(42);
    for (const Format& f : formats) {
      if (!only.empty() && only.find("," + f.name + ",") == std::string::npos) continue;
      for (auto [n, k] : shapes) {
        const int64_t block = f.affine ? f.affine_format.group_size : dtype_block_elems(f.type);
        if (k % block != 0) {
          std::printf("%-9s %5lldx%-5lld   n/a: K is not a multiple of the %lld-value block\n",
                      f.name.c_str(), static_cast<long long>(n), static_cast<long long>(k),
                      static_cast<long long>(block));
          continue;
        }
        TensorView x = backend->alloc_tensor(DType::f32, {rows, k});
        std::vector<float> xv(static_cast<size_t>(rows * k));
        std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
        for (float& v : xv) v = dist(rng);
        x.view.write(xv);
        TensorView out = backend->alloc_tensor(DType::f32, {rows, n});
        const Weights w = make_weights(*backend, f, n, k, rng);
        const double gb = static_cast<double>(w.bytes) / 1e9;
        if (rows > 1) {
          const double macs = static_cast<double>(rows * n * k) / 1e9;
          const double kernel = macs / kernel_seconds(backend, f, x, w, out, n, k);
          const double hot_s = replay_seconds(backend, f, x, {w}, n);
          std::printf("%-9s %5lldx%-5lld %9.2f %9.1f %9.1f %11.1f\n", f.name.c_str(), static_cast<long long>(n),
                      static_cast<long long>(k), gb * 1e3, kernel, macs / hot_s, hot_s * 1e6);
          continue;
        }
        const double kernel = gb / kernel_seconds(backend, f, x, w, out, n, k);
        const double hot = gb / replay_seconds(backend, f, x, {w}, n);
        const size_t copies = std::max<size_t>(2, copy_bytes / w.bytes);
        std::vector<Weights> many{w};
        for (size_t c = 1; c < copies; ++c) many.push_back(clone(*backend, w));
        const double cold_s = replay_seconds(backend, f, x, many, n);
        std::printf("%-9s %5lldx%-5lld %9.2f %9.1f %9.1f %9.1f %11.1f %7.0f%%\n", f.name.c_str(),
                    static_cast<long long>(n), static_cast<long long>(k), gb * 1e3, kernel, hot,
                    gb / cold_s, cold_s * 1e6, 100.0 * (gb / cold_s) / bwn);
      }
    }
    std::printf(
        "\nkernel: 1 thread, direct call; hot/cold: %d threads through the graph replay.\n"
        "cold/bw: cold GB/s of weights read relative to the %d-thread memcpy bandwidth (read + "
        "write).\n",
        threads, threads);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_quant_cpu: %s\n", e.what());
    return 1;
  }
  return 0;
}
