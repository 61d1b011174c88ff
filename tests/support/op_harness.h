// The op test harness (in the spirit of llama.cpp's test-backend-ops): one table of op
// cases; each case builds inputs from a fresh seed, poisons its outputs (NaN bytes) and
// surrounds them with guard bytes, runs the op on a backend, and compares every output
// element with a float64 reference under a tolerance stated per case and dtype.
//
// Register cases from any file of tests/ops/:
//   ONEPASS_OP_CASES(norm) {
//     for (DType t : kFloatTypes) cases.push_back({cat("rms_norm/", dtype_name(t)), [=](OpContext& c) {
//       TensorView x = c.random_input(t, {7, 333});
//       ...
//       ops::rms_norm(c.session(), x, w, out, 1e-5f);
//       c.run();
//       c.expect_near(out, reference, tolerance(t));
//     }});
//   }
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "onepass/core/error.h"
#include "onepass/ops/ops.h"
#include "onepass/exec/graph_session.h"
#include "support/testing.h"

namespace onepass::testing {

/// |actual - expected| <= atol + rtol * |expected| for every element.
struct Tolerance {
  double atol = 0.0;
  double rtol = 0.0;
};

/// Tolerance for results stored in `t`, given what the computation itself costs in f32.
Tolerance tolerance(DType t, double f32_rtol = 1e-5, double f32_atol = 1e-6);

inline constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

class OpContext {
 public:
  OpContext(std::shared_ptr<Backend> backend, uint64_t seed, bool timing);
  ~OpContext();

  Backend& backend() { return *backend_; }
  uint64_t seed() const { return seed_; }
  std::mt19937_64& rng() { return rng_; }
  /// The session the case emits its ops into (a direct session; a recorded one that is
  /// replayed as a CapturedGraph in timing mode).
  GraphSession& session();

  // --- inputs (host copies keep exactly the stored values) ----------------------------
  /// Uniform random values in [lo, hi], rounded to `dtype` (f32/f16/bf16).
  TensorView random_input(DType dtype, Shape shape, float lo = -1.0f, float hi = 1.0f);
  /// As random_input, with `pad` unused elements after each row (row stride > row size).
  TensorView random_input_strided(DType dtype, Shape shape, int64_t pad, float lo = -1.0f,
                                  float hi = 1.0f);
  TensorView input_from(DType dtype, Shape shape, const std::vector<float>& values);
  TensorView input_i32(Shape shape, const std::vector<int32_t>& values);
  /// Raw bytes (quantized blocks, packed u32 weights, u8).
  TensorView input_bytes(DType dtype, Shape shape, const std::vector<uint8_t>& bytes);
  /// The stored values of a float input (row-major, padding skipped).
  const std::vector<double>& host(const TensorView& input) const;

  // --- outputs ---------------------------------------------------------------------
  /// A poisoned output tensor with guard bytes before and after it.
  TensorView output(DType dtype, Shape shape);
  /// Poisoned scratch memory with guards.
  BufferView scratch(size_t bytes);
  /// Overwrites an output (or any tensor made here) with poison again.
  void repoison(const TensorView& t);

  /// Finishes the session (waits). In timing mode also replays the pass and records
  /// median time and effective bandwidth.
  void run();

  // --- checks (each also verifies every guard) -------------------------------------
  void expect_near(const TensorView& out, const std::vector<double>& expected, Tolerance tol,
                   const std::string& what = "out");
  void expect_i32(const TensorView& out, const std::vector<int32_t>& expected,
                  const std::string& what = "out");
  void expect_bytes(const TensorView& out, const std::vector<uint8_t>& expected,
                    const std::string& what = "out");
  void check_guards();

  /// Bytes of every input and output made through this context (for GB/s).
  size_t bytes_moved() const { return bytes_in_ + bytes_out_; }
  struct Timing {
    double median_us = 0;
    double gbps = 0;
  };
  const std::optional<Timing>& timing() const { return timing_; }

 private:
  struct Guarded {
    BufferView whole;
    size_t offset;
    size_t bytes;
  };
  BufferView guarded(size_t bytes);
  TensorView make_input(DType dtype, Shape shape, const std::vector<float>& values, int64_t pad);

  std::shared_ptr<Backend> backend_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  bool timing_mode_;
  std::unique_ptr<GraphExecutor> executor_;
  std::optional<GraphSession> session_;
  std::map<uint64_t, std::vector<double>> host_;  // by address
  std::vector<Guarded> guarded_;
  size_t bytes_in_ = 0;
  size_t bytes_out_ = 0;
  std::optional<Timing> timing_;
};

struct OpCase {
  std::string name;  // unique, "family/dtype/shape"
  std::function<void(OpContext&)> run;
};

/// Every registered case, in registration order.
std::vector<OpCase>& op_cases();

struct OpCaseRegistrar {
  explicit OpCaseRegistrar(void (*fill)(std::vector<OpCase>&)) { fill(op_cases()); }
};

#define ONEPASS_OP_CASES(family)                                              \
  static void onepass_op_cases_##family(std::vector<::onepass::testing::OpCase>& cases); \
  static ::onepass::testing::OpCaseRegistrar onepass_op_registrar_##family(   \
      &onepass_op_cases_##family);                                            \
  static void onepass_op_cases_##family(std::vector<::onepass::testing::OpCase>& cases)

/// The backend named "cpu" or "cuda", created once per process; nullptr when absent.
std::shared_ptr<Backend> harness_backend(const std::string& name);

/// Emits into a fresh direct session on a CPU backend and expects Error("[op] ..."):
/// `emit(session, backend)` must throw an Error whose where() is `op`.
template <typename F>
void expect_op_error(const char* op, F&& emit) {
  GraphExecutor executor(cpu_backend());
  GraphSession session = executor.begin();
  try {
    emit(session, executor.backend());
    ADD_FAILURE() << "expected an error from " << op;
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), op) << e.what();
  }
}

/// Float64 helpers for references.
std::vector<double> to_double(const std::vector<float>& v);
/// Rounds each value through the storage type (what an op writing `t` must produce).
std::vector<double> rounded(DType t, std::vector<double> v);

}  // namespace onepass::testing
