// Row arithmetic of the CPU attention kernels (sdpa, flash_decode, paged_attention): f32
// dot products and sums in a fixed order, and a cache row (f32, f16, bf16) as f32.
#pragma once

#include <bit>
#include <cstdint>

#include "float_types.h"

namespace onepass::cpu::attention_rows {

// Reductions in kLanes independent partial sums: they vectorise without reassociation
// and their order depends on the length alone.
inline constexpr int64_t kLanes = 8;

inline float dot(const float* a, const float* b, int64_t n) {
  float part[kLanes] = {};
  const int64_t body = n - n % kLanes;
  for (int64_t i = 0; i < body; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) part[j] += a[i + j] * b[i + j];
  }
  for (int64_t i = body; i < n; ++i) part[0] += a[i] * b[i];
  float sum = 0.0f;
  for (float p : part) sum += p;
  return sum;
}

inline float sum_of(const float* v, int64_t n) {
  float part[kLanes] = {};
  const int64_t body = n - n % kLanes;
  for (int64_t i = 0; i < body; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) part[j] += v[i + j];
  }
  for (int64_t i = body; i < n; ++i) part[0] += v[i];
  float sum = 0.0f;
  for (float p : part) sum += p;
  return sum;
}

// f16 -> f32 without branches, so a row converts in vector registers: move exponent and
// mantissa into place and rebias, then pick the inf/NaN or subnormal variant with bit
// masks (a ternary here becomes control flow and stops vectorisation).
// Bit-identical to f16_to_f32 for all 65536 inputs.
inline float f16_to_f32_masked(uint16_t h) {
  const uint32_t shifted = static_cast<uint32_t>(h & 0x7fffu) << 13;
  const uint32_t exponent = shifted & 0x0f800000u;
  const uint32_t normal = shifted + ((127u - 15u) << 23);
  const uint32_t special = normal + ((128u - 16u) << 23);  // exponent 31: inf / NaN
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(normal + (1u << 23)) -
                                                     std::bit_cast<float>(113u << 23));
  const uint32_t is_special = 0u - static_cast<uint32_t>(exponent == 0x0f800000u);
  const uint32_t is_subnormal = 0u - static_cast<uint32_t>(exponent == 0u);
  const uint32_t magnitude =
      (normal & ~(is_special | is_subnormal)) | (special & is_special) | (subnormal & is_subnormal);
  return std::bit_cast<float>(magnitude | (static_cast<uint32_t>(h & 0x8000u) << 16));
}

// One cache row (kv head, position) as f32: the row itself for f32 caches, else a
// converted copy in `tmp`.
template <DType C>
inline const float* cache_row(const void* cache, int64_t stride, int64_t row, float* tmp, int64_t n) {
  const auto* src = static_cast<const typename Elem<C>::storage*>(cache) + row * stride;
  if constexpr (C == DType::f32) {
    (void)tmp;
    (void)n;
    return src;
  } else if constexpr (C == DType::f16) {
    for (int64_t d = 0; d < n; ++d) tmp[d] = f16_to_f32_masked(src[d]);
    return tmp;
  } else {
    for (int64_t d = 0; d < n; ++d)
      tmp[d] = std::bit_cast<float>(static_cast<uint32_t>(src[d]) << 16);
    return tmp;
  }
}

}  // namespace onepass::cpu::attention_rows
