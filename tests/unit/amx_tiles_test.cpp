// The AMX matrix-matrix products (src/backends/cpu/kernels/matmul/amx_tiles.inl): the run-time
// choice of Isa::amx and its refusal, and the kernel on the plain C++ model of the tile
// instructions (the same packing and scaling code as the hardware path) against float64,
// on its own and in the default model's forward pass. The tests of the tile instructions
// themselves skip, saying why, where this process cannot use AMX.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "../../src/backends/cpu/kernels/matmul/amx_tiles.h"
#include "../../src/backends/cpu/kernels/quant_blocks.h"
#include "onepass/exec/graph_session.h"
#include "onepass/model/llama.h"
#include "onepass/model/loader.h"
#include "onepass/model/tokenizer.h"
#include "onepass/ops/matmul.h"
#include "onepass/ops/ops.h"
#include "onepass/ops/quant.h"
#include "support/testing.h"

namespace onepass {
namespace {

// Turns the emulated AMX path on for one scope.
class AmxEmulation {
 public:
  AmxEmulation() { cpu::set_amx_emulation(true); }
  ~AmxEmulation() { cpu::set_amx_emulation(false); }
  AmxEmulation(const AmxEmulation&) = delete;
  AmxEmulation& operator=(const AmxEmulation&) = delete;
};

// Restores the instruction set in use when a scope ends.
class IsaGuard {
 public:
  IsaGuard() : saved_(cpu::active_isa()) {}
  ~IsaGuard() { cpu::set_active_isa(saved_); }
  IsaGuard(const IsaGuard&) = delete;
  IsaGuard& operator=(const IsaGuard&) = delete;

 private:
  cpu::Isa saved_;
};

// Why the tests of the real tile instructions skip on this machine.
std::string why_no_amx() {
  const cpu::AmxSupport& s = cpu::amx_support();
  return cat("AMX is not usable here (CPUID AMX-TILE ", s.cpu_tile, ", AMX-INT8 ", s.cpu_int8, ", XCR0 tile state ",
             (s.xcr0 >> 17) & 3, "/3, Linux tile data permission ", s.tile_data_permitted,
             "): the hardware AMX tests run only on CPUs with AMX");
}

TEST(AmxIsa, NamesCapTheWidestSet) {
  using cpu::Isa;
  for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512, Isa::avx512_vnni, Isa::amx}) {
    EXPECT_EQ(cpu::capped_isa(Isa::amx, cpu::isa_name(isa)), isa) << cpu::isa_name(isa);
  }
  // ONEPASS_CPU_ISA=avx512_vnni (or lower) turns AMX off; =amx never asks for more than the CPU has.
  EXPECT_EQ(cpu::capped_isa(Isa::amx, "avx512_vnni"), Isa::avx512_vnni);
  EXPECT_EQ(cpu::capped_isa(Isa::avx512_vnni, "amx"), Isa::avx512_vnni);
  EXPECT_EQ(cpu::capped_isa(Isa::avx2, "amx"), Isa::avx2);
  EXPECT_THROW(cpu::capped_isa(Isa::amx, "amx512"), Error);
  EXPECT_EQ(cpu::capped_isa(Isa::avx512, ""), Isa::avx512);  // ONEPASS_CPU_ISA= caps nothing
  EXPECT_EQ(cpu::vector_isa(Isa::amx), Isa::avx512_vnni);
  EXPECT_EQ(cpu::vector_isa(Isa::avx512), Isa::avx512);
}

TEST(AmxIsa, EachMissingConditionRefusesTheTiles) {
  cpu::AmxSupport all;
  all.cpu_tile = all.cpu_int8 = all.tile_data_permitted = true;
  all.xcr0 = (1ull << 17) | (1ull << 18) | 0xE7;
  EXPECT_TRUE(cpu::amx_allowed(all));
  cpu::AmxSupport s = all;
  s.cpu_tile = false;
  EXPECT_FALSE(cpu::amx_allowed(s));
  s = all;
  s.cpu_int8 = false;
  EXPECT_FALSE(cpu::amx_allowed(s));
  s = all;
  s.xcr0 &= ~(1ull << 18);  // the OS does not save tile data
  EXPECT_FALSE(cpu::amx_allowed(s));
  s = all;
  s.xcr0 &= ~(1ull << 17);
  EXPECT_FALSE(cpu::amx_allowed(s));
  s = all;
  s.tile_data_permitted = false;  // arch_prctl(ARCH_REQ_XCOMP_PERM) refused
  EXPECT_FALSE(cpu::amx_allowed(s));
}

// Where this process cannot use the tiles, Isa::amx is neither chosen nor accepted, and the
// kernels stay on the vector sets; where it can, Isa::amx runs avx512_vnni's row kernels.
TEST(AmxIsa, ChosenOnlyWhereTheTilesAreUsable) {
  const bool usable = cpu::isa_supported(cpu::Isa::avx512_vnni) && cpu::amx_allowed(cpu::amx_support());
  EXPECT_EQ(cpu::isa_supported(cpu::Isa::amx), usable);
  EXPECT_EQ(cpu::best_isa() == cpu::Isa::amx, usable);
  const cpu::Isa before = cpu::active_isa();
  if (!usable) {
    EXPECT_THROW(cpu::set_active_isa(cpu::Isa::amx), Error);
    EXPECT_EQ(cpu::active_isa(), before);
    EXPECT_NE(cpu::active_isa(), cpu::Isa::amx);
    EXPECT_THROW(cpu::row_kernels(DType::q4_0, cpu::Isa::amx), Error);
    std::printf("[amx] not usable here: CPUID tile %d int8 %d, XCR0 %#llx, tile data permitted %d\n",
                cpu::amx_support().cpu_tile, cpu::amx_support().cpu_int8,
                static_cast<unsigned long long>(cpu::amx_support().xcr0), cpu::amx_support().tile_data_permitted);
    return;
  }
  for (DType t : {DType::q4_0, DType::q4_1, DType::q8_0, DType::q6_k}) {
    EXPECT_EQ(&cpu::row_kernels(t, cpu::Isa::amx), &cpu::row_kernels(t, cpu::Isa::avx512_vnni));
  }
}

struct Shape3 {
  int64_t m, n, k, x_pad;
};

// Rows of M (partial panels of 16, several mm tiles of 64), N (partial tiles of 16) and K
// (odd and even block counts); x rows padded; the K of the default model.
constexpr Shape3 kShapes[] = {{9, 16, 32, 0},  {17, 33, 96, 3},  {64, 16, 1056, 0},  {70, 45, 576, 5},
                              {130, 7, 64, 0}, {33, 130, 160, 0}, {16, 17, 1536, 1}};

// Weights of `type`: f32 source uniform in [-1, 1] (every fourth row with 100 times the
// magnitude), quantized; `values` the dequantized weights, `offsets` each value's block min.
std::vector<uint8_t> weights(DType type, int64_t n, int64_t k, std::mt19937_64& rng, std::vector<double>& values,
                             std::vector<double>& offsets) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> source(static_cast<size_t>(n * k));
  for (size_t i = 0; i < source.size(); ++i) source[i] = u(rng) * ((i / static_cast<size_t>(k)) % 4 == 3 ? 100.0f : 1.0f);
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * dtype_bytes(type, k));
  ops::quantize(type, source.data(), n * k, bytes.data());
  std::vector<float> decoded(source.size());
  ops::dequantize(type, bytes.data(), n * k, decoded.data());
  values.assign(decoded.begin(), decoded.end());
  offsets.assign(values.size(), 0.0);
  if (type == DType::q4_1) {
    for (size_t b = 0; b < values.size() / 32; ++b) {
      uint16_t h;
      std::memcpy(&h, bytes.data() + b * 20 + 2, 2);
      std::fill_n(offsets.begin() + static_cast<ptrdiff_t>(b * 32), 32, static_cast<double>(f16_to_f32(h)));
    }
  }
  return bytes;
}

// x for a product test: uniform, every fifth row scaled by 1e-3 and one value of row 1 by 1e4
// (blocks of very different magnitudes in one row); the x_pad floats past each row NaN.
std::vector<float> product_x(const Shape3& s, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t x_stride = s.k + s.x_pad;
  std::vector<float> x(static_cast<size_t>(s.m * x_stride), NAN);
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.k; ++j) x[i * x_stride + j] = u(rng) * (i % 5 == 4 ? 1e-3f : 1.0f);
  }
  x[x_stride + 5] = 1e4f;
  return x;
}

// out = x · wᵀ through ops::matmul on the path in use (m > 8 rows: mm_<t>_f32).
std::vector<float> product(Backend& backend, GraphExecutor& executor, DType t, const Shape3& s,
                           const std::vector<float>& x, const std::vector<uint8_t>& wq) {
  const int64_t x_stride = s.k + s.x_pad;
  TensorView wide = backend.alloc_tensor(DType::f32, {s.m, x_stride});
  wide.view.write(x.data(), x.size() * sizeof(float));
  TensorView xt(wide.view, DType::f32, Shape{s.m, s.k}, wide.row_stride);
  TensorView wt = backend.alloc_tensor(t, {s.n, s.k});
  wt.view.write(wq.data(), wq.size());
  TensorView out = testing::poisoned_tensor(backend, {s.m, s.n});
  GraphSession session = executor.begin();
  ops::matmul(session, xt, wt, out);
  session.finish();
  return out.view.read_as<float>();
}

// The AMX products on the path in use (the model of the tiles, or the tiles) against
// float64. Tolerance per element: f32 rounding of the per-block sums (4 u sqrt(K) times the
// magnitude bracket of tests/ops/cases_matmul.cpp) plus x's rounding, half a step
// (amax / 32767) per value of each 32-value block.
void expect_amx_products_match_float64() {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(cat("seed ", seed));
  std::mt19937_64 rng(seed);
  auto backend = testing::cpu_backend();
  GraphExecutor executor(backend);
  for (DType t : {DType::q4_0, DType::q4_1, DType::q8_0}) {
    for (const Shape3& s : kShapes) {
      SCOPED_TRACE(cat(dtype_name(t), " m ", s.m, " n ", s.n, " k ", s.k));
      std::vector<double> w_values, offsets;
      const std::vector<uint8_t> wq = weights(t, s.n, s.k, rng, w_values, offsets);
      const int64_t x_stride = s.k + s.x_pad;
      const std::vector<float> x = product_x(s, rng);
      const std::vector<float> got = product(*backend, executor, t, s, x, wq);
      for (int64_t i = 0; i < s.m; ++i) {
        for (int64_t j = 0; j < s.n; ++j) {
          double ref = 0, scaled = 0, offset = 0, squares = 0, quantization = 0;
          for (int64_t b = 0; b < s.k; b += 32) {
            double amax = 0, weight = 0;
            for (int64_t c = b; c < b + 32; ++c) {
              const double xv = x[i * x_stride + c];
              const size_t wi = static_cast<size_t>(j * s.k + c);
              scaled += xv * (w_values[wi] - offsets[wi]);
              offset += xv * offsets[wi];
              const double term = std::fabs(xv) * (std::fabs(w_values[wi]) + 2 * std::fabs(offsets[wi]));
              squares += term * term;
              amax = std::max(amax, std::fabs(xv));
              weight += std::fabs(w_values[wi] - offsets[wi]);
            }
            quantization += amax / 32767.0 / 2.0 * weight;
          }
          ref = scaled + offset;
          const double tol = 4 * 0x1p-24 * std::sqrt(static_cast<double>(s.k)) *
                                 (std::sqrt(squares) + std::fabs(scaled) + std::fabs(offset)) +
                             1.01 * quantization;
          ASSERT_NEAR(got[static_cast<size_t>(i * s.n + j)], ref, tol) << "out[" << i << ", " << j << "]";
        }
      }
    }
  }
}

TEST(AmxTiles, EmulatedProductsMatchFloat64) {
  AmxEmulation emulation;
  expect_amx_products_match_float64();
}

// The tile instructions themselves; needs a CPU with AMX.
TEST(AmxTiles, HardwareProductsMatchFloat64) {
  if (!cpu::isa_supported(cpu::Isa::amx)) GTEST_SKIP() << why_no_amx();
  IsaGuard guard;
  cpu::set_active_isa(cpu::Isa::amx);
  expect_amx_products_match_float64();
}

// The tiles give the model's results bit for bit (the model is what the other tests check on
// machines without AMX), and under a cap of avx512_vnni mm stays off the tiles (its results
// are the integer GEMM's, which rounds x per 256 values, not per 32). Needs a CPU with AMX.
TEST(AmxTiles, HardwareMatchesTheModelBitForBitAndCapsTurnItOff) {
  if (!cpu::isa_supported(cpu::Isa::amx)) GTEST_SKIP() << why_no_amx();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(cat("seed ", seed));
  std::mt19937_64 rng(seed);
  auto backend = testing::cpu_backend();
  GraphExecutor executor(backend);
  IsaGuard guard;
  for (DType t : {DType::q4_0, DType::q4_1, DType::q8_0}) {
    for (const Shape3& s : kShapes) {
      SCOPED_TRACE(cat(dtype_name(t), " m ", s.m, " n ", s.n, " k ", s.k));
      std::vector<double> w_values, offsets;
      const std::vector<uint8_t> wq = weights(t, s.n, s.k, rng, w_values, offsets);
      const std::vector<float> x = product_x(s, rng);
      cpu::set_active_isa(cpu::Isa::amx);
      const std::vector<float> tiles = product(*backend, executor, t, s, x, wq);
      std::vector<float> model;
      {
        AmxEmulation emulation;
        model = product(*backend, executor, t, s, x, wq);
      }
      ASSERT_EQ(tiles.size(), model.size());
      EXPECT_EQ(std::memcmp(tiles.data(), model.data(), tiles.size() * sizeof(float)), 0);
      cpu::set_active_isa(cpu::Isa::avx512_vnni);
      const std::vector<float> capped = product(*backend, executor, t, s, x, wq);
      EXPECT_NE(std::memcmp(tiles.data(), capped.data(), tiles.size() * sizeof(float)), 0)
          << "mm under ONEPASS_CPU_ISA=avx512_vnni gave the tiles' results";
    }
  }
}

// A non-finite value of x makes its row's outputs NaN or infinite, and only its row's (q4_0:
// through the block's step; q4_1: its step and its sum).
TEST(AmxTiles, NonFiniteXStaysInItsRow) {
  auto backend = testing::cpu_backend();
  GraphExecutor executor(backend);
  AmxEmulation emulation;
  const int64_t m = 20, n = 18, k = 64;
  for (DType t : {DType::q4_0, DType::q4_1}) {
    SCOPED_TRACE(dtype_name(t));
    std::mt19937_64 rng(7);
    std::vector<double> w_values, offsets;
    const std::vector<uint8_t> wq = weights(t, n, k, rng, w_values, offsets);
    std::vector<float> x = testing::random_floats(static_cast<size_t>(m * k), 3);
    x[3 * k + 40] = INFINITY;
    TensorView xt = backend->alloc_tensor(DType::f32, {m, k});
    xt.view.write(x.data(), x.size() * sizeof(float));
    TensorView wt = backend->alloc_tensor(t, {n, k});
    wt.view.write(wq.data(), wq.size());
    TensorView out = testing::poisoned_tensor(*backend, {m, n});
    GraphSession session = executor.begin();
    ops::matmul(session, xt, wt, out);
    session.finish();
    const std::vector<float> got = out.view.read_as<float>();
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const float v = got[static_cast<size_t>(i * n + j)];
        EXPECT_EQ(std::isfinite(v), i != 3) << "out[" << i << ", " << j << "] = " << v;
      }
    }
  }
}

// Log-softmax of one row, in double.
std::vector<double> log_softmax(std::span<const float> row) {
  double max = -INFINITY;
  for (float v : row) max = std::max(max, static_cast<double>(v));
  double sum = 0;
  for (float v : row) sum += std::exp(static_cast<double>(v) - max);
  std::vector<double> out(row.size());
  for (size_t i = 0; i < row.size(); ++i) out[i] = static_cast<double>(row[i]) - max - std::log(sum);
  return out;
}

// The default model (q4_1 matrices, a q8_0 LM head) over a prompt of English text in one
// prefill, so that every product is a matrix-matrix one: the next-token distributions with
// the AMX products (x in 16-bit integers per 32 values; the tiles where this CPU has them,
// else their model) against those with the vector set's products (within mean KL 3e-6 of a
// float64 forward pass): mean KL at most 1e-4.
TEST(AmxTiles, DefaultModelLogitsStayWithinTheKlBound) {
  const char* path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not installed (scripts/setup)";
  auto src = model::open_model(path);
  const auto vocab = static_cast<size_t>(src->config().vocab_size);
  model::Tokenizer tok(*src->tokenizer_data());
  const std::vector<int32_t> tokens = tok.encode(
      "The river rises in the hills to the north of the town and flows south for about forty miles before it "
      "reaches the sea. For most of the year it is slow and shallow, and children wade across it in the summer "
      "to reach the woods on the far bank. In the spring the water rises quickly.");
  ASSERT_GT(tokens.size(), static_cast<size_t>(ops::kMatmulMvMaxRows));
  auto backend = testing::cpu_backend(Options::defaults());
  auto run = [&] {
    model::LlamaModel model(backend, *src, model::LoadOptions{.context = 64});
    const std::span<const float> logits = model.evaluate(tokens);
    return std::vector<float>(logits.begin(), logits.end());
  };
  IsaGuard guard;
  const bool tiles = cpu::isa_supported(cpu::Isa::amx);
  const cpu::Isa vector = cpu::vector_isa(cpu::active_isa());
  cpu::set_active_isa(vector);
  const std::vector<float> base = run();
  std::vector<float> amx;
  if (tiles) {
    cpu::set_active_isa(cpu::Isa::amx);
    amx = run();
  } else {
    AmxEmulation emulation;
    amx = run();
  }
  ASSERT_EQ(base.size(), tokens.size() * vocab);
  ASSERT_EQ(amx.size(), base.size());
  double kl_sum = 0, kl_max = 0;
  size_t agree = 0;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const auto p = log_softmax(std::span<const float>(base).subspan(t * vocab, vocab));
    const auto q = log_softmax(std::span<const float>(amx).subspan(t * vocab, vocab));
    double kl = 0;
    for (size_t i = 0; i < vocab; ++i) kl += std::exp(p[i]) * (p[i] - q[i]);
    kl_sum += kl;
    kl_max = std::max(kl_max, kl);
    agree += std::max_element(p.begin(), p.end()) == p.begin() + (std::max_element(q.begin(), q.end()) - q.begin());
  }
  const double mean_kl = kl_sum / static_cast<double>(tokens.size());
  std::printf("[amx] default model, %zu positions, AMX %s vs %s: mean KL %.3g, max KL %.3g, top-1 agreement %zu / %zu\n",
              tokens.size(), tiles ? "tiles" : "model of the tiles", cpu::isa_name(vector), mean_kl, kl_max,
              agree, tokens.size());
  EXPECT_LE(mean_kl, 1e-4);
  EXPECT_GT(mean_kl, 0.0) << "the AMX path did not run";
}

}  // namespace
}  // namespace onepass
