// Runs every registered op case on the CPU and, where the build and machine have one, on CUDA.
// ONEPASS_OP_BENCH=1 also times each case and prints µs and effective GB/s.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "support/op_harness.h"

namespace onepass::testing {
namespace {

struct Param {
  std::string backend;
  size_t index;
};

// What gtest shows for GetParam() (by default a byte dump of the struct, pointers included).
void PrintTo(const Param& p, std::ostream* os) { *os << p.backend << ' ' << op_cases()[p.index].name; }

// CUDA cases are listed where they can run: in a build with the CUDA backend, on a machine
// whose NVIDIA driver exposes its control device. The device node, not the CUDA runtime, is
// asked, so that no test_ops process (ctest starts one per case) initialises CUDA for this;
// elsewhere each CUDA case would start a process only to skip.
bool cuda_cases_can_run() {
  if (!ONEPASS_HAVE_CUDA) return false;
  std::error_code error;
  return std::filesystem::exists("/dev/nvidiactl", error);
}

std::vector<Param> all_params() {
  std::vector<Param> params;
  std::vector<const char*> backends = {"cpu"};
  if (cuda_cases_can_run()) backends.push_back("cuda");
  for (const char* backend : backends) {
    for (size_t i = 0; i < op_cases().size(); ++i) params.push_back({backend, i});
  }
  return params;
}

class OpCases : public ::testing::TestWithParam<Param> {};

TEST_P(OpCases, MatchesFloat64Reference) {
  const Param& p = GetParam();
  auto backend = harness_backend(p.backend);
  if (!backend) GTEST_SKIP() << "no " << p.backend << " device";
  const OpCase& c = op_cases()[p.index];
  const bool timing = std::getenv("ONEPASS_OP_BENCH") != nullptr;
  const uint64_t seed = fresh_seed();
  OpContext context(backend, seed, timing);
  try {
    c.run(context);
  } catch (const Error& e) {
    FAIL() << "case " << c.name << " threw: " << e.what() << " (seed " << seed << ")";
  }
  context.check_guards();
  if (timing && context.timing()) {
    std::printf("[op-bench] %-5s %-50s %10.2f us %8.2f GB/s\n", p.backend.c_str(), c.name.c_str(),
                context.timing()->median_us, context.timing()->gbps);
  }
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  std::string name = info.param.backend + "__" + op_cases()[info.param.index].name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(All, OpCases, ::testing::ValuesIn(all_params()), param_name);

TEST(OpCaseTable, NamesAreUnique) {
  std::set<std::string> names;
  for (const OpCase& c : op_cases()) EXPECT_TRUE(names.insert(c.name).second) << c.name;
}

}  // namespace
}  // namespace onepass::testing
