// Shared test helpers: backends, random data, poisoned outputs, comparisons.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

// ONEPASS_ASAN: built with AddressSanitizer (GCC's macro or clang's feature test), whose
// shadow memory makes resident-set measurements meaningless.
#if defined(__SANITIZE_ADDRESS__)
#define ONEPASS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ONEPASS_ASAN 1
#endif
#endif

#include "onepass/backends/factory.h"
#include "onepass/core/device.h"
#include "onepass/core/half.h"
#include "onepass/exec/backend.h"

namespace onepass::testing {

/// Options used by the tests unless they say otherwise: concurrent CPU schedule and 4
/// threads, so that concurrency is exercised even on 2-core machines.
Options test_options();
/// A CPU backend with `options`, with the synthetic kernels added (support/synthetic.h).
std::shared_ptr<Backend> cpu_backend(Options options = test_options());

/// A seed that differs per test run unless ONEPASS_TEST_SEED is set; printed on failure
/// through SCOPED_TRACE by callers.
uint64_t fresh_seed();

std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
std::vector<uint32_t> random_u32(size_t n, uint64_t seed);

/// Byte pattern that reads as NaN in f32, f16 and bf16.
inline constexpr uint8_t kPoisonByte = 0xFF;

/// Writes host floats into a tensor of any float dtype (converting).
void upload_floats(const TensorView& t, const std::vector<float>& values);
/// A [rows, cols] tensor of dense rows of type t (whole blocks for the block formats),
/// filled with kPoisonByte.
TensorView poisoned_tensor(Backend& backend, Shape shape, DType t = DType::f32);
/// A [rows, cols] weight of `type` holding random values in [-0.5, 0.5] (quantized for the
/// block formats).
TensorView random_weights(Backend& backend, DType type, int64_t rows, int64_t cols, uint64_t seed);
/// Reads a float tensor of any float dtype as f32 (row stride honoured).
std::vector<float> download_floats(const TensorView& t);
/// Rounds through the dtype (what storing then loading does).
float round_to(DType t, float v);

/// Whether the CPU backend's matrix-vector products with weights of type t round x to
/// 16-bit integers per 256 values: the SIMD integer row kernels of every block format (not
/// on the portable path).
inline bool cpu_rounds_x_to_int16(const Backend& backend, DType t) {
  return backend.kind() == BackendKind::cpu && backend.info().isa != "portable" && dtype_is_quantized(t);
}

/// Whether the CPU backend's matrix-matrix products (more rows of x than the matrix-vector
/// kernels take) with weights of type t round x as cpu_rounds_x_to_int16 says (the integer
/// GEMM, on every x86-64 vector set; on amx it serves the formats the AMX tiles do not).
inline bool cpu_mm_rounds_x_to_int16(const Backend& backend, DType t) {
  const bool formats =
      t == DType::q4_0 || t == DType::q4_1 || t == DType::q5_0 || t == DType::q5_1 || t == DType::q8_0 ||
      t == DType::iq4_nl || t == DType::q2_k || t == DType::q3_k || t == DType::q4_k || t == DType::q5_k ||
      t == DType::q6_k || t == DType::iq4_xs;
  const std::string& isa = backend.info().isa;
  return backend.kind() == BackendKind::cpu && isa != "portable" && formats;
}

/// A directory name for the running test under the system's temporary directory:
/// "<prefix><pid>_<suite>_<test>", with the '/' of parameterised names replaced, so that
/// the fixture's remove_all takes the whole directory (a '/' made nested directories whose
/// parents stayed behind in /tmp).
std::string test_temp_name(const std::string& prefix);

/// A fixture with a fresh directory per test, test_temp_name(prefix) under the system's
/// temporary directory, removed with its contents after the test.
class TempDirTest : public ::testing::Test {
 protected:
  explicit TempDirTest(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override;
  void TearDown() override;
  std::filesystem::path path(const std::string& name) const { return dir_ / name; }

  std::filesystem::path dir_;

 private:
  std::string prefix_;
};

/// Runs `command` through the shell (popen) and returns its standard output; `status` is
/// the pclose status, -1 when the command could not be started.
std::string run_command(const std::string& command, int* status);

/// Largest |a-b| / (atol + rtol*|b|) over the arrays; NaN anywhere counts as infinity.
double max_scaled_error(const std::vector<float>& actual, const std::vector<double>& expected,
                        double atol, double rtol, size_t* worst_index = nullptr);

}  // namespace onepass::testing
