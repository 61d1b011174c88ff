#include "support/op_harness.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "onepass/exec/captured_graph.h"

namespace onepass::testing {
namespace {

constexpr size_t kGuardBytes = 256;
constexpr uint8_t kGuardByte = 0xA5;

std::string first_mismatches(const std::vector<float>& actual, const std::vector<double>& expected,
                             const Tolerance& tol, int64_t cols) {
  std::ostringstream out;
  int shown = 0;
  size_t bad = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double e = expected[i];
    const double a = actual[i];
    const bool ok = std::isfinite(a) && std::abs(a - e) <= tol.atol + tol.rtol * std::abs(e);
    if (ok) continue;
    ++bad;
    if (shown++ < 8) {
      out << "\n  [" << i / static_cast<size_t>(cols) << ", " << i % static_cast<size_t>(cols)
          << "] got " << a << " expected " << e;
    }
  }
  return std::to_string(bad) + " of " + std::to_string(actual.size()) + " elements off:" + out.str();
}

}  // namespace

Tolerance tolerance(DType t, double f32_rtol, double f32_atol) {
  switch (t) {
    case DType::f16: return {std::max(f32_atol, 1e-3), std::max(f32_rtol, 2e-3)};
    case DType::bf16: return {std::max(f32_atol, 8e-3), std::max(f32_rtol, 1.6e-2)};
    default: return {f32_atol, f32_rtol};
  }
}

std::vector<OpCase>& op_cases() {
  static std::vector<OpCase> cases;
  return cases;
}

std::shared_ptr<Backend> harness_backend(const std::string& name) {
  static std::map<std::string, std::shared_ptr<Backend>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  std::shared_ptr<Backend> backend;
  if (name == "cpu") {
    backend = cpu_backend();
  } else if (name == "cuda" && cuda_device_count() > 0) {
    backend = make_cuda_backend(0, test_options());
  }
  cache[name] = backend;
  return backend;
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

std::vector<double> rounded(DType t, std::vector<double> v) {
  for (double& x : v) x = round_to(t, static_cast<float>(x));
  return v;
}

OpContext::OpContext(std::shared_ptr<Backend> backend, uint64_t seed, bool timing)
    : backend_(std::move(backend)), seed_(seed), rng_(seed), timing_mode_(timing) {
  executor_ = std::make_unique<GraphExecutor>(backend_);
}

OpContext::~OpContext() = default;

GraphSession& OpContext::session() {
  if (!session_) session_.emplace(timing_mode_ ? executor_->begin_recorded() : executor_->begin());
  return *session_;
}

BufferView OpContext::guarded(size_t bytes) {
  BufferView whole = backend_->alloc(bytes + 2 * kGuardBytes);
  whole.fill(kGuardByte);
  BufferView inner = whole.slice(kGuardBytes, bytes);
  inner.fill(kPoisonByte);
  guarded_.push_back({whole, kGuardBytes, bytes});
  return inner;
}

TensorView OpContext::make_input(DType dtype, Shape shape, const std::vector<float>& values,
                                 int64_t pad) {
  const int64_t rows = shape.rows();
  const int64_t cols = shape.cols();
  const size_t elem = dtype_size(dtype);
  const uint64_t stride = static_cast<uint64_t>(cols + pad) * elem;
  const size_t bytes = rows == 0 ? 0 : static_cast<size_t>(rows - 1) * stride + static_cast<size_t>(cols) * elem;
  // Inputs get guards too: an op must not write its inputs.
  TensorView t(guarded(std::max<size_t>(bytes, 1)), dtype, shape, stride);
  upload_floats(t, values);
  std::vector<double>& host = host_[t.view.address()];
  host.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) host[i] = round_to(dtype, values[i]);
  bytes_in_ += static_cast<size_t>(rows * cols) * elem;
  return t;
}

TensorView OpContext::random_input(DType dtype, Shape shape, float lo, float hi) {
  return random_input_strided(dtype, shape, 0, lo, hi);
}

TensorView OpContext::random_input_strided(DType dtype, Shape shape, int64_t pad, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (float& x : v) x = dist(rng_);
  return make_input(dtype, shape, v, pad);
}

TensorView OpContext::input_from(DType dtype, Shape shape, const std::vector<float>& values) {
  check(static_cast<int64_t>(values.size()) == shape.numel(), "harness", "input_from: ",
        values.size(), " values for shape ", shape.str());
  return make_input(dtype, shape, values, 0);
}

TensorView OpContext::input_i32(Shape shape, const std::vector<int32_t>& values) {
  check(static_cast<int64_t>(values.size()) == shape.numel(), "harness", "input_i32 size");
  TensorView t(guarded(std::max<size_t>(values.size() * 4, 1)), DType::i32, shape);
  if (!values.empty()) t.view.write(values.data(), values.size() * 4);
  bytes_in_ += values.size() * 4;
  return t;
}

TensorView OpContext::input_bytes(DType dtype, Shape shape, const std::vector<uint8_t>& bytes) {
  const size_t need = static_cast<size_t>(shape.rows()) * dtype_bytes(dtype, shape.cols());
  check(bytes.size() == need, "harness", "input_bytes: ", bytes.size(), " bytes for ",
        dtype_name(dtype), shape.str(), " (", need, " expected)");
  TensorView t(guarded(std::max<size_t>(need, 1)), dtype, shape);
  if (need) t.view.write(bytes.data(), need);
  bytes_in_ += need;
  return t;
}

const std::vector<double>& OpContext::host(const TensorView& input) const {
  auto it = host_.find(input.view.address());
  check(it != host_.end(), "harness", "host(): not an input made by this context");
  return it->second;
}

TensorView OpContext::output(DType dtype, Shape shape) {
  const size_t bytes = static_cast<size_t>(shape.rows()) * dtype_bytes(dtype, shape.cols());
  bytes_out_ += bytes;
  return TensorView(guarded(std::max<size_t>(bytes, 1)), dtype, shape);
}

BufferView OpContext::scratch(size_t bytes) { return guarded(std::max<size_t>(bytes, 1)); }

void OpContext::repoison(const TensorView& t) { t.view.slice(0, t.span_bytes()).fill(kPoisonByte); }

void OpContext::run() {
  GraphSession& s = session();
  if (!timing_mode_) {
    s.finish();
    return;
  }
  CaptureOptions options;
  options.encoding = GraphEncoding::sequential;
  options.fuse = false;  // time the op as written, not a fused variant
  CapturedGraph graph(*backend_, s.take_graph(), options);
  graph.set_timing(true);
  graph.run();  // the run whose results the case checks
  std::vector<double> us;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  for (int i = 0; i < 5 || (i < 200 && std::chrono::steady_clock::now() < until); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    graph.run();
    const auto host_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    const auto gpu = graph.gpu_time_ns();
    us.push_back(gpu ? static_cast<double>(*gpu) / 1e3 : host_us);
  }
  std::sort(us.begin(), us.end());
  Timing t;
  t.median_us = us[us.size() / 2];
  t.gbps = static_cast<double>(bytes_moved()) / (t.median_us * 1e3);
  timing_ = t;
}

void OpContext::check_guards() {
  for (const Guarded& g : guarded_) {
    std::vector<uint8_t> bytes(g.whole.size());
    g.whole.read(bytes.data(), bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i) {
      if (i >= g.offset && i < g.offset + g.bytes) continue;
      if (bytes[i] != kGuardByte) {
        ADD_FAILURE() << "guard byte overwritten " << (i < g.offset ? "before" : "after")
                      << " a tensor of " << g.bytes << " bytes, at offset "
                      << static_cast<long long>(i) - static_cast<long long>(g.offset);
        return;
      }
    }
  }
}

void OpContext::expect_near(const TensorView& out, const std::vector<double>& expected,
                            Tolerance tol, const std::string& what) {
  check_guards();
  const std::vector<float> actual = download_floats(out);
  ASSERT_EQ(actual.size(), expected.size()) << what;
  size_t worst = 0;
  const double err = max_scaled_error(actual, expected, tol.atol, tol.rtol, &worst);
  EXPECT_LE(err, 1.0) << what << ": " << first_mismatches(actual, expected, tol, out.cols())
                      << "\n  (atol " << tol.atol << ", rtol " << tol.rtol << ", seed " << seed_ << ")";
}

void OpContext::expect_i32(const TensorView& out, const std::vector<int32_t>& expected,
                           const std::string& what) {
  check_guards();
  ASSERT_EQ(out.dtype, DType::i32);
  std::vector<int32_t> actual(expected.size());
  out.view.read(actual.data(), actual.size() * 4);
  EXPECT_EQ(actual, expected) << what << " (seed " << seed_ << ")";
}

void OpContext::expect_bytes(const TensorView& out, const std::vector<uint8_t>& expected,
                             const std::string& what) {
  check_guards();
  std::vector<uint8_t> actual(expected.size());
  out.view.read(actual.data(), actual.size());
  EXPECT_EQ(actual, expected) << what << " (seed " << seed_ << ")";
}

}  // namespace onepass::testing
