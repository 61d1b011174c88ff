#include "support/testing.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "onepass/ops/quant.h"
#include "support/synthetic.h"

namespace onepass::testing {

Options test_options() {
  Options o = Options::defaults();
  o.cpu_schedule = CpuSchedule::concurrent;
  if (o.cpu_threads == 0) o.cpu_threads = 4;
  return o;
}

std::shared_ptr<Backend> cpu_backend(Options options) {
  std::shared_ptr<Backend> backend = make_cpu_backend(options);
  add_cpu_synthetic_kernels(*backend);
  return backend;
}

uint64_t fresh_seed() {
  if (const char* s = std::getenv("ONEPASS_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  static std::random_device device;
  return (uint64_t{device()} << 32) ^ device();
}

std::vector<float> random_floats(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<uint32_t> random_u32(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> v(n);
  for (uint32_t& x : v) x = static_cast<uint32_t>(rng());
  return v;
}

float round_to(DType t, float v) {
  switch (t) {
    case DType::f16: return f16_to_f32(f32_to_f16(v));
    case DType::bf16: return bf16_to_f32(f32_to_bf16(v));
    default: return v;
  }
}

void upload_floats(const TensorView& t, const std::vector<float>& values) {
  const int64_t rows = t.rows();
  const int64_t cols = t.cols();
  if (static_cast<int64_t>(values.size()) != rows * cols) {
    throw Error("testing", "upload_floats: size mismatch");
  }
  std::vector<uint8_t> bytes(t.span_bytes(), 0);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = bytes.data() + static_cast<size_t>(r) * t.row_stride;
    for (int64_t c = 0; c < cols; ++c) {
      const float v = values[static_cast<size_t>(r * cols + c)];
      if (t.dtype == DType::f32) {
        std::memcpy(row + c * 4, &v, 4);
      } else {
        const uint16_t h = t.dtype == DType::f16 ? f32_to_f16(v) : f32_to_bf16(v);
        std::memcpy(row + c * 2, &h, 2);
      }
    }
  }
  // Keep whatever lies between rows (padding) as it is on the device.
  if (!t.contiguous()) {
    std::vector<uint8_t> existing(t.span_bytes());
    t.view.read(existing.data(), existing.size());
    for (int64_t r = 0; r < rows; ++r) {
      const size_t off = static_cast<size_t>(r) * t.row_stride;
      std::memcpy(existing.data() + off, bytes.data() + off, t.row_bytes());
    }
    bytes = std::move(existing);
  }
  t.view.write(bytes.data(), bytes.size());
}

std::vector<float> download_floats(const TensorView& t) {
  std::vector<uint8_t> bytes(t.span_bytes());
  t.view.read(bytes.data(), bytes.size());
  const int64_t rows = t.rows();
  const int64_t cols = t.cols();
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = bytes.data() + static_cast<size_t>(r) * t.row_stride;
    for (int64_t c = 0; c < cols; ++c) {
      float v;
      if (t.dtype == DType::f32) {
        std::memcpy(&v, row + c * 4, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, row + c * 2, 2);
        v = t.dtype == DType::f16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      out[static_cast<size_t>(r * cols + c)] = v;
    }
  }
  return out;
}

double max_scaled_error(const std::vector<float>& actual, const std::vector<double>& expected,
                        double atol, double rtol, size_t* worst_index) {
  double worst = 0.0;
  if (actual.size() != expected.size()) return std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < actual.size(); ++i) {
    double e;
    if (!std::isfinite(actual[i]) || !std::isfinite(expected[i])) {
      e = (std::isnan(actual[i]) || std::isnan(expected[i]) || actual[i] != expected[i])
              ? std::numeric_limits<double>::infinity()
              : 0.0;
    } else {
      e = std::abs(static_cast<double>(actual[i]) - expected[i]) / (atol + rtol * std::abs(expected[i]));
    }
    if (e > worst || (worst_index && i == 0)) {
      if (e > worst) worst = e;
      if (worst_index) *worst_index = i;
    }
  }
  return worst;
}

std::string run_command(const std::string& command, int* status) {
  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *status = -1;
    return output;
  }
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  *status = ::pclose(pipe);
  return output;
}

std::string test_temp_name(const std::string& prefix) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = prefix + std::to_string(::getpid());
  if (info != nullptr) name += std::string("_") + info->test_suite_name() + "_" + info->name();
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  return name;
}

void TempDirTest::SetUp() {
  dir_ = std::filesystem::temp_directory_path() / test_temp_name(prefix_);
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
}

void TempDirTest::TearDown() {
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

TensorView poisoned_tensor(Backend& backend, Shape shape, DType t) {
  const uint64_t row = t == DType::f32 ? static_cast<uint64_t>(shape.cols()) * 4
                                       : static_cast<uint64_t>(shape.cols()) / dtype_block_elems(t) * dtype_size(t);
  TensorView v(backend.alloc(row * static_cast<uint64_t>(shape.rows())), t, shape, row);
  v.view.fill(kPoisonByte);
  return v;
}

TensorView random_weights(Backend& backend, DType type, int64_t rows, int64_t cols, uint64_t seed) {
  TensorView w = poisoned_tensor(backend, Shape{rows, cols}, type);
  const auto values = random_floats(static_cast<size_t>(rows * cols), seed, -0.5f, 0.5f);
  if (dtype_is_quantized(type)) {
    std::vector<uint8_t> bytes(w.view.size());
    ops::quantize(type, values.data(), rows * cols, bytes.data());
    w.view.write(std::span<const uint8_t>(bytes));
  } else {
    upload_floats(w, values);
  }
  return w;
}

}  // namespace onepass::testing
