// x86 SIMD regions of the CPU kernels. Functions between ONEPASS_AVX2_BEGIN and
// ONEPASS_AVX2_END are compiled for AVX2 + FMA + F16C, those between ONEPASS_AVX512_BEGIN
// and ONEPASS_AVX512_END for AVX-512F on top, those between ONEPASS_AVX512_VNNI_BEGIN and
// ONEPASS_AVX512_VNNI_END for AVX-512 BW, VL, VNNI and GFNI on top of that (ONEPASS_AMX_BEGIN / END: and
// the AMX tiles with 8-bit products); each must only be called after
// isa_supported() (quant_blocks.h) has found those extensions. The rest of the library
// stays on the baseline ISA, so it runs on any x86-64 CPU.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ONEPASS_CPU_X86 1
// GCC 12 reports its own _mm512_undefined_* helpers (`__m512i __Y = __Y;`) as
// uninitialised once inlined; the pragmas mark the intrinsics' lines, not ours.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop
#if defined(__clang__)
// _Pragma takes exactly one string literal, so these lines stay long.
// clang-format off
#define ONEPASS_AVX2_BEGIN _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c\"))), apply_to = function)")
#define ONEPASS_AVX2_END _Pragma("clang attribute pop")
#define ONEPASS_AVX512_BEGIN _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx2,fma,f16c\"))), apply_to = function)")
#define ONEPASS_AVX512_END _Pragma("clang attribute pop")
#define ONEPASS_AVX512_VNNI_BEGIN _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512bw,avx512vl,avx512vnni,gfni,avx2,fma,f16c\"))), apply_to = function)")
#define ONEPASS_AVX512_VNNI_END _Pragma("clang attribute pop")
#define ONEPASS_AVX512_VNNI_VBMI_BEGIN _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,gfni,avx2,fma,f16c\"))), apply_to = function)")
#define ONEPASS_AVX512_VNNI_VBMI_END _Pragma("clang attribute pop")
#define ONEPASS_AMX_BEGIN _Pragma("clang attribute push(__attribute__((target(\"amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,gfni,avx2,fma,f16c\"))), apply_to = function)")
#define ONEPASS_AMX_END _Pragma("clang attribute pop")
// clang-format on
#else
#define ONEPASS_AVX2_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma,f16c\")")
#define ONEPASS_AVX2_END _Pragma("GCC pop_options")
#define ONEPASS_AVX512_BEGIN \
  _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx2,fma,f16c\")")
#define ONEPASS_AVX512_END _Pragma("GCC pop_options")
#define ONEPASS_AVX512_VNNI_BEGIN \
  _Pragma("GCC push_options")     \
      _Pragma("GCC target(\"avx512f,avx512bw,avx512vl,avx512vnni,gfni,avx2,fma,f16c\")")
#define ONEPASS_AVX512_VNNI_END _Pragma("GCC pop_options")
// avx512_vnni plus VBMI (byte permutes across the vector), for the kernels that check for it.
#define ONEPASS_AVX512_VNNI_VBMI_BEGIN \
  _Pragma("GCC push_options")          \
      _Pragma("GCC target(\"avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,gfni,avx2,fma,f16c\")")
#define ONEPASS_AVX512_VNNI_VBMI_END _Pragma("GCC pop_options")
// avx512_vnni plus the AMX tiles with 8-bit integer products (Isa::amx).
#define ONEPASS_AMX_BEGIN     \
  _Pragma("GCC push_options") \
      _Pragma("GCC target(\"amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,gfni,avx2,fma,f16c\")")
#define ONEPASS_AMX_END _Pragma("GCC pop_options")
#endif
#else
#define ONEPASS_CPU_X86 0
#endif

#if ONEPASS_CPU_X86
#include <cstdint>
#include <cstring>

ONEPASS_AVX2_BEGIN
namespace onepass::cpu::simd {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/// An f16 value at any address, as f32.
inline float load_half(const void* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return _cvtsh_ss(bits);
}

}  // namespace onepass::cpu::simd
ONEPASS_AVX2_END
#endif
