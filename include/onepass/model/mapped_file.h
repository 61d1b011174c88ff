// MappedFile: a read-only memory mapping of a model file, and TensorInfo: a tensor found in
// one (GGUF or safetensors), pointing into the mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "onepass/core/dtype.h"
#include "onepass/core/tensor.h"

namespace onepass::model {

/// What a stat() mode describes: "a regular file", "a directory", "a FIFO", ...
std::string_view file_kind(unsigned mode);

/// Throws Error("[where] ...") unless `path` names a regular file (after following
/// symbolic links). Called before opening, so that a FIFO or a device is never opened.
void require_regular_file(const std::filesystem::path& path, std::string_view where);

/// The whole of one file mapped read-only. Move-only; the mapping is released by the
/// destructor (which never throws). An empty file maps to {nullptr, 0}.
class MappedFile {
 public:
  MappedFile() = default;
  /// Maps `path`; throws Error("[mapped_file] ...") naming the path and the OS reason when
  /// it is missing, unreadable or not a regular file.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::filesystem::path& path() const { return path_; }

  /// Returns the pages wholly inside [begin, begin + bytes) to the OS (madvise
  /// MADV_DONTNEED): a weight copied elsewhere stops counting twice in the resident set.
  /// Reading them again still gives the file's bytes (read back from the page cache). The
  /// range must lie inside one MappedFile's mapping; never throws.
  static void release_pages(const void* begin, size_t bytes) noexcept;
  /// release_pages, and also the pages the range covers only in part: for when everything
  /// else on them has been copied out as well.
  static void release_pages_touching(const void* begin, size_t bytes) noexcept;

 private:
  void release() noexcept;

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::filesystem::path path_;
};

/// A tensor stored in a model file. `data` points into the file's mapping and stays valid
/// while the file object that produced it lives (moving that object keeps it valid).
struct TensorInfo {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;          // outermost dimension first, innermost (contiguous) last
  uint64_t offset = 0;  // absolute byte offset of the data in the file
  uint64_t bytes = 0;   // bytes of data (0 when `unsupported_type` has no known block size)
  const void* data = nullptr;
  /// Empty when `dtype` is the tensor's type. Otherwise the file's name for a type onepass
  /// cannot compute with ("iq2_xxs", or "type 99" for an id it does not know) and `dtype`
  /// is u8: the tensor can be listed, not loaded.
  std::string unsupported_type;
};

}  // namespace onepass::model
