#include "onepass/core/dtype.h"

#include <array>

#include "onepass/core/error.h"

namespace onepass {
namespace {

// Block sizes and GGML ids follow the GGUF specification.
constexpr std::array<DTypeInfo, kDTypeCount> kInfos = {{
    {"f32", 1, 4, false, 0},
    {"f16", 1, 2, false, 1},
    {"bf16", 1, 2, false, 30},
    {"i32", 1, 4, false, 26},
    {"u8", 1, 1, false, -1},
    {"u32", 1, 4, false, -1},
    {"q4_0", 32, 18, true, 2},    // f16 scale + 32 x 4-bit
    {"q4_1", 32, 20, true, 3},    // f16 scale, f16 min + 32 x 4-bit
    {"q8_0", 32, 34, true, 8},    // f16 scale + 32 x int8
    {"q4_k", 256, 144, true, 12},  // f16 d, dmin + 12 B 6-bit scales/mins + 128 B nibbles
    {"q5_k", 256, 176, true, 13},  // as q4_k + 32 B of fifth bits
    {"q6_k", 256, 210, true, 14},  // 128 B low 4 bits + 64 B high 2 bits + 16 scales + f16 d
    {"q5_0", 32, 22, true, 6},      // f16 scale + 32 fifth bits + 32 x 4-bit
    {"q5_1", 32, 24, true, 7},      // f16 scale, f16 min + 32 fifth bits + 32 x 4-bit
    {"q2_k", 256, 84, true, 10},    // 16 x (4-bit scale, 4-bit min) + 64 B 2-bit + f16 d, dmin
    {"q3_k", 256, 110, true, 11},   // 32 B high bits + 64 B low 2 bits + 12 B 6-bit scales + f16 d
    {"iq4_nl", 32, 18, true, 20},   // f16 scale + 32 x 4-bit indices into a 16-value table
    {"iq4_xs", 256, 136, true, 23},  // f16 d + 8 x 6-bit scales + 128 B 4-bit table indices
}};

}  // namespace

const DTypeInfo& dtype_info(DType type) {
  const auto index = static_cast<size_t>(type);
  check(index < kInfos.size(), "dtype", "unknown dtype id ", index);
  return kInfos[index];
}

size_t dtype_bytes(DType type, int64_t elems) {
  const DTypeInfo& info = dtype_info(type);
  check(elems >= 0, "dtype", "negative element count ", elems);
  check(elems % info.block_elems == 0, "dtype", info.name, " stores values in blocks of ",
        info.block_elems, "; ", elems, " is not a multiple");
  return static_cast<size_t>(elems / info.block_elems) * info.block_bytes;
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (size_t i = 0; i < kInfos.size(); ++i) {
    if (kInfos[i].name == name) return static_cast<DType>(i);
  }
  // Accept the upper-case spellings used in GGUF tooling (Q4_K, F16, ...).
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (lower != name) return parse_dtype(lower);
  return std::nullopt;
}

std::optional<DType> dtype_from_ggml(int32_t ggml_type) {
  for (size_t i = 0; i < kInfos.size(); ++i) {
    if (kInfos[i].ggml_type == ggml_type) return static_cast<DType>(i);
  }
  return std::nullopt;
}

void AffineFormat::validate(std::string_view where) const {
  check(bits == 4 || bits == 8, where, "MLX affine bits must be 4 or 8, got ", bits);
  check(group_size == 32 || group_size == 64 || group_size == 128, where,
        "MLX affine group size must be 32, 64 or 128, got ", group_size);
  check(scale_type == DType::f16 || scale_type == DType::bf16, where,
        "MLX affine scales must be f16 or bf16, got ", dtype_name(scale_type));
}

}  // namespace onepass
