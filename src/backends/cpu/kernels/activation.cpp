// CPU kernels: gelu, silu, softcap, silu_mul, gelu_mul (blocks of kCpuElementwiseBlock
// values), and activate_rows, the f32 rows they and the fused products compute with.
//
// On AVX-512 and AVX2 exp is 2^n · p(r) with r = x - n ln 2 (ln 2 in two parts, so r is exact
// to f32) and p the degree-7 Taylor polynomial, whose truncation error for |r| <= ln 2 / 2 is
// under 2^-27; tanh(u) is the odd Taylor polynomial to u^11 for |u| < 1/4 (truncation under
// 2^-34 relative) and 1 - 2 / (e^2|u| + 1) beyond (its cancellation costs at most a few ulp
// there, where |tanh| >= 0.24), with u's sign. NaN stays NaN.
#include "onepass/ops/activation.h"

#include <algorithm>
#include <cmath>

#include "../cpu_kernels.h"
#include "float_types.h"
#include "quant_blocks.h"
#include "row_math.h"
#include "onepass/ops/elementwise.h"
#include "simd_x86.h"

namespace onepass::cpu {
namespace {

// The scalar rows: the portable path.
void activate_rows_scalar(Activation act, const float* x, const float* up, float* out, int64_t n, float cap) {
  for (int64_t j = 0; j < n; ++j) {
    float y = act == Activation::silu ? silu(x[j]) : act == Activation::gelu ? gelu(x[j]) : std::tanh(x[j] / cap) * cap;
    if (up != nullptr) y *= up[j];
    out[j] = y;
  }
}

// Coefficients shared by both vector sets.
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2High = 0.693359375f;        // ln 2 = kLn2High + kLn2Low, kLn2High's 9 bits
constexpr float kLn2Low = -2.12194440e-4f;      // make n · kLn2High exact for |n| < 2^15
constexpr float kExpInputMax = 88.72283935546875f;  // e^x past this is inf in f32
constexpr float kExpInputMin = -103.972084045410f;  // and below this 0
constexpr float kTanhSmall = 0.25f;
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

}  // namespace
}  // namespace onepass::cpu

#if ONEPASS_CPU_X86
ONEPASS_AVX512_BEGIN
namespace onepass::cpu::avx512 {
namespace {

inline __m512 exp16(__m512 x) {
  // min / max with x second return x when it is NaN.
  x = _mm512_max_ps(_mm512_set1_ps(kExpInputMin), _mm512_min_ps(_mm512_set1_ps(kExpInputMax), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2High), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Low), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

inline __m512 tanh16(__m512 u) {
  const __m512 a = _mm512_abs_ps(u);
  const __m512 a2 = _mm512_mul_ps(a, a);
  __m512 p = _mm512_set1_ps(-1382.0f / 155925.0f);
  p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(62.0f / 2835.0f));
  p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(-17.0f / 315.0f));
  p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(2.0f / 15.0f));
  p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(-1.0f / 3.0f));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, a2), a, a);
  const __m512 e = exp16(_mm512_add_ps(a, a));
  const __m512 large = _mm512_sub_ps(_mm512_set1_ps(1.0f), _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
  const __mmask16 is_small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(kTanhSmall), _CMP_LT_OQ);
  const __m512 t = _mm512_mask_blend_ps(is_small, large, small);
  // u's sign onto |tanh u| (NaN u: e and so t are NaN already).
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(u), _mm512_set1_epi32(static_cast<int>(0x80000000u)));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), sign));
}

inline __m512 activate16(Activation act, __m512 x, float cap) {
  if (act == Activation::silu) {
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
  }
  if (act == Activation::gelu) {
    const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
    const __m512 u = _mm512_mul_ps(_mm512_set1_ps(kSqrt2OverPi), _mm512_fmadd_ps(_mm512_set1_ps(kGeluCubic), x3, x));
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(_mm512_set1_ps(1.0f), tanh16(u)));
  }
  return _mm512_mul_ps(tanh16(_mm512_div_ps(x, _mm512_set1_ps(cap))), _mm512_set1_ps(cap));
}

void activate_rows(Activation act, const float* x, const float* up, float* out, int64_t n, float cap) {
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 live = n - j >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - j)) - 1);
    __m512 y = activate16(act, _mm512_maskz_loadu_ps(live, x + j), cap);
    if (up != nullptr) y = _mm512_mul_ps(y, _mm512_maskz_loadu_ps(live, up + j));
    _mm512_mask_storeu_ps(out + j, live, y);
  }
}

}  // namespace
}  // namespace onepass::cpu::avx512
ONEPASS_AVX512_END

ONEPASS_AVX2_BEGIN
namespace onepass::cpu::avx2 {
namespace {

// 2^e for e in [-126, 127], built in the exponent field.
inline __m256 pow2(__m256i e) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
}

inline __m256 exp8(__m256 x) {
  // Within [-87.3, 88.7]: 2^n stays a normal f32 built in its exponent field (the result
  // is e^x to a few ulp or, past the ends, about 1e-38 or 2.5e38 instead of 0 or inf).
  // min / max with x second return x when it is NaN.
  x = _mm256_max_ps(_mm256_set1_ps(-87.3f), _mm256_min_ps(_mm256_set1_ps(88.7f), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2High), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Low), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // n in [-126, 128): split in two halves so that 2^n's exponent field never overflows.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(ni, 1);
  return _mm256_mul_ps(_mm256_mul_ps(p, pow2(half)), pow2(_mm256_sub_epi32(ni, half)));
}

inline __m256 tanh8(__m256 u) {
  const __m256 sign_mask = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
  const __m256 a = _mm256_andnot_ps(sign_mask, u);
  const __m256 a2 = _mm256_mul_ps(a, a);
  __m256 p = _mm256_set1_ps(-1382.0f / 155925.0f);
  p = _mm256_fmadd_ps(p, a2, _mm256_set1_ps(62.0f / 2835.0f));
  p = _mm256_fmadd_ps(p, a2, _mm256_set1_ps(-17.0f / 315.0f));
  p = _mm256_fmadd_ps(p, a2, _mm256_set1_ps(2.0f / 15.0f));
  p = _mm256_fmadd_ps(p, a2, _mm256_set1_ps(-1.0f / 3.0f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, a2), a, a);
  const __m256 e = exp8(_mm256_add_ps(a, a));
  const __m256 large = _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
  const __m256 t = _mm256_blendv_ps(large, small, _mm256_cmp_ps(a, _mm256_set1_ps(kTanhSmall), _CMP_LT_OQ));
  return _mm256_or_ps(t, _mm256_and_ps(u, sign_mask));  // NaN u: exp8 and so t are NaN
}

inline __m256 activate8(Activation act, __m256 x, float cap) {
  if (act == Activation::silu) {
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
  }
  if (act == Activation::gelu) {
    const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    const __m256 u = _mm256_mul_ps(_mm256_set1_ps(kSqrt2OverPi), _mm256_fmadd_ps(_mm256_set1_ps(kGeluCubic), x3, x));
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), _mm256_add_ps(_mm256_set1_ps(1.0f), tanh8(u)));
  }
  return _mm256_mul_ps(tanh8(_mm256_div_ps(x, _mm256_set1_ps(cap))), _mm256_set1_ps(cap));
}

void activate_rows(Activation act, const float* x, const float* up, float* out, int64_t n, float cap) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 y = activate8(act, _mm256_loadu_ps(x + j), cap);
    if (up != nullptr) y = _mm256_mul_ps(y, _mm256_loadu_ps(up + j));
    _mm256_storeu_ps(out + j, y);
  }
  if (j < n) {
    alignas(32) float in[8] = {}, gate[8] = {}, result[8];
    std::copy(x + j, x + n, in);
    if (up != nullptr) std::copy(up + j, up + n, gate);
    __m256 y = activate8(act, _mm256_load_ps(in), cap);
    if (up != nullptr) y = _mm256_mul_ps(y, _mm256_load_ps(gate));
    _mm256_store_ps(result, y);
    std::copy(result, result + (n - j), out + j);
  }
}

}  // namespace
}  // namespace onepass::cpu::avx2
ONEPASS_AVX2_END
#endif  // ONEPASS_CPU_X86

namespace onepass::cpu {

void activate_rows(Activation act, const float* x, const float* up, float* out, int64_t n, float cap) {
#if ONEPASS_CPU_X86
  const Isa isa = active_isa();
  if (isa >= Isa::avx512) return avx512::activate_rows(act, x, up, out, n, cap);
  if (isa == Isa::avx2) return avx2::activate_rows(act, x, up, out, n, cap);
#endif
  activate_rows_scalar(act, x, up, out, n, cap);
}

namespace {

enum class Unary { gelu, silu, softcap };

template <DType T, Unary kOp>
void unary_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  using E = Elem<T>;
  using S = typename E::storage;
  const auto& a = *static_cast<const ops::ActivationArgs*>(raw);
  for_spans(a.rows, a.cols, first, end, [&](int64_t r, int64_t c0, int64_t c1) {
    const S* x = static_cast<const S*>(a.x) + r * a.x_stride;
    S* o = static_cast<S*>(a.out) + r * a.out_stride;
    if constexpr (T == DType::f32) {
      constexpr Activation act = kOp == Unary::gelu ? Activation::gelu : kOp == Unary::silu ? Activation::silu : Activation::softcap;
      return activate_rows(act, x + c0, nullptr, o + c0, c1 - c0, a.cap);
    }
    for (int64_t c = c0; c < c1; ++c) {
      const float v = E::load(x[c]);
      float y;
      if constexpr (kOp == Unary::gelu) {
        y = gelu(v);
      } else if constexpr (kOp == Unary::silu) {
        y = silu(v);
      } else {
        y = std::tanh(v / a.cap) * a.cap;
      }
      o[c] = E::store(y);
    }
  });
}

// act(a) * b with act silu (SwiGLU) or gelu (GeGLU: Gemma).
template <DType T, Unary kGate>
void gated_mul_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  using E = Elem<T>;
  using S = typename E::storage;
  const auto& a = *static_cast<const ops::SiluMulArgs*>(raw);
  for_spans(a.rows, a.cols, first, end, [&](int64_t r, int64_t c0, int64_t c1) {
    const S* x = static_cast<const S*>(a.a) + r * a.a_stride;
    const S* y = static_cast<const S*>(a.b) + r * a.b_stride;
    S* o = static_cast<S*>(a.out) + r * a.out_stride;
    if constexpr (T == DType::f32) {
      return activate_rows(kGate == Unary::gelu ? Activation::gelu : Activation::silu, x + c0, y + c0, o + c0, c1 - c0);
    }
    for (int64_t c = c0; c < c1; ++c) {
      const float v = E::load(x[c]);
      const float gate = kGate == Unary::gelu ? gelu(v) : silu(v);
      o[c] = E::store(gate * E::load(y[c]));
    }
  });
}

}  // namespace

void register_activation_kernels(KernelRegistry& registry) {
  for_each_float_type([&]<DType T>() {
    const std::string t = Elem<T>::name;
    registry.add(make_cpu_kernel<ops::ActivationArgs>("gelu_" + t, unary_kernel<T, Unary::gelu>));
    registry.add(make_cpu_kernel<ops::ActivationArgs>("silu_" + t, unary_kernel<T, Unary::silu>));
    registry.add(
        make_cpu_kernel<ops::ActivationArgs>("softcap_" + t, unary_kernel<T, Unary::softcap>));
    registry.add(make_cpu_kernel<ops::SiluMulArgs>("silu_mul_" + t, gated_mul_kernel<T, Unary::silu>));
    registry.add(make_cpu_kernel<ops::SiluMulArgs>("gelu_mul_" + t, gated_mul_kernel<T, Unary::gelu>));
  });
}

}  // namespace onepass::cpu
