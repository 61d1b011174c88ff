// Op cases: matmul_affine (MLX affine 4/8-bit, groups 32/64/128, f16/bf16 scales).
// Reference and tolerance as in cases_matmul.cpp, with the affine bias as the offset.
#include <cmath>
#include <cstring>

#include "onepass/ops/ops.h"
#include "onepass/ops/affine.h"
#include "onepass/ops/quant.h"
#include "ops/quant_cases.h"
#include "support/op_harness.h"

namespace onepass::testing {

namespace {

struct AffineWeights {
  TensorView w, scales, biases;
  std::vector<double> values, offsets;
};

AffineWeights affine_weights(OpContext& c, const AffineFormat& f, int64_t n, int64_t k) {
  std::normal_distribution<float> dist(0.0f, 0.5f);
  std::vector<float> source(static_cast<size_t>(n * k));
  for (float& v : source) v = dist(c.rng());
  const int64_t words = ops::affine_words_per_row(f, k);
  const int64_t groups = k / f.group_size;
  std::vector<uint32_t> packed(static_cast<size_t>(n * words));
  std::vector<uint16_t> scales(static_cast<size_t>(n * groups)), biases(scales.size());
  ops::affine_quantize(f, source.data(), n, k, packed.data(), scales.data(), biases.data());
  std::vector<float> decoded(source.size());
  ops::affine_dequantize(f, packed.data(), scales.data(), biases.data(), n, k, decoded.data());
  auto bytes = [](const auto& v) {
    std::vector<uint8_t> out(v.size() * sizeof(v[0]));
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  };
  AffineWeights a;
  a.w = c.input_bytes(DType::u32, {n, words}, bytes(packed));
  a.scales = c.input_bytes(f.scale_type, {n, groups}, bytes(scales));
  a.biases = c.input_bytes(f.scale_type, {n, groups}, bytes(biases));
  a.values.assign(decoded.begin(), decoded.end());
  a.offsets.resize(decoded.size());
  for (int64_t i = 0; i < n * k; ++i) {
    const uint16_t b = biases[static_cast<size_t>(i / f.group_size)];  // row-major groups
    a.offsets[static_cast<size_t>(i)] = f.scale_type == DType::bf16 ? bf16_to_f32(b) : f16_to_f32(b);
  }
  return a;
}

}  // namespace

ONEPASS_OP_CASES(affine) {
  struct Shape3 {
    int64_t m, n, k, x_pad;
  };
  for (uint32_t bits : {4u, 8u}) {
    for (uint32_t group : {32u, 64u, 128u}) {
      for (DType st : {DType::f16, DType::bf16}) {
        AffineFormat f;
        f.bits = bits;
        f.group_size = group;
        f.scale_type = st;
        for (Shape3 s : {Shape3{1, 333, 512, 0}, Shape3{3, 7, group, 5}, Shape3{17, 33, 384, 0},
                         Shape3{70, 9, 256, 2}}) {
          cases.push_back({cat("matmul_affine/q", bits, "_g", group, "_", dtype_name(st), "/m", s.m,
                               "_n", s.n, "_k", s.k, s.x_pad ? "_xstrided" : ""),
                           [=](OpContext& c) {
            TensorView x = c.random_input_strided(DType::f32, {s.m, s.k}, s.x_pad);
            AffineWeights a = affine_weights(c, f, s.n, s.k);
            TensorView out = c.output(DType::f32, {s.m, s.n});
            ops::matmul_affine(c.session(), x, a.w, a.scales, a.biases, out, f);
            c.run();
            double atol = 0;
            const auto ref = quant_cases::matmul_reference(c.host(x), a.values, a.offsets, s.m, s.n, s.k, atol);
            c.expect_near(out, ref, Tolerance{atol, 0.0});
          }});
        }
      }
    }
  }
  cases.push_back({"matmul_affine/errors", [](OpContext& c) {
    AffineFormat f;
    f.bits = 4;
    f.group_size = 64;
    AffineWeights a = affine_weights(c, f, 5, 128);
    TensorView out = c.output(DType::f32, {2, 5});
    // x has the wrong K.
    EXPECT_THROW(ops::matmul_affine(c.session(), c.random_input(DType::f32, {2, 64}), a.w, a.scales,
                                           a.biases, out, f), Error);
    // Scales in the wrong dtype for the format.
    AffineFormat bf = f;
    bf.scale_type = DType::bf16;
    EXPECT_THROW(ops::matmul_affine(c.session(), c.random_input(DType::f32, {2, 128}), a.w, a.scales,
                                           a.biases, out, bf), Error);
    // Group size that does not match the scales' shape.
    AffineFormat g32 = f;
    g32.group_size = 32;
    EXPECT_THROW(ops::matmul_affine(c.session(), c.random_input(DType::f32, {2, 128}), a.w, a.scales,
                                           a.biases, out, g32), Error);
    c.run();
  }});
}

}  // namespace onepass::testing
