// activate_rows (the CPU activations' f32 rows) against float64 on every instruction set
// this CPU runs: silu, gelu and softcap over wide ranges, with and without the gate factor,
// row lengths with vector tails, in place, and NaN in, NaN out.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "support/testing.h"

#include "../../src/backends/cpu/kernels/quant_blocks.h"
#include "../../src/backends/cpu/kernels/row_math.h"

namespace onepass {
namespace {

double reference(cpu::Activation act, double x, double cap) {
  switch (act) {
    case cpu::Activation::silu:
      return x / (1.0 + std::exp(-x));
    case cpu::Activation::gelu:
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
    case cpu::Activation::softcap:
      return std::tanh(x / cap) * cap;
  }
  return 0;
}

// Restores the instruction set in use when a test ends.
struct IsaGuard {
  cpu::Isa saved = cpu::active_isa();
  ~IsaGuard() { cpu::set_active_isa(saved); }
};

TEST(CpuActivation, RowsMatchFloat64OnEveryInstructionSet) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  IsaGuard guard;
  const char* names[] = {"portable", "avx2", "avx512", "avx512_vnni"};
  for (cpu::Isa isa : {cpu::Isa::portable, cpu::Isa::avx2, cpu::Isa::avx512, cpu::Isa::avx512_vnni}) {
    if (!cpu::isa_supported(isa)) continue;
    cpu::set_active_isa(isa);
    for (cpu::Activation act : {cpu::Activation::silu, cpu::Activation::gelu, cpu::Activation::softcap}) {
      const float cap = act == cpu::Activation::softcap ? 30.0f : 0.0f;
      for (float range : {1e-3f, 0.3f, 8.0f, 120.0f}) {
        for (int64_t n : {1, 7, 16, 37, 1000}) {
          SCOPED_TRACE(::testing::Message() << names[static_cast<int>(isa)] << " act " << static_cast<int>(act)
                                            << " range " << range << " n " << n);
          std::uniform_real_distribution<float> dist(-range, range);
          std::vector<float> x(static_cast<size_t>(n)), up(static_cast<size_t>(n));
          for (float& v : x) v = dist(rng);
          for (float& v : up) v = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
          std::vector<float> out(static_cast<size_t>(n) + 1, -7.0f), gated(static_cast<size_t>(n) + 1, -7.0f);
          cpu::activate_rows(act, x.data(), nullptr, out.data(), n, cap);
          cpu::activate_rows(act, x.data(), up.data(), gated.data(), n, cap);
          for (int64_t j = 0; j < n; ++j) {
            const double want = reference(act, x[j], cap);
            // A few f32 ulp of the value (tanh's 1 - 2 / (e^2|u| + 1) cancels to ~8 ulp just
            // past |u| = 1/4, where the polynomial stops); for gelu also of x, where 1 + tanh
            // cancels in its negative tail (2^-24 |x| per rounding). f32 e^x overflows past 88.7.
            const double cancel = act == cpu::Activation::gelu ? 4 * 0x1p-24 * std::fabs(x[j]) : 0.0;
            const double ulps = act == cpu::Activation::silu ? 6 : 16;
            const double tol = ulps * 0x1p-24 * std::fabs(want) + cancel + 1e-30;
            ASSERT_NEAR(out[j], want, tol) << "x " << x[j];
            ASSERT_NEAR(gated[j], want * up[j], tol * (std::fabs(up[j]) + 1)) << "x " << x[j];
          }
          ASSERT_EQ(out[n], -7.0f) << "wrote past the row";
          ASSERT_EQ(gated[n], -7.0f) << "wrote past the row";
          // In place gives the same values.
          std::vector<float> in_place = x;
          cpu::activate_rows(act, in_place.data(), up.data(), in_place.data(), n, cap);
          for (int64_t j = 0; j < n; ++j) ASSERT_EQ(in_place[j], gated[j]);
        }
      }
      // NaN in, NaN out; neighbours unaffected.
      std::vector<float> x = {0.5f, std::numeric_limits<float>::quiet_NaN(), -0.5f};
      std::vector<float> out(3);
      cpu::activate_rows(act, x.data(), nullptr, out.data(), 3, cap);
      EXPECT_TRUE(std::isnan(out[1])) << names[static_cast<int>(isa)];
      EXPECT_NEAR(out[0], reference(act, 0.5, cap), 1e-6);
      EXPECT_NEAR(out[2], reference(act, -0.5, cap), 1e-6);
    }
  }
}

}  // namespace
}  // namespace onepass
