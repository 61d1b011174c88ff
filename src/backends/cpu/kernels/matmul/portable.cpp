// Portable row kernels of every matmul weight type: decode into a small f32 buffer, then dot
// with 8 independent lanes (which the compiler vectorises for the baseline ISA).
#include <algorithm>
#include <cstring>

#include "../float_types.h"
#include "onepass/ops/matmul.h"
#include "onepass/ops/quant.h"
#include "rows.h"

namespace onepass::cpu {
namespace {

template <typename Block>
void decode_blocks(const uint8_t* w, int64_t first_value, int64_t count, int block_elems,
                   float* dst) {
  for (int64_t v = 0; v < count; v += block_elems) {
    Block block;  // copied: rows need not be aligned for Block
    std::memcpy(&block, w + (first_value + v) / block_elems * static_cast<int64_t>(sizeof(Block)),
                sizeof(Block));
    dequantize_block(block, dst + v);
  }
}

// Values [first, first + count) of a weight row as f32; for block formats both are whole
// blocks.
template <DType W>
void decode_range(const void* row, int64_t first, int64_t count, float* dst) {
  const auto* w = static_cast<const uint8_t*>(row);
  if constexpr (W == DType::f32) {
    std::memcpy(dst, w + first * 4, static_cast<size_t>(count) * 4);
  } else if constexpr (W == DType::f16 || W == DType::bf16) {
    for (int64_t j = 0; j < count; ++j) {
      uint16_t bits;
      std::memcpy(&bits, w + (first + j) * 2, 2);
      dst[j] = Elem<W>::load(bits);
    }
  } else if constexpr (W == DType::q4_0) {
    decode_blocks<ops::BlockQ4_0>(w, first, count, 32, dst);
  } else if constexpr (W == DType::q4_1) {
    decode_blocks<ops::BlockQ4_1>(w, first, count, 32, dst);
  } else if constexpr (W == DType::q8_0) {
    decode_blocks<ops::BlockQ8_0>(w, first, count, 32, dst);
  } else if constexpr (W == DType::q4_k) {
    decode_blocks<ops::BlockQ4_K>(w, first, count, 256, dst);
  } else if constexpr (W == DType::q5_k) {
    decode_blocks<ops::BlockQ5_K>(w, first, count, 256, dst);
  } else if constexpr (W == DType::q5_0) {
    decode_blocks<ops::BlockQ5_0>(w, first, count, 32, dst);
  } else if constexpr (W == DType::q5_1) {
    decode_blocks<ops::BlockQ5_1>(w, first, count, 32, dst);
  } else if constexpr (W == DType::q2_k) {
    decode_blocks<ops::BlockQ2_K>(w, first, count, 256, dst);
  } else if constexpr (W == DType::q3_k) {
    decode_blocks<ops::BlockQ3_K>(w, first, count, 256, dst);
  } else if constexpr (W == DType::iq4_nl) {
    decode_blocks<ops::BlockIQ4_NL>(w, first, count, 32, dst);
  } else if constexpr (W == DType::iq4_xs) {
    decode_blocks<ops::BlockIQ4_XS>(w, first, count, 256, dst);
  } else {
    static_assert(W == DType::q6_k);
    decode_blocks<ops::BlockQ6_K>(w, first, count, 256, dst);
  }
}

template <DType W>
void portable_decode(const void* row, int64_t k, float* dst) {
  decode_range<W>(row, 0, k, dst);
}

template <DType W>
void portable_dot(const void* row, const float* x, int64_t x_stride, int64_t m, int64_t k,
                  float* out, int64_t out_stride) {
  constexpr int64_t kRows = ops::kMatmulMvMaxRows;
  if (m > kRows) {  // any m works; the op passes at most kRows
    portable_dot<W>(row, x + kRows * x_stride, x_stride, m - kRows, k, out + kRows * out_stride,
                    out_stride);
    m = kRows;
  }
  constexpr int64_t kChunk = 256;  // a multiple of every block size
  float acc[kRows][8] = {};
  float tail[kRows] = {};
  float w[kChunk];
  for (int64_t c = 0; c < k; c += kChunk) {
    const int64_t len = std::min(kChunk, k - c);
    decode_range<W>(row, c, len, w);
    const int64_t vec = len / 8 * 8;
    for (int64_t i = 0; i < m; ++i) {
      const float* xr = x + i * x_stride + c;
      for (int64_t j = 0; j < vec; j += 8) {
        for (int l = 0; l < 8; ++l) acc[i][l] += xr[j + l] * w[j + l];
      }
      for (int64_t j = vec; j < len; ++j) tail[i] += xr[j] * w[j];
    }
  }
  for (int64_t i = 0; i < m; ++i) {
    const float* a = acc[i];
    out[i * out_stride] =
        ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7])) + tail[i];
  }
}

}  // namespace

RowKernels portable_row_kernels(DType w) {
  RowKernels kernels;
  for_each_weight_type([&]<DType W>() {
    if (W == w) kernels = {portable_dot<W>, portable_decode<W>};
  });
  return kernels;
}

}  // namespace onepass::cpu
