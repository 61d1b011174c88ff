// Op cases: matmul (dense and GGML block formats), matrix-vector and matrix-matrix.
//
// Reference: float64 dot products of x with the dequantized weights (dequantize() is
// checked bit for bit against gguf-py in tests/unit/quant_test.cpp), so what is left is
// f32 rounding in the kernel: of each product, of each partial sum, and of the in-kernel
// decode (scale * q + offset, possibly fused). Tolerance per output element:
//
//   atol = 4 · u · sqrt(K) · (‖m‖₂ + |Σ x·(w − o)| + |Σ x·o|),   u = 2^-24,
//   m_k = |x_k| · (|w_k| + 2|o_k|),  o = the additive term of w's block (0 if none).
//
// Rounding errors of a sum act like independent errors of at most u times each running
// sum S_j (Higham & Mary), so the total is about u·sqrt(Σ_j S_j²). Running sums of terms
// of random sign grow like sqrt(j)·rms (covered by sqrt(K)·‖m‖₂), those of terms with a
// common sign like j·mean (covered by sqrt(K)·|Σ|). Kernels may sum the scale part
// Σ x·(w − o) and the offset part Σ x·o of q4_1, q5_1, q2_k, q4_k, q5_k and MLX affine weights
// separately, hence both sums and the 2|o| in m. Measured worst case over all weight
// types, M in {1, 3, 17} and K up to 8192: 0.6 of the bracket, so the factor 4 leaves a
// wide margin while a wrong block scale or a dropped block is still far outside it.
//
// The CUDA tensor-core kernels (matrix-matrix, every weight type but f32) also round x to
// f16 (bf16 for bf16 weights) and block-format weights to f16 before multiplying: each
// term x_k·w_k is then off by at most (u_x + u_w)·|x_k·w_k|, independent roundings of
// either sign, so their sum has a standard deviation below (u_x + u_w)/sqrt(3)·‖m‖₂;
// the tolerance adds 6·(u_x + u_w)·‖m‖₂ (about ten of those).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "onepass/ops/ops.h"
#include "onepass/ops/matmul.h"
#include "onepass/ops/quant.h"
#include "ops/quant_cases.h"
#include "support/op_harness.h"

namespace onepass::testing {

// Declared in quant_cases.h.
namespace quant_cases {

// A function rather than a global: case tables of other files are filled during static
// initialisation.
const std::vector<DType>& weight_types() {
  static const std::vector<DType> types = {DType::f32,  DType::f16,  DType::bf16, DType::q4_0,
                                           DType::q4_1, DType::q8_0, DType::q4_k, DType::q5_k,
                                           DType::q6_k, DType::q5_0, DType::q5_1, DType::q2_k,
                                           DType::q3_k, DType::iq4_nl, DType::iq4_xs};
  return types;
}

// Weights of `type` and shape [..., cols] (cols a multiple of the block size) in `values`
// (the dequantized values, row-major) and `offsets` (the additive term of each value's
// block: q4_1/q5_1 m, q4_k/q5_k/q2_k -dmin·min; 0 for the other types).
// Block formats come from quantizing uniform [-1, 1] data, or with `random_bits` from
// random bytes with small random f16 scales (every bit pattern of the quant fields).
TensorView weight_input(OpContext& c, DType type, Shape shape, std::vector<double>& values,
                        std::vector<double>& offsets, bool random_bits) {
  const int64_t count = shape.numel();
  offsets.assign(static_cast<size_t>(count), 0.0);
  if (!dtype_is_quantized(type)) {
    TensorView w = c.random_input(type, shape);
    values = c.host(w);
    return w;
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(shape.rows()) * dtype_bytes(type, shape.cols()));
  if (random_bits) {
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(c.rng()());
    std::uniform_real_distribution<float> magnitude(1e-3f, 0.05f);
    const size_t block = dtype_size(type);
    for (size_t b = 0; b < bytes.size(); b += block) {
      std::vector<size_t> fields;  // the f16 scales of the block
      if (type == DType::q4_0 || type == DType::q8_0 || type == DType::q5_0 || type == DType::iq4_nl ||
          type == DType::iq4_xs) {
        fields = {0};
      }
      if (type == DType::q4_1 || type == DType::q4_k || type == DType::q5_k || type == DType::q5_1) fields = {0, 2};
      if (type == DType::q6_k) fields = {208};
      if (type == DType::q2_k) fields = {80, 82};
      if (type == DType::q3_k) fields = {108};
      for (size_t f : fields) {
        const float v = (c.rng()() & 1 ? 1.0f : -1.0f) * magnitude(c.rng());
        const uint16_t h = f32_to_f16(v);
        std::memcpy(&bytes[b + f], &h, 2);
      }
    }
  } else {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> source(static_cast<size_t>(count));
    for (float& v : source) v = dist(c.rng());
    ops::quantize(type, source.data(), count, bytes.data());
  }
  std::vector<float> decoded(static_cast<size_t>(count));
  ops::dequantize(type, bytes.data(), count, decoded.data());
  values.assign(decoded.begin(), decoded.end());
  auto half_at = [](const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return f16_to_f32(h);
  };
  const int64_t elems = dtype_block_elems(type);
  for (int64_t b = 0; b < count / elems; ++b) {
    const uint8_t* block = bytes.data() + b * static_cast<int64_t>(dtype_size(type));
    double* o = offsets.data() + b * elems;
    if (type == DType::q4_1 || type == DType::q5_1) {
      std::fill_n(o, elems, static_cast<double>(half_at(block + 2)));
    } else if (type == DType::q4_k || type == DType::q5_k) {
      for (int i = 0; i < 8; ++i) {
        int sc = 0, mn = 0;
        ops::kquant_scale_min(block + 4, i, sc, mn);
        std::fill_n(o + 32 * i, 32, -static_cast<double>(half_at(block + 2) * static_cast<float>(mn)));
      }
    } else if (type == DType::q2_k) {
      for (int i = 0; i < 16; ++i) {
        const float mn = static_cast<float>(block[i] >> 4);
        std::fill_n(o + 16 * i, 16, -static_cast<double>(half_at(block + 82) * mn));
      }
    }
  }
  return c.input_bytes(type, shape, bytes);
}

// out[i, j] = Σ_k x[i, k] · w[j, k] in float64, and in `atol` the tolerance of the
// comment at the top of this file (the largest over all elements).
//
// With x rounded (XRounding) the kernel is the CUDA matrix-vector kernel for block formats,
// which quantizes x to int8 per 32 values (d = amax / 127, as llama.cpp does), or the CPU's
// SIMD integer ones (testing::cpu_rounds_x_to_int16: int16 per 256 values, d = amax / 32767;
// for more rows of x, the integer GEMM: testing::cpu_mm_rounds_x_to_int16); both
// apply the formats' additive terms with exact sums of x. Each activation is then off by
// at most d/2, adding Σ_groups d/2 · Σ_k∈group |w − o| per element (measured: well inside).
XRounding mv_x_rounding(const Backend& backend, DType t) {
  if (backend.kind() == BackendKind::cuda) return dtype_is_quantized(t) ? kXInt8PerBlock : kXF32;
  return testing::cpu_rounds_x_to_int16(backend, t) ? kXInt16PerGroup : kXF32;
}

// The CPU's matrix-matrix products: on Isa::amx (src/backends/cpu/kernels/matmul/
// amx_tiles.inl) those of q4_0, q4_1 and q8_0 round x to int16 per 32 values; the integer
// GEMM's formats round it per 256 (testing::cpu_mm_rounds_x_to_int16); the rest keep f32 x.
XRounding mm_x_rounding(const Backend& backend, DType t) {
  const bool amx_formats = t == DType::q4_0 || t == DType::q4_1 || t == DType::q8_0;
  if (backend.kind() == BackendKind::cpu && backend.info().isa == "amx" && amx_formats) return kXInt16PerBlock;
  return testing::cpu_mm_rounds_x_to_int16(backend, t) ? kXInt16PerGroup : kXF32;
}

std::vector<double> matmul_reference(const std::vector<double>& x, const std::vector<double>& w,
                                     const std::vector<double>& offsets, int64_t m, int64_t n,
                                     int64_t k, double& atol, XRounding x_rounding,
                                     double input_rounding) {
  std::vector<double> out(static_cast<size_t>(m * n));
  atol = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double scaled = 0, offset = 0, squares = 0;
      for (int64_t t = 0; t < k; ++t) {
        const double xv = x[static_cast<size_t>(i * k + t)];
        const size_t wi = static_cast<size_t>(j * k + t);
        scaled += xv * (w[wi] - offsets[wi]);
        offset += xv * offsets[wi];
        const double term = std::fabs(xv) * (std::fabs(w[wi]) + 2 * std::fabs(offsets[wi]));
        squares += term * term;
      }
      out[static_cast<size_t>(i * n + j)] = scaled + offset;
      const double bracket = std::sqrt(squares) + std::fabs(scaled) + std::fabs(offset);
      double quantization = 0;
      if (x_rounding.levels > 0) {
        for (int64_t g = 0; g < k; g += x_rounding.group) {
          double amax = 0, weight = 0;
          for (int64_t t = g; t < std::min(k, g + x_rounding.group); ++t) {
            amax = std::max(amax, std::fabs(x[static_cast<size_t>(i * k + t)]));
            weight += std::fabs(w[static_cast<size_t>(j * k + t)] - offsets[static_cast<size_t>(j * k + t)]);
          }
          quantization += amax / x_rounding.levels / 2.0 * weight;
        }
      }
      atol = std::max(atol, 4 * 0x1p-24 * std::sqrt(static_cast<double>(k)) * bracket + 1.01 * quantization +
                                6 * input_rounding * std::sqrt(squares));
    }
  }
  return out;
}

}  // namespace quant_cases

namespace {

using namespace quant_cases;

// The CUDA products that the 8-bit integer tensor cores take (cuda::cuda_mm_x8: 8 rows of x,
// and 25 to 32 of q6_k; cuda::cuda_gemm_x8: 25 to 256 rows but for q6_k; K whole stages of
// 256 values, weight rows of whole 16-byte words, q6_k 8-byte words): x quantized to int8
// per 32 values, as the matrix-vector kernels do.
bool cuda_x8_product(DType t, int64_t m, int64_t k) {
  const bool formats = t == DType::q4_0 || t == DType::q4_1 || t == DType::q8_0 || t == DType::q5_0 ||
                       t == DType::q5_1 || t == DType::q4_k || t == DType::q5_k || t == DType::q6_k;
  const bool rows = m == 8 || (m >= 25 && m <= 32 && t == DType::q6_k) || (m >= 25 && m <= 256 && t != DType::q6_k);
  return formats && rows && k % (t == DType::q6_k ? 1024 : 256) == 0;
}

std::vector<int64_t> k_values(DType t) {
  switch (dtype_block_elems(t)) {
    case 32: return {64, 576, 1056};
    case 256: return {256, 768, 2048};
    default: return {1, 333, 1056};
  }
}

void add_case(std::vector<OpCase>& cases, DType t, int64_t m, int64_t n, int64_t k, int64_t x_pad,
              bool random_bits) {
  const std::string name = cat("matmul/", dtype_name(t), "/m", m, "_n", n, "_k", k,
                               x_pad ? "_xstrided" : "", random_bits ? "_randbits" : "");
  cases.push_back({name, [=](OpContext& c) {
    TensorView x = c.random_input_strided(DType::f32, {m, k}, x_pad);
    std::vector<double> w_values, offsets;
    TensorView w = weight_input(c, t, {n, k}, w_values, offsets, random_bits);
    TensorView out = c.output(DType::f32, {m, n});
    ops::matmul(c.session(), x, w, out);
    c.run();
    double atol = 0;
    const bool cuda = c.backend().kind() == BackendKind::cuda;
    const bool x8 = cuda && cuda_x8_product(t, m, k);
    const XRounding x_rounding = x8                             ? kXInt8PerBlock
                                 : m <= ops::kMatmulMvMaxRows ? mv_x_rounding(c.backend(), t)
                                                              : mm_x_rounding(c.backend(), t);
    double input_rounding = 0;  // u_x + u_w of the f16/bf16 tensor-core kernels
    if (cuda && !x8 && m > ops::kMatmulMvMaxRows && t != DType::f32) {
      input_rounding = (t == DType::bf16 ? 0x1p-8 : 0x1p-11) + (dtype_is_quantized(t) ? 0x1p-11 : 0.0);
    }
    const std::vector<double> ref =
        matmul_reference(c.host(x), w_values, offsets, m, n, k, atol, x_rounding, input_rounding);
    c.expect_near(out, ref, Tolerance{atol, 0.0});
  }});
}

}  // namespace

ONEPASS_OP_CASES(matmul) {
  for (DType t : weight_types()) {
    for (int64_t m : {1, 3, 17}) {
      for (int64_t n : {1, 7, 333}) {
        // Every third shape reads x with padded rows.
        for (int64_t k : k_values(t)) add_case(cases, t, m, n, k, n == 7 ? 5 : 0, false);
      }
    }
    const int64_t k = std::max<int64_t>(dtype_block_elems(t) * 2, 96);
    if (dtype_is_quantized(t)) {
      add_case(cases, t, 1, 33, k, 0, true);   // mv, one row of x (the CPU's byte kernels)
      add_case(cases, t, 2, 33, k, 0, true);   // mv
      add_case(cases, t, 19, 33, k, 0, true);  // mm
    }
    // Longer rows: 5 of the CUDA matrix-vector kernels' chunks (32 units or 128 dense
    // words), the last one partial.
    const int64_t k_split = dtype_block_elems(t) == 256 ? 256 * 17
                            : dtype_is_quantized(t)      ? 32 * 133
                                                         : 16 / static_cast<int64_t>(dtype_size(t)) * 131;
    add_case(cases, t, 1, 333, k_split, 0, false);
    add_case(cases, t, 3, 7, k_split, 0, false);
    // Rows of >= 2048 values with few outputs: the CUDA matrix-vector kernels then take one
    // output row per warp (cuda::kCudaMvOneRowMinK).
    add_case(cases, t, 2, 45, dtype_block_elems(t) == 256 ? 2304 : 2112, 0, false);
    // One row of x and long rows for the 32-value block formats: the CUDA one-row kernels
    // (mv1_*) stream 2 to 12 chunks per row pair through their ring, x strided or not;
    // from K = 4096 they split K between two warps per row pair (cuda::cuda_mv1_dims).
    if (dtype_is_quantized(t) && dtype_block_elems(t) == 32) {
      for (int64_t k_long : {512, 4096, 8192, 12288}) {
        add_case(cases, t, 1, 333, k_long, 0, false);
        add_case(cases, t, 1, 7, k_long, k_long == 4096 ? 5 : 0, false);
      }
    }
    // One row of x for q6_k: the CUDA one-row kernel gives each lane half a super-block of
    // one row, in items of 8 super-blocks per row pair; with k_values (1, 3 and 8 blocks)
    // and k_split (17): 10 and 16 blocks (a whole item and a partial one, two whole).
    if (t == DType::q6_k) {
      for (int64_t blocks : {10, 16}) {
        add_case(cases, t, 1, 333, 256 * blocks, 0, false);
        add_case(cases, t, 1, 7, 256 * blocks, blocks == 10 ? 5 : 0, false);
      }
    }
    // One row of x and rows of at least 4 KB for the dense types: the CUDA one-row kernel
    // then splits K between two warps per row pair (cuda::cuda_mv1_dims), halves of
    // 2 / 2, 2 / 3 and 8 / 9 chunks of 64 words (the last one partial).
    if (!dtype_is_quantized(t)) {
      const int64_t per_word = 16 / static_cast<int64_t>(dtype_size(t));
      for (int64_t words : {256, 320, 1025}) {
        add_case(cases, t, 1, 333, per_word * words, 0, false);
        add_case(cases, t, 1, 7, per_word * words, words == 320 ? 5 : 0, false);
      }
    }
    // One row of x and dense weight rows far apart (a column slice of a wider matrix): the
    // row stride says 4+ KB, but K = 256 is one chunk, so the CUDA one-row kernel must not
    // split K (a part without chunks would never finish its row pairs).
    if (!dtype_is_quantized(t)) {
      cases.push_back({cat("matmul/", dtype_name(t), "/m1_n7_k256_wide_rows"), [=](OpContext& c) {
        constexpr int64_t kN = 7, kK = 256, kWide = 2304;
        TensorView x = c.random_input(DType::f32, {1, kK});
        std::vector<double> wide_values, wide_offsets;
        TensorView wide = weight_input(c, t, {kN, kWide}, wide_values, wide_offsets, false);
        TensorView w(wide.view, t, Shape{kN, kK}, wide.row_stride);
        std::vector<double> w_values, offsets(static_cast<size_t>(kN * kK), 0.0);
        for (int64_t r = 0; r < kN; ++r) {
          w_values.insert(w_values.end(), wide_values.begin() + r * kWide, wide_values.begin() + r * kWide + kK);
        }
        TensorView out = c.output(DType::f32, {1, kN});
        ops::matmul(c.session(), x, w, out);
        c.run();
        double atol = 0;
        const std::vector<double> ref = matmul_reference(c.host(x), w_values, offsets, 1, kN, kK, atol, kXF32, 0.0);
        c.expect_near(out, ref, Tolerance{atol, 0.0});
      }});
    }
    // One row of x and more row pairs than the CUDA one-row kernels have warps (2 blocks
    // of 8 per SM: 2,112 on 132 SMs), so warps take several pairs in turn.
    add_case(cases, t, 1, 4500, 512, 0, false);
    // One row of x, rows of at most 32 units and at least 8192 rows: the CUDA short-row
    // kernel (two row pairs per warp item, cuda::cuda_mv1_short_rows) for the one-unit
    // formats, with the last item's second pair missing (8194) or half missing (8195).
    if (t == DType::q4_0 || t == DType::q4_1 || t == DType::q8_0) {
      add_case(cases, t, 1, 8195, 576, 0, false);
      add_case(cases, t, 1, 8194, 1024, 7, false);
      add_case(cases, t, 1, 8192, 32, 0, false);
    }
    // A few dozen rows of x and few weight rows (batched decode steps): the CUDA tensor-core
    // mm splits K among the blocks of a cluster (cuda::cuda_mm_splits, 132 SMs): 32-row
    // tiles in 8 splits (f16 and bf16; the block formats take 32 rows on the integer tensor
    // cores); in 4 splits of 12, 12, 12 and 0 K steps; two M tiles with a tail, two N tiles
    // with a tail and padded x rows in 6 splits; 16-row tiles in 3 splits.
    if (t != DType::f32) {
      add_case(cases, t, 32, 200, 4096, 0, false);
      add_case(cases, t, 24, 96, 2304, 0, false);
      add_case(cases, t, 50, 70, 3072, 4, false);
      add_case(cases, t, 12, 130, 1536, 0, false);
    }
    // 8 rows of x on the block formats: the CUDA 8-bit integer tensor-core products
    // (cuda::cuda_mm_x8_dims, 132 SMs, 128-row tiles): 3 N tiles with a tail in 4 splits;
    // strided x and 2 N tiles, 12 stages in 8 splits of 2 (the last two empty); one stage,
    // unsplit (sums stored directly); 18 N tiles in 18 groups of 8 splits; for the two
    // formats of the reference models, 157 N tiles taken 5 at a time (the cluster adds 4
    // tiles' partials, then 1).
    if (dtype_is_quantized(t)) {
      add_case(cases, t, 8, 333, 1024, 0, false);
      add_case(cases, t, 8, 130, 3072, 3, false);
      add_case(cases, t, 8, 70, 256, 0, dtype_block_elems(t) == 256);
      add_case(cases, t, 8, 2200, 2048, 0, false);
      if (t == DType::q4_0 || t == DType::q6_k) add_case(cases, t, 8, 20000, 2048, 0, false);
      // 25 to 32 rows, padded x rows and strided x: q6_k's four x tiles (mm_x8_m32); the
      // other formats' gemm_x8 in 256-row weight tiles (2, the last one partial, in 16 K
      // ranges on 132 SMs, cuda::cuda_gemm_x8_splits).
      add_case(cases, t, 27, 300, 4096, 3, false);
      // 33 to 256 rows: gemm_x8 in 32-row x tiles (2, the last one partial) by 128 weight
      // rows (5 with a tail) in one stage, unsplit, strided x; in 64-row x tiles (2) in 8 K
      // ranges; 4 x tiles, the last one partial, and 2 weight tiles, strided x, in 4.
      add_case(cases, t, 40, 600, 256, 3, false);
      add_case(cases, t, 128, 200, 2048, 0, false);
      add_case(cases, t, 200, 130, 1024, 5, false);
    }
    add_case(cases, t, 70, 45, k, 3, false);  // two CPU tiles along M
    // Three CUDA tensor-core tiles along M and N, each with a tail, and 12 K steps.
    add_case(cases, t, 150, 260, 768, 0, false);
  }
  // Argument checks: wrong K, wrong out shape, unsupported weight type.
  cases.push_back({"matmul/errors", [](OpContext& c) {
    TensorView x = c.random_input(DType::f32, {2, 64});
    std::vector<double> values, offsets;
    TensorView w = weight_input(c, DType::q4_0, {5, 96}, values, offsets, false);
    TensorView out = c.output(DType::f32, {2, 5});
    EXPECT_THROW(ops::matmul(c.session(), x, w, out), Error);
    TensorView w64 = weight_input(c, DType::q8_0, {5, 64}, values, offsets, false);
    EXPECT_THROW(ops::matmul(c.session(), x, w64, c.output(DType::f32, {2, 6})), Error);
    EXPECT_THROW(ops::matmul(c.session(), x, c.input_i32({5, 64}, std::vector<int32_t>(320)), out), Error);
    try {
      ops::matmul(c.session(), x, w, out);
    } catch (const Error& e) {
      EXPECT_EQ(e.where(), "matmul");
      EXPECT_NE(std::string(e.what()).find("expected K = 96"), std::string::npos) << e.what();
    }
    c.run();
  }});
}

}  // namespace onepass::testing
