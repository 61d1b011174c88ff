#include "model/affine_relayout.h"

#include <cmath>
#include <cstring>
#include <optional>

#include "onepass/core/error.h"
#include "onepass/core/half.h"
#include "onepass/ops/quant.h"

namespace onepass::model {
namespace {

constexpr int64_t kBlock = 32;  // values per q4_1 / q8_0 block
constexpr float kF16Max = 65504.0f;

float scale_value(DType type, uint16_t bits) {
  return type == DType::bf16 ? bf16_to_f32(bits) : f16_to_f32(bits);
}

bool fits_f16(float x) { return std::isfinite(x) && std::abs(x) <= kF16Max; }

struct Layout {
  int64_t rows = 0;    // every dimension but the last
  int64_t words = 0;   // packed u32 words per row
  int64_t inputs = 0;  // values per row
  int64_t groups = 0;  // groups per row
};

}  // namespace

RelaidWeight relayout_affine(const HostTensor& t, RelayoutForms forms) {
  check(t.affine.has_value() && t.dtype == DType::u32 && t.shape.ndim() >= 1, "model", "tensor '",
        t.name, "' is not an MLX affine-quantised weight (packed u32 with scales and biases)");
  const AffineFormat& format = *t.affine;
  format.validate("model");
  Layout l;
  l.words = t.shape[t.shape.ndim() - 1];
  l.rows = l.words > 0 ? t.shape.numel() / l.words : 0;
  l.inputs = l.words * format.values_per_word();
  l.groups = l.inputs / format.group_size;
  check(l.inputs % format.group_size == 0 && t.bytes == static_cast<size_t>(l.rows * l.words) * 4,
        "model", "tensor '", t.name, "' (u32", t.shape.str(), ", ", t.bytes,
        " bytes) does not hold whole groups of ", format.group_size, " ", format.bits,
        "-bit values");
  const auto* packed = static_cast<const uint32_t*>(t.data);
  const auto* scales = static_cast<const uint16_t*>(t.scales);
  const auto* biases = static_cast<const uint16_t*>(t.biases);
  const int64_t group_count = l.rows * l.groups;
  const uint32_t per_word = format.values_per_word();
  const uint32_t mask = (1u << format.bits) - 1u;
  // A row's quantised values, one byte each (the first value in a word's lowest bits).
  std::vector<uint8_t> q(static_cast<size_t>(l.inputs));
  auto unpack_row = [&](int64_t row) {
    const uint32_t* words = packed + row * l.words;
    uint8_t* out = q.data();
    for (int64_t w = 0; w < l.words; ++w) {
      uint32_t word = words[w];
      for (uint32_t i = 0; i < per_word; ++i, word >>= format.bits) *out++ = static_cast<uint8_t>(word & mask);
    }
  };

  RelaidWeight out;
  out.shape = t.shape;
  out.shape[t.shape.ndim() - 1] = l.inputs;

  bool blocks_fit = forms.blocks;  // every scale and bias is an f16 value
  bool symmetric = true;   // every bias is -128 x its scale
  for (int64_t g = 0; g < group_count && blocks_fit; ++g) {
    const float s = scale_value(format.scale_type, scales[g]);
    const float b = scale_value(format.scale_type, biases[g]);
    blocks_fit = fits_f16(s) && fits_f16(b);
    symmetric = symmetric && b == -128.0f * s;
  }
  const int64_t blocks_per_row = l.inputs / kBlock;
  if (blocks_fit && format.bits == 4) {
    out.dtype = DType::q4_1;
    out.bytes.resize(static_cast<size_t>(l.rows * blocks_per_row) * sizeof(ops::BlockQ4_1));
    auto* dst = reinterpret_cast<ops::BlockQ4_1*>(out.bytes.data());
    for (int64_t r = 0; r < l.rows; ++r) {
      unpack_row(r);
      for (int64_t j = 0; j < blocks_per_row; ++j) {
        const int64_t g = r * l.groups + j * kBlock / format.group_size;
        ops::BlockQ4_1& block = dst[r * blocks_per_row + j];
        block.d = f32_to_f16(scale_value(format.scale_type, scales[g]));
        block.m = f32_to_f16(scale_value(format.scale_type, biases[g]));
        const uint8_t* values = q.data() + j * kBlock;
        for (int64_t i = 0; i < kBlock / 2; ++i) {
          block.qs[i] = static_cast<uint8_t>(values[i] | (values[i + kBlock / 2] << 4));
        }
      }
    }
    return out;
  }
  if (blocks_fit && symmetric && format.bits == 8) {
    out.dtype = DType::q8_0;
    out.bytes.resize(static_cast<size_t>(l.rows * blocks_per_row) * sizeof(ops::BlockQ8_0));
    auto* dst = reinterpret_cast<ops::BlockQ8_0*>(out.bytes.data());
    for (int64_t r = 0; r < l.rows; ++r) {
      unpack_row(r);
      for (int64_t j = 0; j < blocks_per_row; ++j) {
        const int64_t g = r * l.groups + j * kBlock / format.group_size;
        ops::BlockQ8_0& block = dst[r * blocks_per_row + j];
        block.d = f32_to_f16(scale_value(format.scale_type, scales[g]));
        const uint8_t* values = q.data() + j * kBlock;
        for (int64_t i = 0; i < kBlock; ++i) {
          block.qs[i] = static_cast<int8_t>(static_cast<int32_t>(values[i]) - 128);
        }
      }
    }
    return out;
  }
  // The values themselves, a row at a time: f16 unless one is beyond its range.
  std::vector<float> row(static_cast<size_t>(l.inputs));
  for (const DType type : {DType::f16, DType::f32}) {
    if (type == DType::f16 && !forms.f16) continue;
    out.dtype = type;
    out.bytes.assign(static_cast<size_t>(l.rows * l.inputs) * dtype_bytes(type, 1), 0);
    bool in_range = true;
    for (int64_t r = 0; r < l.rows && in_range; ++r) {
      ops::affine_dequantize(format, packed + r * l.words, scales + r * l.groups,
                             biases + r * l.groups, 1, l.inputs, row.data());
      if (type == DType::f32) {
        std::memcpy(out.bytes.data() + static_cast<size_t>(r * l.inputs) * 4, row.data(),
                    row.size() * 4);
        continue;
      }
      auto* dst = reinterpret_cast<uint16_t*>(out.bytes.data()) + r * l.inputs;
      for (int64_t i = 0; i < l.inputs; ++i) {
        in_range = in_range && fits_f16(row[static_cast<size_t>(i)]);
        dst[i] = f32_to_f16(row[static_cast<size_t>(i)]);
      }
    }
    if (in_range) break;
  }
  return out;
}

RelayoutForms common_relayout_forms(const std::vector<HostTensor>& parts) {
  for (const RelayoutForms forms : {RelayoutForms{}, RelayoutForms{.blocks = false},
                                    RelayoutForms{.blocks = false, .f16 = false}}) {
    std::optional<DType> type;
    bool common = true;
    for (const HostTensor& part : parts) {
      const DType part_type = relayout_affine(part, forms).dtype;
      common = !type || *type == part_type;
      if (!common) break;
      type = part_type;
    }
    if (common) return forms;
  }
  return RelayoutForms{.blocks = false, .f16 = false};  // not reached: f32 is every part's type
}

}  // namespace onepass::model
