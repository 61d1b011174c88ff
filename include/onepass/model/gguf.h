// GGUF model files (versions 2 and 3): a validating, memory-mapped reader and a streaming
// writer. Layout facts follow the GGUF specification (ggml/docs/gguf.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "onepass/core/dtype.h"
#include "onepass/core/tensor.h"
#include "onepass/model/mapped_file.h"

namespace onepass::model {

/// Metadata value types, with the ids GGUF files use.
enum class GgufType : uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};

/// "u8", "i32", "bool", "string", "array", ...; "type N" for ids outside the table.
std::string gguf_type_name(GgufType type);
/// Name of a GGML tensor type id as GGUF tools spell it ("q5_0", "iq4_xs"), "unknown" if none.
std::string_view ggml_type_name(int32_t ggml_type);

/// Largest nesting of arrays inside arrays the reader accepts (real files use 1).
inline constexpr int kGgufMaxArrayDepth = 8;

/// One metadata value of an open GgufFile. A light view: it points into the file's bytes
/// and is valid while the GgufFile lives. Every value was validated when the file opened.
class GgufValue {
 public:
  GgufType type() const { return type_; }
  /// File offset of the value's bytes (just after its type tag).
  uint64_t offset() const { return offset_; }
  bool is_integer() const;
  bool is_float() const { return type_ == GgufType::f32 || type_ == GgufType::f64; }
  bool is_array() const { return type_ == GgufType::array; }

  /// Integer values as int64 / uint64 when they fit; nullopt for other types or values.
  std::optional<int64_t> to_i64() const;
  std::optional<uint64_t> to_u64() const;
  /// f32 and f64 values; nullopt for other types.
  std::optional<double> to_f64() const;
  std::optional<bool> to_bool() const;
  /// String values (bytes as stored, normally UTF-8); nullopt for other types.
  std::optional<std::string_view> to_string_view() const;

  /// Array values: element type and count (nested arrays have type `array`).
  GgufType array_type() const { return array_type_; }
  uint64_t array_size() const { return count_; }
  /// Calls `fn` for each element of an array, in order; returns early when it returns false.
  void for_each(const std::function<bool(const GgufValue&)>& fn) const;
  /// Element `index` (constant time for fixed-size elements, linear for strings/arrays).
  GgufValue at(uint64_t index) const;

  /// One line for `inspect`: scalars in full, strings quoted (cut after `max_chars`),
  /// arrays as `[49152 x string: "<unk>", "<s>", ...]` with at most `max_items` shown.
  std::string describe(size_t max_items = 8, size_t max_chars = 60) const;

 private:
  friend class GgufParser;
  GgufType type_ = GgufType::u8;
  GgufType array_type_ = GgufType::u8;
  uint64_t offset_ = 0;
  uint64_t count_ = 0;              // arrays: number of elements
  const uint8_t* bytes_ = nullptr;  // the encoded value (after the type tag)
  uint64_t size_ = 0;               // encoded bytes
};

/// One metadata entry, in file order.
struct GgufEntry {
  std::string key;
  GgufValue value;
};

/// An open, validated GGUF file. Opening checks magic, version, counts, every string and
/// array length, nesting depth, alignment, tensor dims and types, and that every tensor's
/// data lies aligned inside the file's data section without overlapping another, so a
/// corrupt or hostile file gives an Error naming the field and its file offset.
class GgufFile {
 public:
  /// Maps and validates `path`.
  static GgufFile open(const std::filesystem::path& path);
  /// Validates `size` bytes at `data` without copying them: the caller keeps them alive and
  /// unchanged while the GgufFile (or anything taken from it) is in use. `name` is used in
  /// error messages.
  static GgufFile from_memory(const void* data, size_t size, std::string name = "<memory>");

  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;

  /// The path, or the name given to from_memory.
  const std::string& source() const { return source_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  /// File offset where the tensor data section starts.
  uint64_t data_offset() const { return data_offset_; }
  /// Bytes of the whole file.
  size_t size() const { return size_; }
  /// Returns the mapped pages of the metadata section to the OS once its bulk (the
  /// vocabulary) has been copied out, so they do not stay resident beside the copy. Values
  /// stay readable (their pages are read back from the file). No effect on a from_memory file.
  void release_metadata_pages() const;

  // --- metadata ---------------------------------------------------------------------
  const std::vector<GgufEntry>& metadata() const { return entries_; }
  bool has(std::string_view key) const { return find(key) != nullptr; }
  const GgufValue* find(std::string_view key) const;
  /// The value of `key`; throws Error naming the key when it is absent.
  const GgufValue& get(std::string_view key) const;

  // Typed getters: throw Error naming the key when it is missing, has another type or a
  // value out of range. Integer getters accept any integer type whose value fits; float
  // getters accept f32 and f64.
  std::string get_string(std::string_view key) const;
  uint32_t get_u32(std::string_view key) const;
  uint64_t get_u64(std::string_view key) const;
  int32_t get_i32(std::string_view key) const;
  float get_f32(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  std::vector<std::string> get_strings(std::string_view key) const;
  std::vector<float> get_f32s(std::string_view key) const;
  std::vector<int32_t> get_i32s(std::string_view key) const;

  // Optional variants: nullopt when the key is absent; still throw on a wrong type.
  std::optional<std::string> find_string(std::string_view key) const;
  std::optional<uint32_t> find_u32(std::string_view key) const;
  std::optional<uint64_t> find_u64(std::string_view key) const;
  std::optional<int32_t> find_i32(std::string_view key) const;
  std::optional<float> find_f32(std::string_view key) const;
  std::optional<bool> find_bool(std::string_view key) const;
  std::optional<std::vector<std::string>> find_strings(std::string_view key) const;
  std::optional<std::vector<float>> find_f32s(std::string_view key) const;
  std::optional<std::vector<int32_t>> find_i32s(std::string_view key) const;

  /// general.architecture ("llama", "qwen2", ...); throws when absent.
  std::string architecture() const;
  /// "<architecture>.<suffix>": arch_key("block_count") -> "llama.block_count".
  std::string arch_key(std::string_view suffix) const;

  // --- tensors ----------------------------------------------------------------------
  /// Tensors in file order; `data` points into the file.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  /// The tensor called `name`; throws Error naming it when absent.
  const TensorInfo& tensor(std::string_view name) const;

 private:
  friend class GgufParser;
  GgufFile() = default;
  [[noreturn]] void fail_key(std::string_view key, const GgufValue& value,
                             std::string_view expected) const;

  MappedFile file_;
  std::string source_;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufEntry> entries_;
  std::map<std::string, size_t, std::less<>> entry_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

/// A metadata value to write: any GGUF type, arrays (of arrays) included. Holds the value
/// already encoded, so large arrays cost their file size in memory and no more.
class GgufMetaValue {
 public:
  static GgufMetaValue u8(uint8_t value);
  static GgufMetaValue i8(int8_t value);
  static GgufMetaValue u16(uint16_t value);
  static GgufMetaValue i16(int16_t value);
  static GgufMetaValue u32(uint32_t value);
  static GgufMetaValue i32(int32_t value);
  static GgufMetaValue u64(uint64_t value);
  static GgufMetaValue i64(int64_t value);
  static GgufMetaValue f32(float value);
  static GgufMetaValue f64(double value);
  static GgufMetaValue boolean(bool value);
  static GgufMetaValue string(std::string_view value);
  /// An array whose elements all have `element_type` (typed even when empty); throws when an
  /// item has another type.
  static GgufMetaValue array(GgufType element_type, const std::vector<GgufMetaValue>& items);
  static GgufMetaValue strings(const std::vector<std::string>& values);
  static GgufMetaValue f32s(std::span<const float> values);
  static GgufMetaValue i32s(std::span<const int32_t> values);
  static GgufMetaValue u32s(std::span<const uint32_t> values);

  GgufType type() const { return type_; }
  /// The encoded value (what follows the type tag in the file).
  const std::string& encoded() const { return encoded_; }

 private:
  GgufMetaValue(GgufType type, std::string encoded) : type_(type), encoded_(std::move(encoded)) {}
  GgufType type_;
  std::string encoded_;
};

/// Writes a GGUF v3 file that llama.cpp and gguf-py read. Usage: set metadata, declare
/// every tensor with add_tensor, then stream each tensor's bytes in declaration order with
/// write_tensor / write_tensor_data (so a model never needs to be in memory at once), then
/// finish(). The file is written as "<path>.partial" beside it and renamed by finish() over
/// a regular file or nothing: a path that exists as anything else (FIFO, device node,
/// directory, symbolic link) is refused, never replaced. A writer destroyed before finish()
/// removes the partial file.
class GgufWriter {
 public:
  /// `alignment` (a power of two) is recorded as general.alignment when it is not 32.
  explicit GgufWriter(std::filesystem::path path, uint32_t alignment = 32);
  ~GgufWriter();
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  /// Adds a metadata entry (keys are unique; all metadata comes before tensor data).
  void set(std::string key, GgufMetaValue value);
  void set_string(std::string key, std::string_view value);
  void set_u32(std::string key, uint32_t value);
  void set_i32(std::string key, int32_t value);
  void set_u64(std::string key, uint64_t value);
  void set_f32(std::string key, float value);
  void set_bool(std::string key, bool value);
  void set_strings(std::string key, const std::vector<std::string>& values);
  void set_f32s(std::string key, std::span<const float> values);
  void set_i32s(std::string key, std::span<const int32_t> values);

  /// Declares the next tensor. `shape` is outermost-first like everywhere in onepass (it is
  /// stored reversed, innermost first, as GGUF wants); its innermost extent must be a
  /// whole number of `dtype` blocks. Returns the tensor's data bytes.
  uint64_t add_tensor(std::string name, DType dtype, Shape shape);

  /// Appends bytes to the tensor data, filling the declared tensors in order; may be
  /// called with any chunk size (a chunk may span tensors). Writes the header first.
  void write_tensor_data(const void* data, size_t bytes);
  /// Writes all of the next tensor's bytes at once; checks its name and size.
  void write_tensor(std::string_view name, const void* data, size_t bytes);
  /// Checks every declared tensor got all its bytes, flushes, closes and renames the file.
  void finish();

  /// The declared tensors (offset = relative to the data section, as stored).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

 private:
  void write_header();
  void put(const void* data, size_t bytes);
  void pad_to(uint64_t alignment);
  void close_and_remove() noexcept;

  std::filesystem::path path_;
  std::filesystem::path partial_path_;
  uint32_t alignment_;
  std::FILE* out_ = nullptr;
  uint64_t written_ = 0;  // bytes written to the file so far
  bool header_written_ = false;
  bool finished_ = false;
  std::vector<std::pair<std::string, GgufMetaValue>> metadata_;
  std::vector<TensorInfo> tensors_;
  uint64_t data_bytes_ = 0;  // data section size including padding
  size_t current_tensor_ = 0;
  uint64_t current_written_ = 0;  // bytes of tensors_[current_tensor_] written
};

}  // namespace onepass::model
