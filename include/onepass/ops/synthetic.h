// Synthetic kernels for testing the execution core: cheap, order-sensitive u32 mixing,
// so any misordered or concurrent dependent dispatch changes the result.
#pragma once

#include <cstdint>

namespace onepass::ops {

/// out[i] = mix(a[i], b[i % b_len], salt) for i < n; b may be null (b_len 0). Kernel
/// "test_mix_u32". The CPU kernel runs 256 values per block; CUDA one value per thread.
struct MixArgs {
  const uint32_t* a;
  const uint32_t* b;
  uint32_t* out;
  int64_t n;
  int64_t b_len;
  uint32_t salt;
};

inline constexpr int64_t kMixBlock = 256;

/// The mixing function (host and device).
#if defined(__CUDACC__)
__host__ __device__
#endif
inline uint32_t mix_u32(uint32_t a, uint32_t b, uint32_t salt) {
  uint32_t h = a * 0x9e3779b1u ^ (b + 0x7f4a7c15u + (salt << 6) + (salt >> 2));
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

}  // namespace onepass::ops
