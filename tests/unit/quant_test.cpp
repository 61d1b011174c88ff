// Quantized formats: dequantize checked bit for bit against gguf-py (an independent
// implementation of the GGUF formats), quantizers against gguf-py where it has them and
// against stated error bounds, MLX affine packing, and the CPU row kernels (portable and
// AVX2) against float64.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "onepass/ops/ops.h"
#include "onepass/exec/captured_graph.h"
#include "onepass/exec/graph_session.h"
#include "onepass/ops/matmul.h"
#include "onepass/ops/matmul_id.h"
#include "onepass/ops/quant.h"
#include "support/testing.h"
// White-box: the CPU row kernels, to test the portable path on machines with AVX2 too.
#include "../../src/backends/cpu/kernels/matmul/rows.h"
#include "../../src/backends/cpu/kernels/quant_blocks.h"

namespace onepass {
namespace {

constexpr DType kWeightTypes[] = {DType::f32,  DType::f16,  DType::bf16, DType::q4_0, DType::q4_1,
                                  DType::q8_0, DType::q4_k, DType::q5_k, DType::q6_k, DType::q5_0,
                                  DType::q5_1, DType::q2_k, DType::q3_k, DType::iq4_nl, DType::iq4_xs};

// --- gguf-py through tests/tools/gguf_quants.py ------------------------------------------

// Beside this source when __FILE__ is absolute, else from the repository root (where ctest
// runs the suites).
std::string tool_path() {
  const auto beside =
      std::filesystem::path(__FILE__).parent_path().parent_path() / "tools" / "gguf_quants.py";
  return std::filesystem::exists(beside) ? beside.string() : "tests/tools/gguf_quants.py";
}

int run_command(const std::string& command, std::string* output = nullptr) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  std::string text;
  char chunk[256];
  while (size_t got = std::fread(chunk, 1, sizeof(chunk), pipe)) text.append(chunk, got);
  const int status = pclose(pipe);
  if (output) *output = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool gguf_available() {
  static const bool available = std::filesystem::exists(tool_path()) &&
                                run_command("python3 '" + tool_path() + "' check") == 0;
  return available;
}

class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "onepass_quant_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw Error("test", "mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

void write_file(const std::string& path, const void* data, size_t bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs the tool in `mode` on `input` bytes; returns its output bytes.
std::vector<uint8_t> gguf_tool(const std::string& mode, DType type,
                               const std::vector<uint8_t>& input) {
  TempDir dir;
  write_file(dir.file("in"), input.data(), input.size());
  std::string log;
  const int rc = run_command(cat("python3 '", tool_path(), "' ", mode, " ", dtype_name(type), " '",
                                 dir.file("in"), "' '", dir.file("out"), "'"),
                             &log);
  if (rc != 0) throw Error("test", cat("gguf_quants.py ", mode, " failed (", rc, "): ", log));
  return read_file(dir.file("out"));
}

// --- data ----------------------------------------------------------------------------------

// Any finite f16 bit pattern (subnormals and large values included).
uint16_t random_finite_f16(std::mt19937_64& rng) {
  for (;;) {
    const auto bits = static_cast<uint16_t>(rng());
    if (((bits >> 10) & 0x1f) != 0x1f) return bits;
  }
}

// Offsets of the f16 fields of one block.
std::vector<size_t> half_fields(DType t) {
  switch (t) {
    case DType::q4_0:
    case DType::q8_0:
    case DType::q5_0:
    case DType::iq4_nl:
    case DType::iq4_xs:
      return {0};
    case DType::q4_1:
    case DType::q4_k:
    case DType::q5_k:
    case DType::q5_1:
      return {0, 2};
    case DType::q6_k:
      return {208};
    case DType::q2_k:
      return {80, 82};
    case DType::q3_k:
      return {108};
    default:
      return {};
  }
}

// Blocks of random bytes with finite f16 scales: every bit pattern of the quant fields.
std::vector<uint8_t> random_blocks(DType t, int64_t values, std::mt19937_64& rng) {
  std::vector<uint8_t> bytes(dtype_bytes(t, values));
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  if (t == DType::f16 || t == DType::bf16) {  // no NaNs: their payloads are not the point
    for (size_t i = 0; i < bytes.size(); i += 2) {
      const uint16_t v =
          t == DType::f16 ? random_finite_f16(rng) : static_cast<uint16_t>(rng() & 0x7f7f);
      std::memcpy(&bytes[i], &v, 2);
    }
    return bytes;
  }
  for (size_t b = 0; b < bytes.size(); b += dtype_size(t)) {
    for (size_t off : half_fields(t)) {
      const uint16_t h = random_finite_f16(rng);
      std::memcpy(&bytes[b + off], &h, 2);
    }
  }
  return bytes;
}

std::vector<float> uniform(size_t n, std::mt19937_64& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<float> normal(size_t n, std::mt19937_64& rng, float sigma) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<uint8_t> quantized(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> bytes(dtype_bytes(t, static_cast<int64_t>(x.size())));
  ops::quantize(t, x.data(), static_cast<int64_t>(x.size()), bytes.data());
  return bytes;
}

// The additive term of each value's block (q4_1, q5_1: m; q4_k, q5_k, q2_k: -dmin * min),
// 0 for the other formats. Kernels may sum scale * q and offset parts separately, so their
// rounding error scales with |scale * q| + |offset| <= |w| + 2|offset|.
std::vector<float> block_offsets(DType t, const std::vector<uint8_t>& bytes) {
  const int64_t blocks = static_cast<int64_t>(bytes.size() / dtype_size(t));
  const int64_t elems = dtype_block_elems(t);
  std::vector<float> out(static_cast<size_t>(blocks * elems), 0.0f);
  auto half_at = [](const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return f16_to_f32(h);
  };
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = bytes.data() + b * static_cast<int64_t>(dtype_size(t));
    float* o = out.data() + b * elems;
    if (t == DType::q4_1 || t == DType::q5_1) {
      std::fill_n(o, 32, half_at(block + 2));
    } else if (t == DType::q4_k || t == DType::q5_k) {
      for (int i = 0; i < 8; ++i) {
        int sc = 0, mn = 0;
        ops::kquant_scale_min(block + 4, i, sc, mn);
        std::fill_n(o + 32 * i, 32, -(half_at(block + 2) * static_cast<float>(mn)));
      }
    } else if (t == DType::q2_k) {
      for (int i = 0; i < 16; ++i) {
        std::fill_n(o + 16 * i, 16, -(half_at(block + 82) * static_cast<float>(block[i] >> 4)));
      }
    }
  }
  return out;
}

std::vector<float> dequantized(DType t, const std::vector<uint8_t>& bytes) {
  const int64_t n = static_cast<int64_t>(bytes.size() / dtype_size(t)) * dtype_block_elems(t);
  std::vector<float> out(static_cast<size_t>(n));
  ops::dequantize(t, bytes.data(), n, out.data());
  return out;
}

// --- dequantize vs gguf-py ----------------------------------------------------------------

TEST(Quant, BlockStructsMatchDTypeTable) {
  EXPECT_EQ(sizeof(ops::BlockQ4_0), dtype_size(DType::q4_0));
  EXPECT_EQ(sizeof(ops::BlockQ4_1), dtype_size(DType::q4_1));
  EXPECT_EQ(sizeof(ops::BlockQ8_0), dtype_size(DType::q8_0));
  EXPECT_EQ(sizeof(ops::BlockQ4_K), dtype_size(DType::q4_k));
  EXPECT_EQ(sizeof(ops::BlockQ5_K), dtype_size(DType::q5_k));
  EXPECT_EQ(sizeof(ops::BlockQ6_K), dtype_size(DType::q6_k));
  EXPECT_EQ(sizeof(ops::BlockQ5_0), dtype_size(DType::q5_0));
  EXPECT_EQ(sizeof(ops::BlockQ5_1), dtype_size(DType::q5_1));
  EXPECT_EQ(sizeof(ops::BlockIQ4_NL), dtype_size(DType::iq4_nl));
  EXPECT_EQ(sizeof(ops::BlockQ2_K), dtype_size(DType::q2_k));
  EXPECT_EQ(sizeof(ops::BlockQ3_K), dtype_size(DType::q3_k));
  EXPECT_EQ(sizeof(ops::BlockIQ4_XS), dtype_size(DType::iq4_xs));
  EXPECT_EQ(offsetof(ops::BlockQ6_K, d), 208u);
  EXPECT_EQ(offsetof(ops::BlockQ5_K, qs), 48u);
}

TEST(Quant, KQuantScalePackingRoundTrips) {
  std::mt19937_64 rng(testing::fresh_seed());
  for (int trial = 0; trial < 200; ++trial) {
    int sc[8], mn[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = static_cast<int>(rng() % 64);
      mn[j] = static_cast<int>(rng() % 64);
    }
    uint8_t packed[12];
    ops::kquant_pack_scales(sc, mn, packed);
    for (int j = 0; j < 8; ++j) {
      int s = -1, m = -1;
      ops::kquant_scale_min(packed, j, s, m);
      ASSERT_EQ(s, sc[j]) << "sub-block " << j;
      ASSERT_EQ(m, mn[j]) << "sub-block " << j;
    }
  }
}

TEST(Quant, DequantizeMatchesGgufPyBitForBit) {
  if (!gguf_available()) GTEST_SKIP() << "python3 with gguf-py (pip install gguf numpy) not found";
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(cat("seed ", seed));
  std::mt19937_64 rng(seed);
  for (DType t : kWeightTypes) {
    SCOPED_TRACE(dtype_name(t));
    // Random bit patterns, then quantized data of realistic magnitudes.
    std::vector<uint8_t> bytes = random_blocks(t, 512 * 256, rng);
    const std::vector<uint8_t> real = quantized(t, normal(64 * 256, rng, 0.05f));
    bytes.insert(bytes.end(), real.begin(), real.end());
    const std::vector<float> ours = dequantized(t, bytes);
    const std::vector<uint8_t> theirs = gguf_tool("dequantize", t, bytes);
    ASSERT_EQ(theirs.size(), ours.size() * 4);
    size_t mismatches = 0;
    for (size_t i = 0; i < ours.size(); ++i) {
      float v;
      std::memcpy(&v, &theirs[i * 4], 4);
      if (std::memcmp(&v, &ours[i], 4) != 0 && mismatches++ < 5) {
        ADD_FAILURE() << "value " << i << " (block " << i / dtype_block_elems(t) << "): ours "
                      << ours[i] << ", gguf-py " << v;
      }
    }
    EXPECT_EQ(mismatches, 0u);
  }
}

TEST(Quant, QuantizeMatchesGgufPyWhereItQuantizes) {
  if (!gguf_available()) GTEST_SKIP() << "python3 with gguf-py (pip install gguf numpy) not found";
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(cat("seed ", seed));
  std::mt19937_64 rng(seed);
  // Blocks of varied magnitude, a zero block and a constant block.
  std::vector<float> x = uniform(256 * 64, rng);
  for (size_t b = 0; b < x.size() / 32; ++b) {
    const float scale = std::ldexp(1.0f, static_cast<int>(rng() % 20) - 10);
    for (size_t j = 0; j < 32; ++j) x[b * 32 + j] *= scale;
  }
  std::fill(x.begin(), x.begin() + 32, 0.0f);
  std::fill(x.begin() + 32, x.begin() + 64, 0.375f);
  for (DType t : {DType::f16, DType::bf16, DType::q4_0, DType::q4_1, DType::q8_0, DType::q5_0, DType::q5_1}) {
    SCOPED_TRACE(dtype_name(t));
    const std::vector<uint8_t> ours = quantized(t, x);
    std::vector<uint8_t> input(x.size() * 4);
    std::memcpy(input.data(), x.data(), input.size());
    const std::vector<uint8_t> theirs = gguf_tool("quantize", t, input);
    ASSERT_EQ(theirs.size(), ours.size());
    size_t first = ours.size();
    for (size_t i = 0; i < ours.size() && first == ours.size(); ++i) {
      if (ours[i] != theirs[i]) first = i;
    }
    EXPECT_EQ(first, ours.size()) << "first differing byte " << first << " in block "
                                  << first / dtype_size(t);
  }
}

// --- quantize -> dequantize error bounds --------------------------------------------------

// ggml's 32-value quantizers round against the f32 scale and store it as f16, so each
// bound is (rounding error against the f32 scale) + (largest |q|) * |d - f16(d)| plus a
// few f32 ulps of the value.
TEST(Quant, RoundTripQ8_0WithinHalfAStep) {
  std::mt19937_64 rng(testing::fresh_seed());
  const std::vector<float> x = normal(32 * 512, rng, 1.0f);
  const std::vector<float> y = dequantized(DType::q8_0, quantized(DType::q8_0, x));
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const double d = amax / 127.0f;
    const double d16 = f16_to_f32(f32_to_f16(static_cast<float>(d)));
    for (size_t j = 0; j < 32; ++j) {
      const size_t i = b * 32 + j;
      // |x - d q| <= d / 2; the stored scale is off by |d - d16| for each of |q| <= 127.
      const double bound = 0.5 * d + 127 * std::fabs(d - d16) + 4e-7 * std::fabs(x[i]);
      ASSERT_LE(std::fabs(x[i] - y[i]), bound) << "value " << i;
    }
  }
}

TEST(Quant, RoundTripQ4_0WithinHalfAStepExceptTheClippedEnd) {
  std::mt19937_64 rng(testing::fresh_seed());
  const std::vector<float> x = normal(32 * 512, rng, 1.0f);
  const std::vector<float> y = dequantized(DType::q4_0, quantized(DType::q4_0, x));
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0, vmax = 0;
    for (size_t j = 0; j < 32; ++j) {
      if (std::fabs(x[b * 32 + j]) > amax) {
        amax = std::fabs(x[b * 32 + j]);
        vmax = x[b * 32 + j];
      }
    }
    // d = vmax / -8 maps vmax to q = 0; values on the other side reach q = 16, which is
    // clipped to 15: their error is (v - 7) steps, at most one step.
    const double d = vmax / -8.0f;
    const double d16 = f16_to_f32(f32_to_f16(static_cast<float>(d)));
    for (size_t j = 0; j < 32; ++j) {
      const size_t i = b * 32 + j;
      const double steps = x[i] / d;  // in [-8, 8]
      const double rounding = steps > 7.5 ? (steps - 7.0) : 0.5;
      const double bound =
          rounding * std::fabs(d) + 8 * std::fabs(d - d16) + 4e-7 * std::fabs(x[i]);
      ASSERT_LE(std::fabs(x[i] - y[i]), bound) << "value " << i << " (" << steps << " steps)";
    }
  }
}

TEST(Quant, RoundTripQ4_1WithinHalfAStep) {
  std::mt19937_64 rng(testing::fresh_seed());
  const std::vector<float> x = uniform(32 * 512, rng, -3.0f, 1.0f);
  const std::vector<float> y = dequantized(DType::q4_1, quantized(DType::q4_1, x));
  for (size_t b = 0; b < x.size() / 32; ++b) {
    const auto [lo, hi] = std::minmax_element(x.begin() + b * 32, x.begin() + b * 32 + 32);
    const double d = (*hi - *lo) / 15.0f;
    const double d16 = f16_to_f32(f32_to_f16(static_cast<float>(d)));
    const double m16 = f16_to_f32(f32_to_f16(*lo));
    for (size_t j = 0; j < 32; ++j) {
      const size_t i = b * 32 + j;
      const double bound = 0.5 * d * (1 + 1e-6) + 15 * std::fabs(d - d16) + std::fabs(*lo - m16) +
                           4e-7 * (std::fabs(x[i]) + std::fabs(*lo));
      ASSERT_LE(std::fabs(x[i] - y[i]), bound) << "value " << i;
    }
  }
}

// k-quants: a uniform quantizer with step h has error uniformly spread over [-h/2, h/2]
// for data that is smooth at the scale of a step, so an RMS of h / sqrt(12). Per
// sub-block h = range / (levels - 1): q2_k / q4_k / q5_k cover [min(0, lo), hi] with
// 3 / 15 / 31 steps, q6_k covers [-amax, amax] with 63 steps and q3_k with 8 (its largest
// value maps to -4); the iq4 grid spans [-amax, amax] in 15 uneven steps, 16 on average.
// The quantizer refits scale and min by least squares (never worse than plain min/max
// rounding), then rounds them to 4, 6 or 8 bits relative to the super-block's largest,
// which moves a step by <= 1/126 of the largest and the offset by <= 1/126 of the largest
// min (1/30 for q2_k's 4 bits). We allow 15% over the uniform-noise RMS for that, and check
// each super-block as well as the whole tensor.
double ideal_rms(DType t, const float* x, int64_t n) {
  const bool symmetric = t == DType::q6_k || t == DType::q3_k || t == DType::iq4_nl || t == DType::iq4_xs;
  const int sub = t == DType::q6_k || t == DType::q2_k || t == DType::q3_k ? 16 : 32;
  const double levels = t == DType::q2_k   ? 3
                        : t == DType::q3_k ? 8
                        : t == DType::q4_k ? 15
                        : t == DType::q5_k ? 31
                        : t == DType::q6_k ? 63
                                           : 16;
  double sum = 0;
  for (int64_t s = 0; s < n / sub; ++s) {
    const float* v = x + s * sub;
    float lo = 0, hi = 0, amax = 0;
    for (int j = 0; j < sub; ++j) {
      lo = std::min(lo, v[j]);
      hi = std::max(hi, v[j]);
      amax = std::max(amax, std::fabs(v[j]));
    }
    const double range = symmetric ? 2.0 * amax : hi - lo;
    const double h = range / levels;
    sum += h * h / 12.0;
  }
  return std::sqrt(sum / static_cast<double>(n / sub));
}

double rms_error(const float* x, const float* y, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i)
    sum += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
  return std::sqrt(sum / static_cast<double>(n));
}

TEST(Quant, RoundTripKQuantsWithinUniformNoiseRms) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(cat("seed ", seed));
  std::mt19937_64 rng(seed);
  for (DType t : {DType::q4_k, DType::q5_k, DType::q6_k, DType::q2_k, DType::q3_k, DType::iq4_nl,
                  DType::iq4_xs}) {
    for (int data = 0; data < 3; ++data) {
      SCOPED_TRACE(cat(dtype_name(t), data == 0   ? " uniform"
                                      : data == 1 ? " normal"
                                                  : " positive"));
      const std::vector<float> x = data == 0   ? uniform(256 * 256, rng)
                                   : data == 1 ? normal(256 * 256, rng, 0.02f)
                                               : uniform(256 * 256, rng, 0.5f, 2.0f);
      const std::vector<float> y = dequantized(t, quantized(t, x));
      const auto n = static_cast<int64_t>(x.size());
      const double total = rms_error(x.data(), y.data(), n);
      const double ideal = ideal_rms(t, x.data(), n);
      EXPECT_LE(total, 1.15 * ideal)
          << "tensor RMS error " << total << " vs uniform-noise " << ideal;
      for (int64_t b = 0; b < n / 256; ++b) {
        const double block = rms_error(x.data() + b * 256, y.data() + b * 256, 256);
        const double block_ideal = ideal_rms(t, x.data() + b * 256, 256);
        ASSERT_LE(block, 1.5 * block_ideal) << "super-block " << b;
      }
    }
  }
}

TEST(Quant, FloatTypesRoundToNearest) {
  std::mt19937_64 rng(testing::fresh_seed());
  const std::vector<float> x = normal(1000, rng, 10.0f);
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    const std::vector<float> y = dequantized(t, quantized(t, x));
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(y[i], testing::round_to(t, x[i])) << dtype_name(t);
  }
}

TEST(Quant, ErrorsNameTheProblem) {
  std::vector<float> x(64, 1.0f);
  std::vector<uint8_t> out(4096);
  try {
    ops::quantize(DType::q4_0, x.data(), 33, out.data());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "quant");
    EXPECT_NE(std::string(e.what()).find("blocks of 32"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::dequantize(DType::q4_k, out.data(), 128, x.data()), Error);
  EXPECT_THROW(ops::quantize(DType::i32, x.data(), 4, out.data()), Error);
  EXPECT_THROW(ops::dequantize(DType::u8, out.data(), 4, x.data()), Error);
  AffineFormat bad;
  bad.group_size = 48;
  std::vector<uint32_t> packed(8);
  std::vector<uint16_t> params(2);
  EXPECT_THROW(
      ops::affine_quantize(bad, x.data(), 1, 48, packed.data(), params.data(), params.data()),
      Error);
  AffineFormat good;
  good.group_size = 32;
  EXPECT_THROW(
      ops::affine_quantize(good, x.data(), 1, 48, packed.data(), params.data(), params.data()),
      Error);
}

// --- MLX affine ----------------------------------------------------------------------------

TEST(Affine, PacksLowBitsFirst) {
  AffineFormat f4;
  f4.bits = 4;
  f4.group_size = 32;
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j % 16);  // scale 1, bias 0: q = j % 16
  std::vector<uint32_t> packed(4);
  std::vector<uint16_t> scales(1), biases(1);
  ops::affine_quantize(f4, x.data(), 1, 32, packed.data(), scales.data(), biases.data());
  EXPECT_EQ(packed[0], 0x76543210u);
  EXPECT_EQ(packed[1], 0xFEDCBA98u);
  EXPECT_EQ(f16_to_f32(scales[0]), 1.0f);
  EXPECT_EQ(f16_to_f32(biases[0]), 0.0f);

  AffineFormat f8;
  f8.bits = 8;
  f8.group_size = 32;
  f8.scale_type = DType::bf16;
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j == 31 ? 255 : j);  // q = x
  packed.assign(8, 0);
  ops::affine_quantize(f8, x.data(), 1, 32, packed.data(), scales.data(), biases.data());
  EXPECT_EQ(packed[0], 0x03020100u);
  EXPECT_EQ(packed[7], 0xFF1E1D1Cu);
  std::vector<float> y(32);
  ops::affine_dequantize(f8, packed.data(), scales.data(), biases.data(), 1, 32, y.data());
  EXPECT_EQ(y, x);
}

TEST(Affine, RoundTripWithinHalfAStep) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(cat("seed ", seed));
  std::mt19937_64 rng(seed);
  for (uint32_t bits : {4u, 8u}) {
    for (uint32_t group : {32u, 64u, 128u}) {
      for (DType st : {DType::f16, DType::bf16}) {
        AffineFormat f;
        f.bits = bits;
        f.group_size = group;
        f.scale_type = st;
        SCOPED_TRACE(cat("bits ", bits, " group ", group, " ", dtype_name(st)));
        const int64_t rows = 7;
        const int64_t cols = 512;
        const std::vector<float> x = normal(static_cast<size_t>(rows * cols), rng, 0.1f);
        std::vector<uint32_t> packed(
            static_cast<size_t>(rows * ops::affine_words_per_row(f, cols)));
        std::vector<uint16_t> scales(static_cast<size_t>(rows * cols / group));
        std::vector<uint16_t> biases(scales.size());
        ops::affine_quantize(f, x.data(), rows, cols, packed.data(), scales.data(), biases.data());
        std::vector<float> y(x.size());
        ops::affine_dequantize(f, packed.data(), scales.data(), biases.data(), rows, cols,
                               y.data());
        const double levels = (1 << bits) - 1;
        for (int64_t g = 0; g < rows * cols / group; ++g) {
          const float* xg = x.data() + g * group;
          const auto [lo, hi] = std::minmax_element(xg, xg + group);
          const double scale = (*hi - *lo) / static_cast<float>(levels);
          const double s = testing::round_to(st, static_cast<float>(scale));
          const double b = testing::round_to(st, *lo);
          // Half a step of the stored scale, plus what rounding scale and bias to 16 bits
          // can leave uncovered at either end of the range.
          const double bound = 0.5 * s + levels * std::fabs(scale - s) + std::fabs(*lo - b) +
                               1e-6 * (std::fabs(*lo) + std::fabs(*hi));
          for (uint32_t j = 0; j < group; ++j) {
            const size_t i = static_cast<size_t>(g * group + j);
            ASSERT_LE(std::fabs(x[i] - y[i]), bound) << "value " << i;
          }
        }
      }
    }
  }
}

// --- CPU row kernels, portable and AVX2, against float64 -----------------------------------

double dot_tolerance(const float* x, const float* w, const float* offsets, int64_t k, double& ref);

// What rounding x to int16 per cpu::kXInt16Group values (XInt16) adds to |out - Σ x·w|:
// Σ_groups step/2 · Σ |w - o| with step = the group's largest |x| / 32767, where the
// additive terms o use exact sums of x; with null offsets (q2_k's mins go through the
// rounded integers too), Σ |w|.
double x_int16_rounding(const float* x, const float* w, const float* offsets, int64_t k) {
  double total = 0;
  for (int64_t g = 0; g < k; g += cpu::kXInt16Group) {
    double amax = 0, weight = 0;
    for (int64_t j = g; j < std::min(k, g + cpu::kXInt16Group); ++j) {
      amax = std::max(amax, static_cast<double>(std::fabs(x[j])));
      weight += std::fabs(static_cast<double>(w[j]) - (offsets != nullptr ? offsets[j] : 0.0));
    }
    total += amax / 32767.0 / 2.0 * weight;
  }
  return total;
}

TEST(CpuRowKernels, PortableAndSimdMatchFloat64) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(cat("seed ", seed));
  std::mt19937_64 rng(seed);
  std::vector<cpu::Isa> isas = {cpu::Isa::portable};
  for (cpu::Isa isa : {cpu::Isa::avx2, cpu::Isa::avx512, cpu::Isa::avx512_vnni}) {
    if (cpu::isa_supported(isa)) isas.push_back(isa);
  }
  const char* isa_names[] = {"portable", "avx2", "avx512", "avx512_vnni"};
  for (DType t : kWeightTypes) {
    const int64_t k = dtype_is_quantized(t) ? 768 : 333;
    const std::vector<float> source = uniform(static_cast<size_t>(k), rng);
    const std::vector<uint8_t> row =
        dtype_is_quantized(t) ? random_blocks(t, k, rng) : quantized(t, source);
    const std::vector<float> w = dequantized(t, row);
    const std::vector<float> offsets = block_offsets(t, row);
    const int64_t m = 11;  // more than one group of rows per decode on every path
    const int64_t x_stride = k + 3;
    const std::vector<float> x = uniform(static_cast<size_t>(m * x_stride), rng);
    for (cpu::Isa isa : isas) {
      SCOPED_TRACE(cat(dtype_name(t), " ", isa_names[static_cast<int>(isa)]));
      const cpu::RowKernels& kernels = cpu::row_kernels(t, isa);
      std::vector<float> decoded(static_cast<size_t>(k));
      kernels.decode(row.data(), k, decoded.data());
      for (int64_t j = 0; j < k; ++j) {
        // scale * q + offset may be fused into one rounding: within an ulp of its terms.
        ASSERT_NEAR(decoded[j], w[j], (std::fabs(w[j]) + 2 * std::fabs(offsets[j])) * 0x1p-23)
            << "value " << j;
      }
      for (int64_t rows = 1; rows <= m; ++rows) {
        std::vector<float> out(static_cast<size_t>(rows * 2), -1.0f);
        kernels.dot(row.data(), x.data(), x_stride, rows, k, out.data(), 2);
        for (int64_t i = 0; i < rows; ++i) {
          double scaled = 0, offset = 0, squares = 0;
          for (int64_t j = 0; j < k; ++j) {
            const double xv = x[i * x_stride + j];
            scaled += xv * (w[j] - offsets[j]);
            offset += xv * offsets[j];
            const double term = std::fabs(xv) * (std::fabs(w[j]) + 2 * std::fabs(offsets[j]));
            squares += term * term;
          }
          // The op cases' tolerance (tests/ops/cases_matmul.cpp explains it).
          const double atol = 4 * 0x1p-24 * std::sqrt(static_cast<double>(k)) *
                              (std::sqrt(squares) + std::fabs(scaled) + std::fabs(offset));
          ASSERT_NEAR(out[i * 2], scaled + offset, atol) << rows << " rows, row " << i;
          ASSERT_EQ(out[i * 2 + 1], -1.0f) << "wrote between output rows";
        }
        if (kernels.dot_int16 == nullptr) continue;
        // Whether the additive terms use x's exact block sums (or its rounded integers).
        const bool exact_sums = kernels.int16_block_sums;
        // The integer kernels, with x rounded to int16 per 256 values: each x off by at most
        // half a step (largest |x| of its group / 32767), and the f32 tolerance on top.
        const cpu::XInt16 xi =
            cpu::round_x_int16(x.data(), x_stride, rows, k, kernels.int16_block_sums, kernels.int16_order, isa);
        std::vector<float> out16(static_cast<size_t>(rows * 2), -1.0f);
        kernels.dot_int16(row.data(), xi, rows, out16.data(), 2);
        for (int64_t i = 0; i < rows; ++i) {
          double ref = 0;
          double atol = dot_tolerance(&x[i * x_stride], w.data(), offsets.data(), k, ref);
          atol += x_int16_rounding(&x[i * x_stride], w.data(), exact_sums ? offsets.data() : nullptr, k);
          ASSERT_NEAR(out16[i * 2], ref, atol) << "int16 x, " << rows << " rows, row " << i;
          ASSERT_EQ(out16[i * 2 + 1], -1.0f) << "wrote between output rows";
        }
        if (rows != 1 || kernels.dot_weight_rows_int16 == nullptr) continue;
        // Several weight rows at once (one row of x): 6 copies of the row, 3 bytes of gap
        // between them, through a pass of 4 rows and one of 2; each the same value, within
        // the tolerance of float64.
        const int64_t row_bytes = static_cast<int64_t>(row.size()) + 3;
        std::vector<uint8_t> copies(static_cast<size_t>(6 * row_bytes));
        for (int64_t r = 0; r < 6; ++r) std::copy(row.begin(), row.end(), copies.begin() + r * row_bytes);
        std::vector<float> rows_out(7, -1.0f);
        kernels.dot_weight_rows_int16(copies.data(), row_bytes, 6, xi, rows_out.data());
        double ref = 0;
        const double atol = dot_tolerance(x.data(), w.data(), offsets.data(), k, ref) +
                            x_int16_rounding(x.data(), w.data(), exact_sums ? offsets.data() : nullptr, k);
        for (int64_t r = 0; r < 6; ++r) {
          ASSERT_NEAR(rows_out[r], ref, atol) << "weight row " << r;
          ASSERT_EQ(rows_out[r], rows_out[0]) << "weight row " << r << " differs from row 0";
        }
        ASSERT_EQ(rows_out[6], -1.0f) << "wrote past the rows";
      }
    }
  }
}

// The 4- and 5-bit rows on x split into bytes (avx512_vnni with VBMI): one row of x against n
// weight rows, k with whole and partial quads of 4 blocks, groups of 256 values of very
// different sizes, both passes (4 rows, 1 row) and both prefetch distances; each row within
// the 16-bit x tolerance of float64, and the same bits whatever n and its place.
TEST(CpuRowKernels, SplitXMatchesFloat64) {
  if (!cpu::isa_supported(cpu::Isa::avx512_vnni)) GTEST_SKIP() << "no avx512_vnni";
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(cat("seed ", seed));
  std::mt19937_64 rng(seed);
  int tested = 0;
  for (DType t : {DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1}) {
    const cpu::RowKernels& kernels = cpu::row_kernels(t, cpu::Isa::avx512_vnni);
    if (kernels.dot_weight_rows_bytes == nullptr) continue;  // no VBMI
    for (int64_t k : {32, 64, 96, 128, 576, 1056, 2048 + 96, 8192}) {
      SCOPED_TRACE(cat(dtype_name(t), " k ", k));
      const int64_t n = 9;
      const std::vector<uint8_t> rows = random_blocks(t, n * k, rng);
      const std::vector<float> w = dequantized(t, rows);
      const std::vector<float> offsets = block_offsets(t, rows);
      std::vector<float> x = uniform(static_cast<size_t>(k), rng);
      for (int64_t j = 0; j < k; ++j) x[j] *= std::ldexp(1.0f, static_cast<int>(j / cpu::kXInt16Group % 5) * 7 - 14);
      const int64_t row_bytes = static_cast<int64_t>(rows.size()) / n;
      const cpu::XInt16Bytes xb = cpu::round_x_int16_bytes(x.data(), k, kernels.bytes_lane_sums);
      std::vector<float> out(static_cast<size_t>(n + 1), -1.0f);
      kernels.dot_weight_rows_bytes(rows.data(), row_bytes, n, xb, out.data());
      ASSERT_EQ(out[n], -1.0f) << "wrote past the rows";
      for (int64_t r = 0; r < n; ++r) {
        double ref = 0;
        double atol = dot_tolerance(x.data(), &w[r * k], &offsets[r * k], k, ref);
        atol += x_int16_rounding(x.data(), &w[r * k], &offsets[r * k], k);
        ASSERT_NEAR(out[r], ref, atol) << "row " << r;
        float alone = -1.0f;
        kernels.dot_weight_rows_bytes(rows.data() + r * row_bytes, row_bytes, 1, xb, &alone);
        ASSERT_EQ(alone, out[r]) << "row " << r << " alone";
      }
      // A non-finite x makes every product non-finite, as the f32 products are.
      x[k / 2] = INFINITY;
      const cpu::XInt16Bytes inf = cpu::round_x_int16_bytes(x.data(), k, kernels.bytes_lane_sums);
      kernels.dot_weight_rows_bytes(rows.data(), row_bytes, n, inf, out.data());
      for (int64_t r = 0; r < n; ++r) ASSERT_FALSE(std::isfinite(out[r])) << "row " << r;
      ++tested;
    }
  }
  if (tested == 0) GTEST_SKIP() << "no VBMI";
}

// The 16-bit x kernels for several weight rows at once (dot_weight_rows_int16, with one row
// of x) on every set that has them: k with partial groups of 256 values, groups of very
// different sizes, both passes (4 rows, 1 row) and both prefetch distances (rows of 8192
// values); each row within the 16-bit x tolerance of float64, and the same bits whatever n
// and its place.
TEST(CpuRowKernels, Int16WeightRowsMatchFloat64) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(cat("seed ", seed));
  std::mt19937_64 rng(seed);
  const char* isa_names[] = {"portable", "avx2", "avx512", "avx512_vnni"};
  int tested = 0;
  for (cpu::Isa isa : {cpu::Isa::avx2, cpu::Isa::avx512, cpu::Isa::avx512_vnni}) {
    if (!cpu::isa_supported(isa)) continue;
    for (DType t : kWeightTypes) {
      const cpu::RowKernels& kernels = cpu::row_kernels(t, isa);
      if (kernels.dot_weight_rows_int16 == nullptr) continue;
      const int64_t block = dtype_block_elems(t);
      for (int64_t k : {int64_t{32}, int64_t{96}, int64_t{256}, int64_t{576}, int64_t{1280}, int64_t{2048 + 96},
                        int64_t{8192}}) {
        if (k % block != 0) continue;
        SCOPED_TRACE(cat(dtype_name(t), " ", isa_names[static_cast<int>(isa)], " k ", k));
        const int64_t n = 9;
        const std::vector<uint8_t> rows = random_blocks(t, n * k, rng);
        const std::vector<float> w = dequantized(t, rows);
        const std::vector<float> offsets = block_offsets(t, rows);
        std::vector<float> x = uniform(static_cast<size_t>(k), rng);
        for (int64_t j = 0; j < k; ++j) x[j] *= std::ldexp(1.0f, static_cast<int>(j / cpu::kXInt16Group % 5) * 7 - 14);
        const int64_t row_bytes = static_cast<int64_t>(rows.size()) / n;
        const cpu::XInt16 xi = cpu::round_x_int16(x.data(), k, 1, k, kernels.int16_block_sums, kernels.int16_order, isa);
        std::vector<float> out(static_cast<size_t>(n + 1), -1.0f);
        kernels.dot_weight_rows_int16(rows.data(), row_bytes, n, xi, out.data());
        ASSERT_EQ(out[n], -1.0f) << "wrote past the rows";
        for (int64_t r = 0; r < n; ++r) {
          double ref = 0;
          double atol = dot_tolerance(x.data(), &w[r * k], &offsets[r * k], k, ref);
          // The additive terms use x's exact block sums, or (q2_k) its rounded integers.
          atol += x_int16_rounding(x.data(), &w[r * k], kernels.int16_block_sums ? &offsets[r * k] : nullptr, k);
          ASSERT_NEAR(out[r], ref, atol) << "row " << r;
          float alone = -1.0f;
          kernels.dot_weight_rows_int16(rows.data() + r * row_bytes, row_bytes, 1, xi, &alone);
          ASSERT_EQ(alone, out[r]) << "row " << r << " alone";
        }
        // A non-finite x makes every product non-finite, as the f32 products are.
        x[k / 2] = INFINITY;
        const cpu::XInt16 inf = cpu::round_x_int16(x.data(), k, 1, k, kernels.int16_block_sums, kernels.int16_order, isa);
        kernels.dot_weight_rows_int16(rows.data(), row_bytes, n, inf, out.data());
        for (int64_t r = 0; r < n; ++r) ASSERT_FALSE(std::isfinite(out[r])) << "row " << r;
        ++tested;
      }
    }
  }
  if (tested == 0) GTEST_SKIP() << "no set with 16-bit x kernels for several weight rows";
}

// The integer GEMM of the mm kernels (avx512_vnni, avx2): the 16-bit row decoders against the
// dequantized rows; packed tiles of 16 and of 5 rows (the rest zero, outputs past them left
// alone) and 19 rows of x (passes of 8 and 3 rows on avx512_vnni, of 3 and 1 on avx2), each element within the
// 16-bit x tolerance of float64 and the same bits whatever the tile's rows, the row's place
// in it, and the rows of x beside it. q2_k and q6_k decode to half blocks (scales per 16
// values); q2_k's mins go through x's integers, so its whole weight counts in the tolerance.
void expect_gemm_int16_matches_float64(const cpu::Isa kIsa, std::mt19937_64& rng) {
  for (DType t : {DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::q8_0, DType::iq4_nl, DType::q2_k,
                  DType::q3_k, DType::q4_k, DType::q5_k, DType::q6_k, DType::iq4_xs}) {
    SCOPED_TRACE(dtype_name(t));
    const cpu::RowKernels& kernels = cpu::row_kernels(t, kIsa);
    ASSERT_NE(kernels.decode_int16, nullptr);
    const bool halves = kernels.decode_int16_half_blocks;
    ASSERT_EQ(halves, t == DType::q2_k || t == DType::q6_k);
    const int64_t scale_values = halves ? 16 : 32;
    // Offsets with x's integer sums (q2_k), or none: the tile's offsets see rounded x.
    const bool half_offsets = halves && t == DType::q2_k;
    const bool tile_offsets = kernels.int16_block_sums || half_offsets;
    // Groups of 256 values, the last one partial for the 32-value formats.
    const int64_t k = dtype_block_elems(t) == 256 ? 768 : 608;
    constexpr int64_t kRows = 16, kXRows = 19, kOutStride = 21;
    const std::vector<uint8_t> rows = random_blocks(t, kRows * k, rng);
    const std::vector<float> w = dequantized(t, rows);
    const std::vector<float> offsets = block_offsets(t, rows);
    const int64_t row_bytes = static_cast<int64_t>(rows.size()) / kRows;
    const int64_t w_row_bytes = row_bytes + 5;  // rows apart by more than their bytes
    std::vector<uint8_t> spaced(static_cast<size_t>(kRows * w_row_bytes), 0xAB);
    for (int64_t r = 0; r < kRows; ++r) {
      std::copy_n(rows.begin() + r * row_bytes, row_bytes, spaced.begin() + r * w_row_bytes);
    }
    // The decoder: scales · values + offsets within an ulp of its terms of the weights.
    std::vector<int16_t> values(static_cast<size_t>(k));
    std::vector<float> scales(static_cast<size_t>(k / scale_values)), block_offsets_out(scales.size());
    for (int64_t r = 0; r < kRows; ++r) {
      kernels.decode_int16(spaced.data() + r * w_row_bytes, k, values.data(), scales.data(),
                           block_offsets_out.data());
      for (int64_t j = 0; j < k; ++j) {
        const size_t at = static_cast<size_t>(r * k + j);
        ASSERT_LE(std::abs(values[j]), halves ? 32 : 2047) << "row " << r << " value " << j;
        const int64_t unit = j / scale_values;
        const double decoded = static_cast<double>(scales[unit]) * values[j] + block_offsets_out[unit];
        ASSERT_NEAR(decoded, w[at], (std::fabs(w[at]) + 2 * std::fabs(offsets[at])) * 0x1p-23)
            << "row " << r << " value " << j;
      }
    }
    const int64_t x_stride = k + 3;
    const std::vector<float> x = uniform(static_cast<size_t>(kXRows * x_stride), rng);
    const int64_t chunk_bytes = static_cast<int64_t>(dtype_size(t)) * (256 / dtype_block_elems(t));
    // Tiles: all 16 rows, rows 0..4, rows 3..15.
    struct Shape {
      int64_t first, n;
    };
    std::vector<std::vector<float>> outs;
    for (const Shape shape : {Shape{0, 16}, Shape{0, 5}, Shape{3, 13}}) {
      const cpu::XInt16 xi = cpu::round_x_int16(x.data(), x_stride, kXRows, k, kernels.int16_block_sums,
                                                cpu::XInt16Order::values, kIsa);
      const float* half_sums = half_offsets ? cpu::int16_half_block_sums(xi, kXRows, kIsa) : nullptr;
      const cpu::Int16Tile tile =
          cpu::pack_int16_tile(kernels.decode_int16, spaced.data() + shape.first * w_row_bytes, w_row_bytes,
                               shape.n, k, chunk_bytes, tile_offsets, halves, kIsa);
      std::vector<float> out(static_cast<size_t>(kXRows * kOutStride), -1.0f);
      cpu::gemm_int16(tile, xi, kXRows, out.data(), kOutStride, kIsa, half_sums);
      for (int64_t i = 0; i < kXRows; ++i) {
        for (int64_t r = 0; r < kOutStride; ++r) {
          const float got = out[static_cast<size_t>(i * kOutStride + r)];
          if (r >= shape.n) {
            ASSERT_EQ(got, -1.0f) << "wrote past the tile's rows: x row " << i << ", column " << r;
            continue;
          }
          const int64_t wr = shape.first + r;
          double ref = 0;
          const double atol =
              dot_tolerance(&x[i * x_stride], &w[wr * k], &offsets[wr * k], k, ref) +
              x_int16_rounding(&x[i * x_stride], &w[wr * k], half_offsets ? nullptr : &offsets[wr * k], k);
          ASSERT_NEAR(got, ref, atol) << "tile from row " << shape.first << " of " << shape.n << ", x row " << i
                                      << ", weight row " << wr;
          if (!outs.empty()) {
            ASSERT_EQ(got, outs[0][static_cast<size_t>(i * kOutStride + wr)])
                << "differs from the 16-row tile: x row " << i << ", weight row " << wr;
          }
        }
      }
      outs.push_back(out);
    }
    // Each row of x alone (one-row passes): the same bits as within 19 rows.
    for (int64_t i = 0; i < kXRows; i += 6) {
      const cpu::XInt16 xi = cpu::round_x_int16(&x[i * x_stride], x_stride, 1, k, kernels.int16_block_sums,
                                                cpu::XInt16Order::values, kIsa);
      const float* half_sums = half_offsets ? cpu::int16_half_block_sums(xi, 1, kIsa) : nullptr;
      const cpu::Int16Tile tile = cpu::pack_int16_tile(kernels.decode_int16, spaced.data(), w_row_bytes, kRows, k,
                                                       chunk_bytes, tile_offsets, halves, kIsa);
      std::vector<float> out(kRows, -1.0f);
      cpu::gemm_int16(tile, xi, 1, out.data(), kRows, kIsa, half_sums);
      for (int64_t r = 0; r < kRows; ++r) {
        ASSERT_EQ(out[r], outs[0][static_cast<size_t>(i * kOutStride + r)]) << "x row " << i << " alone, weight row " << r;
      }
    }
  }
}

TEST(CpuGemmInt16, PackedTilesMatchFloat64) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(cat("seed ", seed));
  std::mt19937_64 rng(seed);
  int tested = 0;
  for (const cpu::Isa isa : {cpu::Isa::avx512_vnni, cpu::Isa::avx2}) {
    if (!cpu::isa_supported(isa)) continue;
    SCOPED_TRACE(cpu::isa_name(isa));
    expect_gemm_int16_matches_float64(isa, rng);
    ++tested;
  }
  if (tested == 0) GTEST_SKIP() << "no x86-64 vector set";
}

// The k-quants' rows on x split into bytes per 256-value group (avx512_vnni), q2_k's and
// q3_k's in XInt16GroupOrder::bit_pairs, q4_k's and q5_k's in nibbles, q6_k's in values: the
// layout holds exactly round_x_int16's integers, group scales and sums (the quarters' integer
// sums, the sub-blocks' f32 block sums, or -32 times the sums of each 32-bit lane's high
// bytes); one row of x against n weight rows (random bytes: every quant and scale) through
// both passes (several rows, 1 row), groups of very different sizes; each row within the
// 16-bit x tolerance of float64, and the same bits whatever n and its place.
TEST(CpuRowKernels, GroupBytesMatchesFloat64) {
  if (!cpu::isa_supported(cpu::Isa::avx512_vnni)) GTEST_SKIP() << "no avx512_vnni";
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(cat("seed ", seed));
  std::mt19937_64 rng(seed);
  for (DType t : {DType::q2_k, DType::q3_k, DType::q4_k, DType::q5_k, DType::q6_k}) {
    const cpu::RowKernels& kernels = cpu::row_kernels(t, cpu::Isa::avx512_vnni);
    ASSERT_NE(kernels.dot_weight_rows_group_bytes, nullptr) << dtype_name(t);
    const bool nibbles = kernels.group_bytes_order == cpu::XInt16GroupOrder::nibbles;
    const bool values = kernels.group_bytes_order == cpu::XInt16GroupOrder::values;
    ASSERT_EQ(nibbles, t == DType::q4_k || t == DType::q5_k) << dtype_name(t);
    ASSERT_EQ(values, t == DType::q6_k) << dtype_name(t);
    const int64_t group_bytes = cpu::x_int16_group_bytes(kernels.group_bytes_order);
    const int64_t part_bytes = values ? 192 : 128;  // l, h (and with values the part's sums)
    for (int64_t k : {256, 512, 2304, 8192}) {
      SCOPED_TRACE(cat(dtype_name(t), " k ", k));
      const int64_t n = 9;
      const std::vector<uint8_t> rows = random_blocks(t, n * k, rng);
      const std::vector<float> w = dequantized(t, rows);
      const std::vector<float> offsets = block_offsets(t, rows);
      std::vector<float> x = uniform(static_cast<size_t>(k), rng);
      for (int64_t j = 0; j < k; ++j) x[j] *= std::ldexp(1.0f, static_cast<int>(j / cpu::kXInt16Group % 5) * 7 - 14);
      const int64_t row_bytes = static_cast<int64_t>(rows.size()) / n;
      const cpu::XInt16 xi =
          cpu::round_x_int16(x.data(), k, 1, k, true, cpu::XInt16Order::values, cpu::Isa::avx512_vnni);
      const std::vector<int16_t> ints(xi.q, xi.q + k);
      const std::vector<float> int_scales(xi.group_scale, xi.group_scale + xi.groups);
      const std::vector<float> block_sums(xi.block_sum, xi.block_sum + k / 32);
      const cpu::XInt16GroupBytes xb = cpu::round_x_int16_group_bytes(x.data(), k, kernels.group_bytes_order);
      for (int64_t g = 0; g < k / 256; ++g) {
        ASSERT_EQ(xb.group_scale[g], int_scales[g]) << "group " << g;
        const uint8_t* group = xb.groups + g * group_bytes;
        for (int part = 0; part < 4; ++part) {
          for (int i = 0; i < 4; ++i) {
            int32_t sum = 0;
            for (int e = 0; e < 16; ++e) {
              const int64_t v = 256 * g + e +
                                (values    ? 64 * part + 16 * i
                                 : nibbles ? 64 * i + 32 * (part % 2) + 16 * (part / 2)
                                           : 32 * part + 16 * (i % 2) + 128 * (i / 2));
              const int b = 16 * i + e;
              const int value = 256 * static_cast<int8_t>(group[part_bytes * part + 64 + b]) + group[part_bytes * part + b];
              ASSERT_EQ(value, ints[v]) << "value " << v;
              sum += value;
            }
            if (values) {
              for (int d = 4 * i; d < 4 * i + 4; ++d) {
                int32_t high = 0, stored = 0;
                for (int e = 0; e < 4; ++e) high += static_cast<int8_t>(group[part_bytes * part + 64 + 4 * d + e]);
                std::memcpy(&stored, group + part_bytes * part + 128 + 4 * d, 4);
                ASSERT_EQ(stored, -32 * high) << "group " << g << " part " << part << " lane " << d;
              }
            }
            if (nibbles || values) continue;
            int32_t stored = 0;
            std::memcpy(&stored, group + 512 + 4 * (4 * i + part), 4);
            ASSERT_EQ(stored, sum) << "group " << g << " part " << part << " quarter " << i;
          }
        }
        for (int s = 0; nibbles && s < 8; ++s) {
          float stored = 0;
          std::memcpy(&stored, group + 512 + 4 * s, 4);
          ASSERT_EQ(stored, block_sums[8 * g + s]) << "group " << g << " sub-block " << s;
        }
      }
      std::vector<float> out(static_cast<size_t>(n + 1), -1.0f);
      kernels.dot_weight_rows_group_bytes(rows.data(), row_bytes, n, xb, out.data());
      ASSERT_EQ(out[n], -1.0f) << "wrote past the rows";
      for (int64_t r = 0; r < n; ++r) {
        double ref = 0;
        double atol = dot_tolerance(x.data(), &w[r * k], &offsets[r * k], k, ref);
        // q4_k's and q5_k's mins use x's exact block sums, q2_k's its rounded integers (q3_k
        // and q6_k have none).
        atol += x_int16_rounding(x.data(), &w[r * k], nibbles ? &offsets[r * k] : nullptr, k);
        ASSERT_NEAR(out[r], ref, atol) << "row " << r;
        float alone = -1.0f;
        kernels.dot_weight_rows_group_bytes(rows.data() + r * row_bytes, row_bytes, 1, xb, &alone);
        ASSERT_EQ(alone, out[r]) << "row " << r << " alone";
      }
      // A non-finite x makes every product non-finite, as the f32 products are.
      x[k / 2] = INFINITY;
      const cpu::XInt16GroupBytes inf = cpu::round_x_int16_group_bytes(x.data(), k, kernels.group_bytes_order);
      kernels.dot_weight_rows_group_bytes(rows.data(), row_bytes, n, inf, out.data());
      for (int64_t r = 0; r < n; ++r) ASSERT_FALSE(std::isfinite(out[r])) << "row " << r;
    }
  }
}

// q6_k's one-row kernel on x split into bytes at the integer bounds of its 32-bit lanes:
// every weight d · sc · (q - 32) with sc = -128 or 127 and q = 0 or 63, x all +1 or all -1
// (integers ±32767: high bytes 127 or -128, low bytes 255 or 1), so each lane's sum of 16
// products reaches 16 · 4096 · 32767, just below 2^31; a lane that overflowed would be off
// by 2^32 steps, far outside the tolerance.
TEST(CpuRowKernels, Q6KGroupBytesAtLaneBounds) {
  if (!cpu::isa_supported(cpu::Isa::avx512_vnni)) GTEST_SKIP() << "no avx512_vnni";
  const cpu::RowKernels& kernels = cpu::row_kernels(DType::q6_k, cpu::Isa::avx512_vnni);
  ASSERT_NE(kernels.dot_weight_rows_group_bytes, nullptr);
  constexpr int64_t k = 512;
  constexpr int64_t row_bytes = 2 * 210;
  const int scales[] = {-128, 127};
  const int quants[] = {0, 63};
  std::vector<uint8_t> rows;
  for (int sc : scales) {
    for (int q : quants) {
      for (int64_t b = 0; b < k / 256; ++b) {
        uint8_t block[210];
        std::memset(block, q == 63 ? 0xFF : 0x00, 192);  // ql (4 low bits) and qh (2 high bits)
        std::memset(block + 192, static_cast<uint8_t>(static_cast<int8_t>(sc)), 16);
        const uint16_t d = f32_to_f16(0.5f);
        std::memcpy(block + 208, &d, 2);
        rows.insert(rows.end(), block, block + 210);
      }
    }
  }
  const int64_t n = static_cast<int64_t>(rows.size()) / row_bytes;
  const std::vector<float> w = dequantized(DType::q6_k, rows);
  const std::vector<float> no_offsets(static_cast<size_t>(k), 0.0f);
  for (float sign : {1.0f, -1.0f}) {
    const std::vector<float> x(static_cast<size_t>(k), sign);
    const cpu::XInt16GroupBytes xb = cpu::round_x_int16_group_bytes(x.data(), k, kernels.group_bytes_order);
    std::vector<float> out(static_cast<size_t>(n), 0.0f);
    kernels.dot_weight_rows_group_bytes(rows.data(), row_bytes, n, xb, out.data());
    for (int64_t r = 0; r < n; ++r) {
      double ref = 0;
      const double atol = dot_tolerance(x.data(), &w[r * k], no_offsets.data(), k, ref) +
                          x_int16_rounding(x.data(), &w[r * k], nullptr, k);
      ASSERT_NEAR(out[r], ref, atol) << "x " << sign << ", row " << r;
    }
  }
}

// --- every instruction set through the ops --------------------------------------------------

// |out - Σ x·w| <= 4 u sqrt(K) (‖m‖₂ + |Σ x·(w - o)| + |Σ x·o|): the op cases' tolerance
// (tests/ops/cases_matmul.cpp explains it). Returns Σ x·w in `ref`.
double dot_tolerance(const float* x, const float* w, const float* offsets, int64_t k, double& ref) {
  double scaled = 0, offset = 0, squares = 0;
  for (int64_t j = 0; j < k; ++j) {
    scaled += static_cast<double>(x[j]) * (static_cast<double>(w[j]) - offsets[j]);
    offset += static_cast<double>(x[j]) * offsets[j];
    const double term = std::fabs(x[j]) * (std::fabs(w[j]) + 2.0 * std::fabs(offsets[j]));
    squares += term * term;
  }
  ref = scaled + offset;
  return 4 * 0x1p-24 * std::sqrt(static_cast<double>(k)) *
         (std::sqrt(squares) + std::fabs(scaled) + std::fabs(offset));
}

// The op cases run on the widest instruction set; this runs matmul (both paths),
// matmul_affine and matmul_id on every one the CPU has, the portable one included.
TEST(CpuKernels, EveryInstructionSetMatchesFloat64) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(cat("seed ", seed));
  std::mt19937_64 rng(seed);
  auto backend = testing::cpu_backend();
  GraphExecutor executor(backend);
  auto upload = [&](DType t, Shape shape, const void* data) {
    TensorView tensor = backend->alloc_tensor(t, shape);
    tensor.view.write(data, tensor.span_bytes());
    return tensor;
  };
  for (cpu::Isa isa :
       {cpu::Isa::portable, cpu::Isa::avx2, cpu::Isa::avx512, cpu::Isa::avx512_vnni, cpu::Isa::amx}) {
    if (!cpu::isa_supported(isa)) continue;
    cpu::set_active_isa(isa);
    SCOPED_TRACE(cpu::isa_name(isa));
    for (DType t : kWeightTypes) {
      const int64_t k = dtype_is_quantized(t) ? 2 * dtype_block_elems(t) : 77;
      const int64_t n = 21;
      const std::vector<uint8_t> wq = quantized(t, uniform(static_cast<size_t>(n * k), rng));
      const std::vector<float> w = dequantized(t, wq);
      const std::vector<float> offsets = block_offsets(t, wq);
      const bool int16_x = cpu::row_kernels(t, isa).dot_int16 != nullptr;
      const bool mm_int16_x = cpu::row_kernels(t, isa).decode_int16 != nullptr;  // the integer GEMM
      const bool exact_sums = cpu::row_kernels(t, isa).int16_block_sums;
      for (int64_t m : {int64_t{3}, int64_t{17}}) {
        SCOPED_TRACE(cat(dtype_name(t), " M ", m));
        const std::vector<float> x = uniform(static_cast<size_t>(m * k), rng);
        TensorView xt = upload(DType::f32, {m, k}, x.data());
        TensorView wt = upload(t, {n, k}, wq.data());
        TensorView ot = backend->alloc_tensor(DType::f32, {m, n});
        GraphSession session = executor.begin();
        ops::matmul(session, xt, wt, ot);
        session.finish();
        const std::vector<float> out = ot.view.read_as<float>();
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double ref = 0;
            double tol = dot_tolerance(&x[i * k], &w[j * k], &offsets[j * k], k, ref);
            // Isa::amx's matrix-matrix products of q4_0, q4_1 and q8_0 round x per 32 values,
            // within the bound of the 256-value groups of the integer GEMM.
            if (m <= ops::kMatmulMvMaxRows ? int16_x : mm_int16_x) {
              tol += x_int16_rounding(&x[i * k], &w[j * k], exact_sums ? &offsets[j * k] : nullptr, k);
            }
            ASSERT_NEAR(out[i * n + j], ref, tol) << "out[" << i << ", " << j << "]";
          }
        }
      }
    }
    for (uint32_t bits : {4u, 8u}) {
      for (uint32_t group : {32u, 128u}) {
        AffineFormat f;
        f.bits = bits;
        f.group_size = group;
        f.scale_type = group == 32 ? DType::bf16 : DType::f16;
        const int64_t n = 19, k = 256;
        std::vector<uint32_t> packed(static_cast<size_t>(n * ops::affine_words_per_row(f, k)));
        std::vector<uint16_t> scales(static_cast<size_t>(n * k / group)), biases(scales.size());
        const std::vector<float> source = normal(static_cast<size_t>(n * k), rng, 0.3f);
        ops::affine_quantize(f, source.data(), n, k, packed.data(), scales.data(), biases.data());
        std::vector<float> w(source.size()), offsets(source.size());
        ops::affine_dequantize(f, packed.data(), scales.data(), biases.data(), n, k, w.data());
        for (size_t e = 0; e < w.size(); ++e) {
          const uint16_t b = biases[e / group];
          offsets[e] = f.scale_type == DType::bf16 ? bf16_to_f32(b) : f16_to_f32(b);
        }
        for (int64_t m : {int64_t{1}, int64_t{5}, int64_t{12}}) {
          SCOPED_TRACE(cat("affine q", bits, " g", group, " M ", m));
          const std::vector<float> x = uniform(static_cast<size_t>(m * k), rng);
          TensorView xt = upload(DType::f32, {m, k}, x.data());
          TensorView wt = upload(DType::u32, {n, ops::affine_words_per_row(f, k)}, packed.data());
          TensorView st = upload(f.scale_type, {n, k / group}, scales.data());
          TensorView bt = upload(f.scale_type, {n, k / group}, biases.data());
          TensorView ot = backend->alloc_tensor(DType::f32, {m, n});
          GraphSession session = executor.begin();
          ops::matmul_affine(session, xt, wt, st, bt, ot, f);
          session.finish();
          const std::vector<float> out = ot.view.read_as<float>();
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              double ref = 0;
              const double tol = dot_tolerance(&x[i * k], &w[j * k], &offsets[j * k], k, ref);
              ASSERT_NEAR(out[i * n + j], ref, tol) << "out[" << i << ", " << j << "]";
            }
          }
        }
      }
    }
    for (DType t : {DType::q4_k, DType::f16}) {
      const int64_t experts = 4, n = 13, k = 256, slots = 2;
      const std::vector<uint8_t> wq =
          quantized(t, uniform(static_cast<size_t>(experts * n * k), rng));
      const std::vector<float> w = dequantized(t, wq);
      const std::vector<float> offsets = block_offsets(t, wq);
      for (int64_t tokens : {int64_t{1}, int64_t{4}}) {
        SCOPED_TRACE(cat("matmul_id ", dtype_name(t), " T ", tokens));
        std::vector<int32_t> ids(static_cast<size_t>(tokens * slots));
        for (int32_t& id : ids) id = static_cast<int32_t>(rng() % experts);
        ids[1] = -3;  // out of range: zeros
        const std::vector<float> x = uniform(static_cast<size_t>(tokens * k), rng);
        TensorView xt = upload(DType::f32, {tokens, k}, x.data());
        TensorView wt = upload(t, {experts, n, k}, wq.data());
        TensorView it = upload(DType::i32, {tokens, slots}, ids.data());
        TensorView ot = backend->alloc_tensor(DType::f32, {tokens, slots, n});
        BufferView scratch = backend->alloc(ops::matmul_id_scratch_bytes(tokens, slots, experts));
        ops::MatmulIdParams params;
        params.n_experts = static_cast<int32_t>(experts);
        params.slots = static_cast<int32_t>(slots);
        GraphSession session = executor.begin();
        ops::matmul_id(session, xt, wt, it, ot, scratch, params);
        session.finish();
        const std::vector<float> out = ot.view.read_as<float>();
        for (int64_t p = 0; p < tokens * slots; ++p) {
          const int32_t e = ids[static_cast<size_t>(p)];
          for (int64_t j = 0; j < n; ++j) {
            const float got = out[static_cast<size_t>(p * n + j)];
            if (e < 0) {
              ASSERT_EQ(got, 0.0f) << "pair " << p;
              continue;
            }
            double ref = 0;
            const size_t row = static_cast<size_t>((e * n + j) * k);
            const double tol = dot_tolerance(&x[(p / slots) * k], &w[row], &offsets[row], k, ref);
            ASSERT_NEAR(got, ref, tol) << "pair " << p << ", column " << j;
          }
        }
      }
    }
  }
  cpu::set_active_isa(cpu::best_isa());
}

// --- results do not depend on the thread count ---------------------------------------------

TEST(CpuMatmul, ResultsDoNotDependOnThreads) {
  std::mt19937_64 rng(testing::fresh_seed());
  const int64_t n = 333, k = 512;
  const std::vector<float> wf = uniform(static_cast<size_t>(n * k), rng);
  for (DType t : {DType::q4_k, DType::q5_0, DType::q5_1, DType::iq4_nl, DType::iq4_xs}) {
    SCOPED_TRACE(dtype_name(t));
    const std::vector<uint8_t> wq = quantized(t, wf);
    for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{70}}) {
      const std::vector<float> x = uniform(static_cast<size_t>(m * k), rng);
      std::vector<std::vector<float>> results;
      for (int threads : {1, 2, 3}) {
        Options options = testing::test_options();
        options.cpu_threads = threads;
        auto backend = testing::cpu_backend(options);
        TensorView xt = backend->alloc_tensor(DType::f32, {m, k});
        TensorView wt = backend->alloc_tensor(t, {n, k});
        TensorView ot = backend->alloc_tensor(DType::f32, {m, n});
        xt.view.write(x);
        wt.view.write(wq);
        GraphExecutor executor(backend);
        GraphSession session = executor.begin();
        ops::matmul(session, xt, wt, ot);
        session.finish();
        results.push_back(ot.view.read_as<float>());
      }
      for (size_t i = 1; i < results.size(); ++i) {
        EXPECT_EQ(std::memcmp(results[0].data(), results[i].data(), results[0].size() * 4), 0)
            << "M " << m << ", pool " << i;
      }
    }
  }
}

// The integer GEMM keeps x rounded for a thread's later tasks of the same level: x scaled
// in place by 2 between two products of one graph (three levels) must give exactly twice
// the first product (the same integers, doubled group scales), in the first run and again
// in a replay with new x.
TEST(CpuMatmul, IntegerGemmRoundsXAgainInEveryLevel) {
  std::mt19937_64 rng(testing::fresh_seed());
  const int64_t m = 150, n = 40, k = 512;
  auto backend = testing::cpu_backend();
  for (DType t : {DType::q6_k, DType::q4_0}) {
    SCOPED_TRACE(dtype_name(t));
    TensorView xt = backend->alloc_tensor(DType::f32, {m, k});
    TensorView wt = backend->alloc_tensor(t, {n, k});
    TensorView first = backend->alloc_tensor(DType::f32, {m, n});
    TensorView second = backend->alloc_tensor(DType::f32, {m, n});
    wt.view.write(quantized(t, uniform(static_cast<size_t>(n * k), rng)));
    GraphExecutor executor(backend);
    GraphSession session = executor.begin_recorded();
    ops::matmul(session, xt, wt, first);
    ops::scale(session, xt, 2.0f, xt);
    ops::matmul(session, xt, wt, second);
    CapturedGraph graph(*backend, session.take_graph(), CaptureOptions{});
    for (int replay = 0; replay < 2; ++replay) {
      xt.view.write(uniform(static_cast<size_t>(m * k), rng));
      graph.run();
      const std::vector<float> a = first.view.read_as<float>();
      const std::vector<float> b = second.view.read_as<float>();
      for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(b[i], 2.0f * a[i]) << "replay " << replay << ", element " << i;
    }
  }
}

// The CPU's matrix-matrix kernel of the integer GEMM types called directly on runs of its
// blocks, as a pool would hand them out: one run of all blocks, every split into two runs
// (inside a weight tile's x-row blocks or across tiles), and single blocks; every run
// writes exactly its outputs (the others keep their poison) and the bits do not depend on
// the runs. 150 rows of x are three x-row blocks, 40 weight rows three tiles.
TEST(CpuMatmul, IntegerGemmRunsGiveTheSameBits) {
  std::mt19937_64 rng(testing::fresh_seed());
  const int64_t m = 150, n = 40, k = 512;
  auto backend = testing::cpu_backend();
  for (DType t : {DType::q6_k, DType::q4_k, DType::q2_k, DType::q4_0}) {
    SCOPED_TRACE(dtype_name(t));
    const std::vector<uint8_t> wq = quantized(t, uniform(static_cast<size_t>(n * k), rng));
    const std::vector<float> x = uniform(static_cast<size_t>(m * k), rng);
    ops::MatmulArgs a{};
    a.x = x.data();
    a.w = wq.data();
    a.m = m;
    a.n = n;
    a.k = k;
    a.x_stride = k;
    a.w_row_bytes = static_cast<int64_t>(wq.size()) / n;
    a.out_stride = n;
    KernelRequest r{"matmul", t, t, m, n, &a, sizeof(a)};
    const KernelChoice c = backend->choose_kernel(r);
    ASSERT_NE(c.kernel, nullptr);
    const uint64_t blocks = c.dims.grid.count();
    auto run = [&](const std::vector<uint64_t>& cuts) {
      std::vector<float> out(static_cast<size_t>(m * n), NAN);
      a.out = out.data();
      for (size_t i = 0; i + 1 < cuts.size(); ++i) c.kernel->cpu(&a, c.dims, cuts[i], cuts[i + 1]);
      return out;
    };
    const std::vector<float> whole = run({0, blocks});
    for (float v : whole) ASSERT_TRUE(std::isfinite(v));
    std::vector<uint64_t> singles;
    for (uint64_t b = 0; b <= blocks; ++b) singles.push_back(b);
    std::vector<std::vector<uint64_t>> splits = {singles};
    for (uint64_t s = 1; s < blocks; ++s) splits.push_back({0, s, blocks});
    for (const auto& cuts : splits) {
      const std::vector<float> out = run(cuts);
      ASSERT_EQ(std::memcmp(out.data(), whole.data(), whole.size() * 4), 0) << "runs cut at " << cuts[1];
    }
  }
}

}  // namespace
}  // namespace onepass
