// Host quantize / dequantize for the GGML block formats, the float types and MLX affine.
//
// q4_0, q4_1, q5_0, q5_1 and q8_0 quantize exactly as ggml's reference quantizers (and
// gguf-py) do, so their bytes can be compared with gguf-py's. The k-quants and the iq4
// formats use a small least-squares search of their own per sub-block; only their layout
// (and so dequantize) must match GGUF bit for bit.
//
// This file is compiled for the baseline ISA, so the compiler cannot fuse the
// multiply-adds of the decoders: dequantize() rounds every product like gguf-py does.
#include "onepass/ops/quant.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "onepass/core/error.h"

namespace onepass::ops {
namespace {

constexpr const char* kWhere = "quant";

// The nearest integer to v (ties to even) clamped to [lo, hi]; NaN gives lo. Clamping
// first keeps |v| < 2^22, where adding and subtracting 1.5 * 2^23 rounds exactly: unlike
// lround, no library call in the quantizers' inner loops.
int round_clamped(float v, int lo, int hi) {
  if (!(v >= static_cast<float>(lo))) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  constexpr float kMagic = 12582912.0f;
  return static_cast<int>((v + kMagic) - kMagic);
}

// --- 32-value formats (ggml's reference quantizers) ------------------------------------

void quantize_q4_0(const float* x, BlockQ4_0& b) {
  float amax = 0.0f;
  float max = 0.0f;  // the value of largest magnitude, sign kept (first one on ties)
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  // The extreme value maps to q = 0 exactly; the other end of the range loses one step.
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b.d = f32_to_f16(d);
  for (int j = 0; j < 16; ++j) {
    const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
    const int q1 = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
    b.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

void quantize_q4_1(const float* x, BlockQ4_1& b) {
  float lo = x[0];
  float hi = x[0];
  for (int j = 1; j < 32; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  const float d = (hi - lo) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b.d = f32_to_f16(d);
  b.m = f32_to_f16(lo);
  for (int j = 0; j < 16; ++j) {
    const int q0 = std::min(15, static_cast<int>((x[j] - lo) * id + 0.5f));
    const int q1 = std::min(15, static_cast<int>((x[j + 16] - lo) * id + 0.5f));
    b.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

// The 5-bit formats pack q's low 4 bits as q4_0 does and bit 4 of value j into bit j of qh.
void pack_5bit(const int* q, uint8_t qh[4], uint8_t qs[16]) {
  uint32_t high = 0;
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
  for (int j = 0; j < 32; ++j) high |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  std::memcpy(qh, &high, 4);
}

void quantize_q5_0(const float* x, BlockQ5_0& b) {
  float amax = 0.0f;
  float max = 0.0f;  // the value of largest magnitude, sign kept (first one on ties)
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -16.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b.d = f32_to_f16(d);
  int q[32];
  for (int j = 0; j < 32; ++j) q[j] = std::min(31, static_cast<int>(x[j] * id + 16.5f));
  pack_5bit(q, b.qh, b.qs);
}

void quantize_q5_1(const float* x, BlockQ5_1& b) {
  float lo = x[0];
  float hi = x[0];
  for (int j = 1; j < 32; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  const float d = (hi - lo) / 31.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b.d = f32_to_f16(d);
  b.m = f32_to_f16(lo);
  int q[32];
  for (int j = 0; j < 32; ++j) q[j] = std::min(31, static_cast<int>((x[j] - lo) * id + 0.5f));
  pack_5bit(q, b.qh, b.qs);
}

void quantize_q8_0(const float* x, BlockQ8_0& b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b.d = f32_to_f16(d);
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(std::round(x[j] * id));
}

// --- k-quants --------------------------------------------------------------------------

// Fits x[0..n) ~ scale * q - offset with integer q in [0, nmax], scale >= 0, offset >= 0
// (the formats subtract a non-negative min). Tries scales around (hi - lo) / nmax, refits
// scale and offset by least squares for each rounding, keeps the smallest squared error.
void fit_scale_offset(const float* x, int n, int nmax, float& scale, float& offset) {
  float lo = 0.0f;  // the offset cannot be negative, so the range always includes 0
  float hi = x[0];
  for (int j = 0; j < n; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  if (hi <= lo) {  // every value equals lo <= 0: exact with scale 0
    scale = 0.0f;
    offset = -lo;
    return;
  }
  double sx = 0, sxx = 0;
  for (int j = 0; j < n; ++j) {
    sx += x[j];
    sxx += static_cast<double>(x[j]) * x[j];
  }
  double best_err = std::numeric_limits<double>::infinity();
  scale = (hi - lo) / static_cast<float>(nmax);
  offset = -lo;
  for (int step = -4; step <= 4; ++step) {
    const float inv = (static_cast<float>(nmax) + 0.25f * static_cast<float>(step)) / (hi - lo);
    double sq = 0, sqq = 0, sxq = 0;
    for (int j = 0; j < n; ++j) {
      const int q = round_clamped(inv * (x[j] - lo), 0, nmax);
      sq += q;
      sqq += static_cast<double>(q) * q;
      sxq += static_cast<double>(x[j]) * q;
    }
    // Least squares for x ~ s * q + c, with c <= 0 enforced.
    const double det = n * sqq - sq * sq;
    double s = 0;
    double c = lo;
    if (det > 0) {
      s = (n * sxq - sx * sq) / det;
      c = (sqq * sx - sq * sxq) / det;
    }
    if (c > 0 || s <= 0) {
      c = 0;
      s = sqq > 0 ? sxq / sqq : 0;
    }
    if (s < 0) continue;
    // Σ (s q + c - x)^2, expanded so that no second pass over x is needed.
    const double err = s * s * sqq + 2 * s * c * sq - 2 * s * sxq + n * c * c - 2 * c * sx + sxx;
    if (err < best_err) {
      best_err = err;
      scale = static_cast<float>(s);
      offset = static_cast<float>(-c);
    }
  }
}

// Shared by q4_k and q5_k: chooses the super-block scales and the per-value q (0..nmax).
void quantize_kquant_asym(const float* x, int nmax, f16_bits& d_out, f16_bits& dmin_out,
                          uint8_t scales[12], uint8_t q[256]) {
  float scale[8];
  float offset[8];
  float max_scale = 0.0f;
  float max_offset = 0.0f;
  for (int i = 0; i < 8; ++i) {
    fit_scale_offset(x + 32 * i, 32, nmax, scale[i], offset[i]);
    max_scale = std::max(max_scale, scale[i]);
    max_offset = std::max(max_offset, offset[i]);
  }
  d_out = f32_to_f16(max_scale / 63.0f);
  dmin_out = f32_to_f16(max_offset / 63.0f);
  const float d = f16_to_f32(d_out);
  const float dmin = f16_to_f32(dmin_out);
  int sc[8];
  int mn[8];
  for (int i = 0; i < 8; ++i) {
    sc[i] = d > 0 ? round_clamped(scale[i] / d, 0, 63) : 0;
    mn[i] = dmin > 0 ? round_clamped(offset[i] / dmin, 0, 63) : 0;
  }
  kquant_pack_scales(sc, mn, scales);
  // Round each value against the scale and offset the decoder will actually use.
  for (int i = 0; i < 8; ++i) {
    const float s = d * static_cast<float>(sc[i]);
    const float o = dmin * static_cast<float>(mn[i]);
    const float inv = s > 0 ? 1.0f / s : 0.0f;
    for (int l = 0; l < 32; ++l) {
      q[32 * i + l] = static_cast<uint8_t>(round_clamped((x[32 * i + l] + o) * inv, 0, nmax));
    }
  }
}

void quantize_q4_k(const float* x, BlockQ4_K& b) {
  uint8_t q[256];
  quantize_kquant_asym(x, 15, b.d, b.dmin, b.scales, q);
  for (int p = 0; p < 4; ++p) {
    for (int l = 0; l < 32; ++l) {
      b.qs[32 * p + l] = static_cast<uint8_t>(q[64 * p + l] | (q[64 * p + 32 + l] << 4));
    }
  }
}

void quantize_q5_k(const float* x, BlockQ5_K& b) {
  uint8_t q[256];
  quantize_kquant_asym(x, 31, b.d, b.dmin, b.scales, q);
  std::memset(b.qh, 0, sizeof(b.qh));
  for (int p = 0; p < 4; ++p) {
    for (int l = 0; l < 32; ++l) {
      const int lo = q[64 * p + l];
      const int hi = q[64 * p + 32 + l];
      b.qs[32 * p + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
    }
  }
  for (int i = 0; i < 8; ++i) {
    for (int l = 0; l < 32; ++l) {
      b.qh[l] = static_cast<uint8_t>(b.qh[l] | (((q[32 * i + l] >> 4) & 1) << i));
    }
  }
}

// Fits x[0..16) ~ s * q with q in [qmin, qmax] (qmin = -qmax - 1): the value of largest
// magnitude is mapped near either end of the range, and s is refitted by least squares for
// each rounding.
float fit_symmetric_scale(const float* x, int qmin, int qmax) {
  float amax = 0.0f;
  float vmax = 0.0f;
  for (int j = 0; j < 16; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      vmax = x[j];
    }
  }
  if (amax == 0.0f) return 0.0f;
  float best = vmax / static_cast<float>(qmin);
  double best_fit = -1;
  const float lo = static_cast<float>(qmin);
  const float hi = static_cast<float>(qmax);
  for (float target : {lo, lo + 0.25f, lo + 0.5f, lo + 0.75f, lo + 1.0f, hi, hi - 0.25f, hi - 0.5f}) {
    const float inv = target / vmax;
    double sxq = 0, sqq = 0;
    for (int j = 0; j < 16; ++j) {
      const int q = round_clamped(x[j] * inv, qmin, qmax);
      sxq += static_cast<double>(x[j]) * q;
      sqq += static_cast<double>(q) * q;
    }
    if (sqq == 0) continue;
    // With s = Σxq / Σq² the squared error is Σx² - (Σxq)² / Σq²: maximise the last term.
    const double fit = sxq * sxq / sqq;
    if (fit > best_fit) {
      best_fit = fit;
      best = static_cast<float>(sxq / sqq);
    }
  }
  return best;
}

void quantize_q6_k(const float* x, BlockQ6_K& b) {
  float scale[16];
  float max_abs = 0.0f;
  for (int i = 0; i < 16; ++i) {
    scale[i] = fit_symmetric_scale(x + 16 * i, -32, 31);
    max_abs = std::max(max_abs, std::fabs(scale[i]));
  }
  b.d = f32_to_f16(max_abs / 127.0f);
  const float d = f16_to_f32(b.d);
  uint8_t q[256];
  for (int i = 0; i < 16; ++i) {
    const int sc = d > 0 ? round_clamped(scale[i] / d, -128, 127) : 0;
    b.scales[i] = static_cast<int8_t>(sc);
    const float s = d * static_cast<float>(sc);
    const float inv = s != 0.0f ? 1.0f / s : 0.0f;
    for (int r = 0; r < 16; ++r) {
      const int v = round_clamped(x[16 * i + r] * inv, -32, 31);
      q[16 * i + r] = static_cast<uint8_t>(v + 32);
    }
  }
  std::memset(b.ql, 0, sizeof(b.ql));
  std::memset(b.qh, 0, sizeof(b.qh));
  for (int h = 0; h < 2; ++h) {
    for (int s = 0; s < 4; ++s) {
      for (int l = 0; l < 32; ++l) {
        const int v = q[128 * h + 32 * s + l];
        uint8_t& low = b.ql[64 * h + l + 32 * (s & 1)];
        low = static_cast<uint8_t>(low | ((v & 0xF) << (s < 2 ? 0 : 4)));
        uint8_t& high = b.qh[32 * h + l];
        high = static_cast<uint8_t>(high | ((v >> 4) << (2 * s)));
      }
    }
  }
}

void quantize_q2_k(const float* x, BlockQ2_K& b) {
  float scale[16];
  float offset[16];
  float max_scale = 0.0f;
  float max_offset = 0.0f;
  for (int i = 0; i < 16; ++i) {
    fit_scale_offset(x + 16 * i, 16, 3, scale[i], offset[i]);
    max_scale = std::max(max_scale, scale[i]);
    max_offset = std::max(max_offset, offset[i]);
  }
  b.d = f32_to_f16(max_scale / 15.0f);
  b.dmin = f32_to_f16(max_offset / 15.0f);
  const float d = f16_to_f32(b.d);
  const float dmin = f16_to_f32(b.dmin);
  std::memset(b.qs, 0, sizeof(b.qs));
  for (int i = 0; i < 16; ++i) {
    const int sc = d > 0 ? round_clamped(scale[i] / d, 0, 15) : 0;
    const int mn = dmin > 0 ? round_clamped(offset[i] / dmin, 0, 15) : 0;
    b.scales[i] = static_cast<uint8_t>(sc | (mn << 4));
    // Round each value against the scale and offset the decoder will actually use.
    const float s = d * static_cast<float>(sc);
    const float o = dmin * static_cast<float>(mn);
    const float inv = s > 0 ? 1.0f / s : 0.0f;
    for (int r = 0; r < 16; ++r) {
      const int e = 16 * i + r;
      const int q = round_clamped((x[e] + o) * inv, 0, 3);
      b.qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>(q << (2 * (e % 128 / 32)));
    }
  }
}

void quantize_q3_k(const float* x, BlockQ3_K& b) {
  float scale[16];
  float max_abs = 0.0f;
  for (int i = 0; i < 16; ++i) {
    scale[i] = fit_symmetric_scale(x + 16 * i, -4, 3);
    max_abs = std::max(max_abs, std::fabs(scale[i]));
  }
  b.d = f32_to_f16(max_abs / 31.0f);
  const float d = f16_to_f32(b.d);
  std::memset(b.hmask, 0, sizeof(b.hmask));
  std::memset(b.qs, 0, sizeof(b.qs));
  std::memset(b.scales, 0, sizeof(b.scales));
  for (int i = 0; i < 16; ++i) {
    const int sc = d > 0 ? round_clamped(scale[i] / d, -32, 31) : 0;
    const int field = sc + 32;
    b.scales[i % 8] = static_cast<uint8_t>(b.scales[i % 8] | ((field & 0xF) << (i < 8 ? 0 : 4)));
    b.scales[8 + i % 4] = static_cast<uint8_t>(b.scales[8 + i % 4] | ((field >> 4) << (2 * (i / 4))));
    const float s = d * static_cast<float>(sc);
    const float inv = s != 0.0f ? 1.0f / s : 0.0f;
    for (int r = 0; r < 16; ++r) {
      const int e = 16 * i + r;
      const int q = round_clamped(x[e] * inv, -4, 3) + 4;  // 0..7: bit 2 is the hmask bit
      b.qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>((q & 3) << (2 * (e % 128 / 32)));
      b.hmask[e % 32] |= static_cast<uint8_t>((q >> 2) << (e / 32));
    }
  }
}

// Index of the kIq4Values entry nearest v (the lower one on ties).
int nearest_iq4(float v) {
  int lo = 0;
  int hi = 15;
  while (hi - lo > 1) {  // kIq4Values is increasing
    const int mid = (lo + hi) / 2;
    (v < static_cast<float>(kIq4Values[mid]) ? hi : lo) = mid;
  }
  return v - static_cast<float>(kIq4Values[lo]) <= static_cast<float>(kIq4Values[hi]) - v ? lo : hi;
}

// Fits x[0..n) ~ s * kIq4Values[q]: maps the value of largest magnitude near either end of
// the grid, picks the nearest entries, refits s by least squares for each choice and keeps
// the best. Returns s (0 for an all-zero block).
float fit_iq4_scale(const float* x, int n) {
  float amax = 0.0f;
  float vmax = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      vmax = x[j];
    }
  }
  if (amax == 0.0f) return 0.0f;
  float best = vmax / static_cast<float>(kIq4Values[0]);
  double best_fit = -1;
  for (int step = -10; step <= 10; ++step) {
    // The largest value maps to -127 + step / 2 (or to 113 - step / 2 on the other side).
    for (float end : {static_cast<float>(kIq4Values[0]), static_cast<float>(kIq4Values[15])}) {
      const float target = end + (end < 0 ? 0.5f : -0.5f) * static_cast<float>(step);
      const float inv = target / vmax;
      double sxq = 0, sqq = 0;
      for (int j = 0; j < n; ++j) {
        const double v = kIq4Values[nearest_iq4(x[j] * inv)];
        sxq += x[j] * v;
        sqq += v * v;
      }
      const double fit = sxq * sxq / sqq;  // Σx² minus the squared error of s = Σxv / Σv²
      if (fit > best_fit) {
        best_fit = fit;
        best = static_cast<float>(sxq / sqq);
      }
    }
  }
  return best;
}

// Nibble indices of 32 values against scale s, packed as q4_0 (value j low, j + 16 high).
void pack_iq4(const float* x, float s, uint8_t qs[16]) {
  const float inv = s != 0.0f ? 1.0f / s : 0.0f;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>(nearest_iq4(x[j] * inv) | (nearest_iq4(x[j + 16] * inv) << 4));
  }
}

void quantize_iq4_nl(const float* x, BlockIQ4_NL& b) {
  b.d = f32_to_f16(fit_iq4_scale(x, 32));
  pack_iq4(x, f16_to_f32(b.d), b.qs);
}

void quantize_iq4_xs(const float* x, BlockIQ4_XS& b) {
  float scale[8];
  float max_abs = 0.0f;
  for (int i = 0; i < 8; ++i) {
    scale[i] = fit_iq4_scale(x + 32 * i, 32);
    max_abs = std::max(max_abs, std::fabs(scale[i]));
  }
  b.d = f32_to_f16(max_abs / 31.0f);
  const float d = f16_to_f32(b.d);
  b.scales_h = 0;
  std::memset(b.scales_l, 0, sizeof(b.scales_l));
  for (int i = 0; i < 8; ++i) {
    const int sc = d > 0 ? round_clamped(scale[i] / d, -32, 31) : 0;
    const int field = sc + 32;
    b.scales_l[i / 2] = static_cast<uint8_t>(b.scales_l[i / 2] | ((field & 0xF) << (4 * (i % 2))));
    b.scales_h = static_cast<uint16_t>(b.scales_h | ((field >> 4) << (2 * i)));
    pack_iq4(x + 32 * i, d * static_cast<float>(sc), b.qs + 16 * i);
  }
}

template <typename Block, typename Fn>
void quantize_blocks(const float* src, int64_t n, void* dst, int block_elems, Fn fn) {
  auto* out = static_cast<Block*>(dst);
  for (int64_t b = 0; b < n / block_elems; ++b) {
    Block block{};
    fn(src + b * block_elems, block);
    std::memcpy(out + b, &block, sizeof(Block));
  }
}

template <typename Block>
void dequantize_blocks(const void* src, int64_t n, float* dst, int block_elems) {
  const auto* in = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / block_elems; ++b) {
    Block block;  // copied: GGUF data need not be aligned for Block
    std::memcpy(&block, in + b * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
    dequantize_block(block, dst + b * block_elems);
  }
}

void check_count(DType type, int64_t n, const void* src, const void* dst) {
  check(is_weight_type(type), kWhere, dtype_name(type), " is not a weight type (",
        weight_type_names(), ")");
  const int64_t block = dtype_block_elems(type);
  check(n >= 0 && n % block == 0, kWhere, dtype_name(type), " stores values in blocks of ", block,
        "; ", n, " values is not a whole number of blocks");
  check(n == 0 || (src != nullptr && dst != nullptr), kWhere, "null pointer for ", n, " values");
}

uint16_t to_scale_bits(DType t, float v) {
  return t == DType::bf16 ? f32_to_bf16(v) : f32_to_f16(v);
}
float from_scale_bits(DType t, uint16_t v) {
  return t == DType::bf16 ? bf16_to_f32(v) : f16_to_f32(v);
}

}  // namespace

bool is_weight_type(DType type) {
  switch (type) {
    case DType::f32:
    case DType::f16:
    case DType::bf16:
    case DType::q4_0:
    case DType::q4_1:
    case DType::q8_0:
    case DType::q4_k:
    case DType::q5_k:
    case DType::q6_k:
    case DType::q5_0:
    case DType::q5_1:
    case DType::q2_k:
    case DType::q3_k:
    case DType::iq4_nl:
    case DType::iq4_xs:
      return true;
    default:
      return false;
  }
}

const std::string& weight_type_names() {
  static const std::string names = [] {
    std::string out;
    for (int i = 0; i < kDTypeCount; ++i) {
      const auto type = static_cast<DType>(i);
      if (!is_weight_type(type)) continue;
      out += out.empty() ? "" : ", ";
      out += dtype_name(type);
    }
    return out;
  }();
  return names;
}

void quantize(DType type, const float* src, int64_t n, void* dst) {
  check_count(type, n, src, dst);
  switch (type) {
    case DType::f32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::f16:
    case DType::bf16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        out[i] = type == DType::f16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
      }
      return;
    }
    case DType::q4_0:
      return quantize_blocks<BlockQ4_0>(src, n, dst, 32, quantize_q4_0);
    case DType::q4_1:
      return quantize_blocks<BlockQ4_1>(src, n, dst, 32, quantize_q4_1);
    case DType::q8_0:
      return quantize_blocks<BlockQ8_0>(src, n, dst, 32, quantize_q8_0);
    case DType::q4_k:
      return quantize_blocks<BlockQ4_K>(src, n, dst, 256, quantize_q4_k);
    case DType::q5_k:
      return quantize_blocks<BlockQ5_K>(src, n, dst, 256, quantize_q5_k);
    case DType::q6_k:
      return quantize_blocks<BlockQ6_K>(src, n, dst, 256, quantize_q6_k);
    case DType::q5_0:
      return quantize_blocks<BlockQ5_0>(src, n, dst, 32, quantize_q5_0);
    case DType::q5_1:
      return quantize_blocks<BlockQ5_1>(src, n, dst, 32, quantize_q5_1);
    case DType::q2_k:
      return quantize_blocks<BlockQ2_K>(src, n, dst, 256, quantize_q2_k);
    case DType::q3_k:
      return quantize_blocks<BlockQ3_K>(src, n, dst, 256, quantize_q3_k);
    case DType::iq4_nl:
      return quantize_blocks<BlockIQ4_NL>(src, n, dst, 32, quantize_iq4_nl);
    case DType::iq4_xs:
      return quantize_blocks<BlockIQ4_XS>(src, n, dst, 256, quantize_iq4_xs);
    default:
      fail(kWhere, "cannot quantize to ", dtype_name(type));
  }
}

void dequantize(DType type, const void* src, int64_t n, float* dst) {
  check_count(type, n, src, dst);
  switch (type) {
    case DType::f32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::f16:
    case DType::bf16: {
      const auto* in = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, in + 2 * i, 2);
        dst[i] = type == DType::f16 ? f16_to_f32(v) : bf16_to_f32(v);
      }
      return;
    }
    case DType::q4_0:
      return dequantize_blocks<BlockQ4_0>(src, n, dst, 32);
    case DType::q4_1:
      return dequantize_blocks<BlockQ4_1>(src, n, dst, 32);
    case DType::q8_0:
      return dequantize_blocks<BlockQ8_0>(src, n, dst, 32);
    case DType::q4_k:
      return dequantize_blocks<BlockQ4_K>(src, n, dst, 256);
    case DType::q5_k:
      return dequantize_blocks<BlockQ5_K>(src, n, dst, 256);
    case DType::q6_k:
      return dequantize_blocks<BlockQ6_K>(src, n, dst, 256);
    case DType::q5_0:
      return dequantize_blocks<BlockQ5_0>(src, n, dst, 32);
    case DType::q5_1:
      return dequantize_blocks<BlockQ5_1>(src, n, dst, 32);
    case DType::q2_k:
      return dequantize_blocks<BlockQ2_K>(src, n, dst, 256);
    case DType::q3_k:
      return dequantize_blocks<BlockQ3_K>(src, n, dst, 256);
    case DType::iq4_nl:
      return dequantize_blocks<BlockIQ4_NL>(src, n, dst, 32);
    case DType::iq4_xs:
      return dequantize_blocks<BlockIQ4_XS>(src, n, dst, 256);
    default:
      fail(kWhere, "cannot dequantize ", dtype_name(type));
  }
}

int64_t affine_words_per_row(const AffineFormat& format, int64_t cols) {
  format.validate("affine");
  check(cols >= 0 && cols % format.group_size == 0, "affine", "row of ", cols,
        " values is not a whole number of groups of ", format.group_size);
  return cols / format.values_per_word();
}

void affine_quantize(const AffineFormat& format, const float* src, int64_t rows, int64_t cols,
                     uint32_t* packed, uint16_t* scales, uint16_t* biases) {
  const int64_t words = affine_words_per_row(format, cols);
  check(rows >= 0, "affine", "negative row count ", rows);
  const int64_t groups = cols / format.group_size;
  const uint32_t per_word = format.values_per_word();
  const int max_q = (1 << format.bits) - 1;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = src + r * cols;
    uint32_t* w = packed + r * words;
    std::fill(w, w + words, 0u);
    for (int64_t g = 0; g < groups; ++g) {
      const float* xg = x + g * format.group_size;
      float lo = xg[0];
      float hi = xg[0];
      for (uint32_t j = 1; j < format.group_size; ++j) {
        lo = std::min(lo, xg[j]);
        hi = std::max(hi, xg[j]);
      }
      const uint16_t s_bits =
          to_scale_bits(format.scale_type, (hi - lo) / static_cast<float>(max_q));
      const uint16_t b_bits = to_scale_bits(format.scale_type, lo);
      scales[r * groups + g] = s_bits;
      biases[r * groups + g] = b_bits;
      // Round against the stored (rounded) scale and bias, which the decoder uses.
      const float s = from_scale_bits(format.scale_type, s_bits);
      const float b = from_scale_bits(format.scale_type, b_bits);
      for (uint32_t j = 0; j < format.group_size; ++j) {
        const int q = s > 0 ? round_clamped((xg[j] - b) / s, 0, max_q) : 0;
        const int64_t e = g * format.group_size + j;
        w[e / per_word] |= static_cast<uint32_t>(q) << (format.bits * (e % per_word));
      }
    }
  }
}

void affine_dequantize(const AffineFormat& format, const uint32_t* packed, const uint16_t* scales,
                       const uint16_t* biases, int64_t rows, int64_t cols, float* dst) {
  const int64_t words = affine_words_per_row(format, cols);
  check(rows >= 0, "affine", "negative row count ", rows);
  const int64_t groups = cols / format.group_size;
  const uint32_t per_word = format.values_per_word();
  const uint32_t mask = (1u << format.bits) - 1u;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t e = 0; e < cols; ++e) {
      const int64_t g = e / format.group_size;
      const float s = from_scale_bits(format.scale_type, scales[r * groups + g]);
      const float b = from_scale_bits(format.scale_type, biases[r * groups + g]);
      const uint32_t q =
          (packed[r * words + e / per_word] >> (format.bits * (e % per_word))) & mask;
      dst[r * cols + e] = s * static_cast<float>(q) + b;
    }
  }
}

}  // namespace onepass::ops
