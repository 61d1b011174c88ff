// MLX affine weights re-laid as GGUF weight types (model/affine_relayout.h): the blocks must
// dequantise to the very values w = scale * q + bias of the affine groups, whatever the group
// size, scale type and number of leading dimensions.
#include "model/affine_relayout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>

#include "onepass/core/error.h"
#include "onepass/core/half.h"
#include "onepass/ops/quant.h"
#include "support/testing.h"

namespace onepass::model {
namespace {

// A random affine weight [experts, rows, cols] and its values as mlx computes them.
struct AffineWeight {
  AffineFormat format;
  Shape packed_shape;
  std::vector<uint32_t> packed;
  std::vector<uint16_t> scales, biases;
  std::vector<float> values;

  HostTensor host() const {
    HostTensor t;
    t.name = "model.layers.0.mlp.switch_mlp.up_proj.weight";
    t.dtype = DType::u32;
    t.shape = packed_shape;
    t.data = packed.data();
    t.bytes = packed.size() * 4;
    t.affine = format;
    t.scales = scales.data();
    t.biases = biases.data();
    return t;
  }
};

AffineWeight random_weight(AffineFormat format, int64_t experts, int64_t rows, int64_t cols,
                           std::mt19937_64& rng, float spread = 0.1f) {
  AffineWeight w;
  w.format = format;
  const int64_t all_rows = experts * rows;
  std::normal_distribution<float> dist(0.0f, spread);
  std::vector<float> source(static_cast<size_t>(all_rows * cols));
  for (float& v : source) v = dist(rng);
  const int64_t words = ops::affine_words_per_row(format, cols);
  w.packed.resize(static_cast<size_t>(all_rows * words));
  w.scales.resize(static_cast<size_t>(all_rows * cols / format.group_size));
  w.biases.resize(w.scales.size());
  ops::affine_quantize(format, source.data(), all_rows, cols, w.packed.data(), w.scales.data(),
                       w.biases.data());
  w.packed_shape = Shape{experts, rows, words};
  w.values.resize(source.size());
  ops::affine_dequantize(format, w.packed.data(), w.scales.data(), w.biases.data(), all_rows, cols,
                         w.values.data());
  return w;
}

std::vector<float> dequantized(const RelaidWeight& r) {
  std::vector<float> out(static_cast<size_t>(r.shape.numel()));
  ops::dequantize(r.dtype, r.bytes.data(), r.shape.numel(), out.data());
  return out;
}

TEST(AffineRelayout, FourBitGroupsBecomeQ4_1BlocksOfTheSameValues) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (const DType scale_type : {DType::f16, DType::bf16}) {
    for (const uint32_t group : {32u, 64u, 128u}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(scale_type) << " groups of " << group);
      const AffineWeight w = random_weight({4, group, scale_type}, 3, 5, 256, rng);
      const RelaidWeight r = relayout_affine(w.host());
      EXPECT_EQ(r.dtype, DType::q4_1);
      EXPECT_EQ(r.shape, Shape({3, 5, 256}));
      EXPECT_EQ(r.bytes.size(), dtype_bytes(DType::q4_1, 3 * 5 * 256));
      const std::vector<float> got = dequantized(r);
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], w.values[i]) << "value " << i;
    }
  }
}

TEST(AffineRelayout, SymmetricEightBitGroupsBecomeQ8_0Blocks) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (const DType scale_type : {DType::f16, DType::bf16}) {
    for (const uint32_t group : {32u, 64u}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(scale_type) << " groups of " << group);
      AffineWeight w = random_weight({8, group, scale_type}, 2, 4, 128, rng);
      // Each group as q8_0 holds it: w = d * (q - 128), so bias = -128 d.
      for (size_t g = 0; g < w.scales.size(); ++g) {
        const float scale = scale_type == DType::f16 ? f16_to_f32(w.scales[g]) : bf16_to_f32(w.scales[g]);
        w.biases[g] = scale_type == DType::f16 ? f32_to_f16(-128.0f * scale) : f32_to_bf16(-128.0f * scale);
      }
      ops::affine_dequantize(w.format, w.packed.data(), w.scales.data(), w.biases.data(), 8, 128,
                             w.values.data());
      const RelaidWeight r = relayout_affine(w.host());
      EXPECT_EQ(r.dtype, DType::q8_0);
      const std::vector<float> got = dequantized(r);
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], w.values[i]) << "value " << i;
    }
  }
}

TEST(AffineRelayout, OtherEightBitGroupsBecomeF16Values) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const AffineWeight w = random_weight({8, 64, DType::bf16}, 2, 3, 128, rng);
  const RelaidWeight r = relayout_affine(w.host());
  EXPECT_EQ(r.dtype, DType::f16);
  EXPECT_EQ(r.shape, Shape({2, 3, 128}));
  const std::vector<float> got = dequantized(r);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], f16_to_f32(f32_to_f16(w.values[i]))) << "value " << i;
  }
}

TEST(AffineRelayout, ValuesBeyondF16KeepF32) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  // bf16 scales of values near 1e6: neither q4_1's f16 d and m nor f16 values hold them.
  const AffineWeight w = random_weight({4, 32, DType::bf16}, 1, 2, 64, rng, 1.0e6f);
  const RelaidWeight r = relayout_affine(w.host());
  EXPECT_EQ(r.dtype, DType::f32);
  const std::vector<float> got = dequantized(r);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], w.values[i]) << "value " << i;
}

// One expert's matrix [rows, cols] of a checkpoint that stores each expert apart.
HostTensor expert_part(const AffineWeight& w) {
  HostTensor t = w.host();
  t.shape = Shape{w.packed_shape[1], w.packed_shape[2]};
  return t;
}

// Symmetric 8-bit groups (w = d * (q - 128)), which re-lay as q8_0 blocks.
void make_symmetric(AffineWeight& w, int64_t rows, int64_t cols) {
  for (size_t g = 0; g < w.scales.size(); ++g)
    w.biases[g] = f32_to_f16(-128.0f * f16_to_f32(w.scales[g]));
  ops::affine_dequantize(w.format, w.packed.data(), w.scales.data(), w.biases.data(), rows, cols,
                         w.values.data());
}

TEST(AffineRelayout, ExpertsStoredApartShareOneType) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  AffineWeight symmetric = random_weight({8, 32, DType::f16}, 1, 4, 128, rng);
  make_symmetric(symmetric, 4, 128);
  AffineWeight also_symmetric = random_weight({8, 32, DType::f16}, 1, 4, 128, rng);
  make_symmetric(also_symmetric, 4, 128);
  const AffineWeight asymmetric = random_weight({8, 32, DType::f16}, 1, 4, 128, rng);

  // Experts that each re-lay as q8_0 stay q8_0.
  const RelayoutForms blocks =
      common_relayout_forms({expert_part(symmetric), expert_part(also_symmetric)});
  EXPECT_TRUE(blocks.blocks);
  EXPECT_EQ(relayout_affine(expert_part(also_symmetric), blocks).dtype, DType::q8_0);

  // One q8_0 expert beside an f16 one: both as f16 values.
  const RelayoutForms values =
      common_relayout_forms({expert_part(symmetric), expert_part(asymmetric)});
  EXPECT_FALSE(values.blocks);
  EXPECT_TRUE(values.f16);
  for (const AffineWeight* w : {&std::as_const(symmetric), &asymmetric}) {
    const RelaidWeight r = relayout_affine(expert_part(*w), values);
    EXPECT_EQ(r.dtype, DType::f16);
    EXPECT_EQ(r.shape, Shape({4, 128}));
    const std::vector<float> got = dequantized(r);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i], f16_to_f32(f32_to_f16(w->values[i]))) << "value " << i;
    }
  }

  // A q4_1 expert beside one whose values exceed f16: both as f32 values.
  const AffineWeight small = random_weight({4, 32, DType::bf16}, 1, 2, 64, rng);
  const AffineWeight large = random_weight({4, 32, DType::bf16}, 1, 2, 64, rng, 1.0e6f);
  const RelayoutForms wide = common_relayout_forms({expert_part(small), expert_part(large)});
  EXPECT_FALSE(wide.blocks);
  EXPECT_FALSE(wide.f16);
  for (const AffineWeight* w : {&small, &large}) {
    const RelaidWeight r = relayout_affine(expert_part(*w), wide);
    EXPECT_EQ(r.dtype, DType::f32);
    const std::vector<float> got = dequantized(r);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], w->values[i]) << "value " << i;
  }
}

TEST(AffineRelayout, RejectsWhatIsNotAnAffineWeight) {
  std::mt19937_64 rng(1);
  const AffineWeight w = random_weight({4, 32, DType::f16}, 1, 2, 64, rng);
  HostTensor plain = w.host();
  plain.affine.reset();
  try {
    (void)relayout_affine(plain);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("up_proj.weight' is not an MLX affine-quantised weight"),
              std::string::npos)
        << e.what();
  }
  HostTensor short_data = w.host();
  short_data.bytes -= 4;
  try {
    (void)relayout_affine(short_data);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not hold whole groups"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace onepass::model
