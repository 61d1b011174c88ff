// Safetensors files (the format of MLX and Hugging Face weights): an 8-byte little-endian
// header length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {...}},
// then the tensor bytes.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "onepass/core/dtype.h"
#include "onepass/model/mapped_file.h"

namespace onepass::model {

/// The onepass dtype of a safetensors dtype name ("F32", "F16", "BF16", "I32", "U32", "U8");
/// nullopt for names onepass has no type for.
std::optional<DType> dtype_from_safetensors(std::string_view name);
/// The safetensors name of a dtype ("F16"); throws for the GGML block formats.
std::string_view safetensors_dtype_name(DType dtype);

/// Largest JSON header accepted (the safetensors format's own limit).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100u << 20;

/// An open, validated safetensors file. Opening checks the header length, parses the JSON
/// header and checks every tensor's dtype, shape (at most 4 dims), that shape x dtype size
/// equals its data_offsets span, that the span lies inside the file and that no two
/// tensors overlap; a bad file gives Error("[safetensors] <file>: ...").
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::filesystem::path& path);
  /// Parses `size` bytes at `data` without copying; the caller keeps them alive and
  /// unchanged while this object (or anything taken from it) is in use.
  static SafetensorsFile from_memory(const void* data, size_t size, std::string name = "<memory>");

  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;

  const std::string& source() const { return source_; }
  /// File offset where the tensor data starts (8 + header length).
  uint64_t data_offset() const { return data_offset_; }
  /// Tensors sorted by name.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;
  /// The tensor called `name`; throws Error naming it and the file when absent.
  const TensorInfo& tensor(std::string_view name) const;
  /// The optional "__metadata__" string map.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  void parse(const uint8_t* data, size_t size);

  MappedFile file_;
  std::string source_;
  uint64_t data_offset_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace onepass::model
