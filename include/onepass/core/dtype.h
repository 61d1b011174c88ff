// Element types: plain scalars, GGML block formats and the MLX affine format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace onepass {

/// Element type of a tensor. Block formats store `block_elems` values in `block_bytes`
/// bytes, bit-compatible with GGUF files.
enum class DType : uint8_t {
  f32,
  f16,
  bf16,
  i32,
  u8,
  u32,
  q4_0,
  q4_1,
  q8_0,
  q4_k,
  q5_k,
  q6_k,
  q5_0,
  q5_1,
  q2_k,
  q3_k,
  iq4_nl,
  iq4_xs,
};

inline constexpr int kDTypeCount = 18;

struct DTypeInfo {
  std::string_view name;
  uint32_t block_elems;  // 1 for scalar types
  uint32_t block_bytes;  // element size for scalar types
  bool quantized;
  int32_t ggml_type;  // id in GGUF files, -1 where GGUF has none
};

const DTypeInfo& dtype_info(DType type);

inline std::string_view dtype_name(DType type) { return dtype_info(type).name; }
/// Bytes of one element (scalar types) or of one block (block formats).
inline size_t dtype_size(DType type) { return dtype_info(type).block_bytes; }
inline uint32_t dtype_block_elems(DType type) { return dtype_info(type).block_elems; }
inline bool dtype_is_quantized(DType type) { return dtype_info(type).quantized; }
inline bool dtype_is_float(DType type) {
  return type == DType::f32 || type == DType::f16 || type == DType::bf16;
}

/// Bytes taken by `elems` consecutive values; throws unless `elems` is a whole number of
/// blocks.
size_t dtype_bytes(DType type, int64_t elems);

/// Parses a dtype name ("f32", "q4_k", ...); nullopt when unknown.
std::optional<DType> parse_dtype(std::string_view name);
/// The dtype of a GGUF/GGML type id; nullopt when onepass does not support it.
std::optional<DType> dtype_from_ggml(int32_t ggml_type);

/// MLX affine quantisation: `w = scale * q + bias` per group of `group_size` weights, q
/// packed low bits first into uint32 words, scales and biases in f16 or bf16.
struct AffineFormat {
  uint32_t bits = 4;         // 4 or 8
  uint32_t group_size = 64;  // 32, 64 or 128
  DType scale_type = DType::f16;

  /// Throws unless bits/group/scale type form a supported combination.
  void validate(std::string_view where) const;
  uint32_t values_per_word() const { return 32 / bits; }
};

}  // namespace onepass
