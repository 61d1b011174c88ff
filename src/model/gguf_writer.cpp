// GGUF v3 writer: header and metadata first, then tensor data streamed in declaration
// order, each tensor padded to the alignment (as llama.cpp and gguf-py write them).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <system_error>

#include "onepass/core/error.h"
#include "onepass/model/gguf.h"
#include "onepass/model/mapped_file.h"

namespace onepass::model {
namespace {

constexpr std::string_view kWhere = "gguf_writer";
constexpr uint32_t kVersion = 3;
constexpr uint32_t kDefaultAlignment = 32;
// llama.cpp keeps tensor names in a 64-byte buffer with a terminating zero.
constexpr size_t kMaxTensorName = 63;
constexpr size_t kMaxKey = 65535;

template <typename T>
void append(std::string& out, T value) {
  static_assert(std::endian::native == std::endian::little);
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

// Refuses an output path that exists and is not a regular file: renaming over a FIFO, a
// device node or a symbolic link would replace it (the link itself, not its target).
void check_replaceable(const std::filesystem::path& path, std::string_view role) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    const int err = errno;
    check(err == ENOENT, kWhere, "cannot examine ", role, " '", path.string(), "': ",
          std::strerror(err));
    return;
  }
  check(S_ISREG(info.st_mode), kWhere, role, " '", path.string(), "' exists and is ",
        file_kind(info.st_mode),
        "; expected a regular file or nothing (only a regular file is replaced)");
}

void append_string(std::string& out, std::string_view text) {
  append<uint64_t>(out, text.size());
  out.append(text);
}

template <typename T>
std::string encode_array(GgufType element_type, std::span<const T> values) {
  std::string out;
  out.reserve(12 + values.size_bytes());
  append<uint32_t>(out, static_cast<uint32_t>(element_type));
  append<uint64_t>(out, values.size());
  out.append(reinterpret_cast<const char*>(values.data()), values.size_bytes());
  return out;
}

template <typename T>
std::string encode_scalar(T value) {
  std::string out;
  append<T>(out, value);
  return out;
}

}  // namespace

// --- GgufMetaValue ----------------------------------------------------------------------

GgufMetaValue GgufMetaValue::u8(uint8_t v) {
  return {GgufType::u8, encode_scalar(v)};
}
GgufMetaValue GgufMetaValue::i8(int8_t v) {
  return {GgufType::i8, encode_scalar(v)};
}
GgufMetaValue GgufMetaValue::u16(uint16_t v) {
  return {GgufType::u16, encode_scalar(v)};
}
GgufMetaValue GgufMetaValue::i16(int16_t v) {
  return {GgufType::i16, encode_scalar(v)};
}
GgufMetaValue GgufMetaValue::u32(uint32_t v) {
  return {GgufType::u32, encode_scalar(v)};
}
GgufMetaValue GgufMetaValue::i32(int32_t v) {
  return {GgufType::i32, encode_scalar(v)};
}
GgufMetaValue GgufMetaValue::u64(uint64_t v) {
  return {GgufType::u64, encode_scalar(v)};
}
GgufMetaValue GgufMetaValue::i64(int64_t v) {
  return {GgufType::i64, encode_scalar(v)};
}
GgufMetaValue GgufMetaValue::f32(float v) {
  return {GgufType::f32, encode_scalar(v)};
}
GgufMetaValue GgufMetaValue::f64(double v) {
  return {GgufType::f64, encode_scalar(v)};
}
GgufMetaValue GgufMetaValue::boolean(bool v) {
  return {GgufType::boolean, encode_scalar<uint8_t>(v ? 1 : 0)};
}

GgufMetaValue GgufMetaValue::string(std::string_view v) {
  std::string out;
  append_string(out, v);
  return {GgufType::string, std::move(out)};
}

GgufMetaValue GgufMetaValue::array(GgufType element_type, const std::vector<GgufMetaValue>& items) {
  check(static_cast<uint32_t>(element_type) <= static_cast<uint32_t>(GgufType::f64), kWhere,
        "unknown array element type ", static_cast<uint32_t>(element_type));
  size_t bytes = 12;
  for (size_t i = 0; i < items.size(); ++i) {
    check(items[i].type() == element_type, kWhere, "array of ", gguf_type_name(element_type),
          ": item ", i, " is ", gguf_type_name(items[i].type()));
    bytes += items[i].encoded().size();
  }
  std::string out;
  out.reserve(bytes);
  append<uint32_t>(out, static_cast<uint32_t>(element_type));
  append<uint64_t>(out, items.size());
  for (const GgufMetaValue& item : items) out += item.encoded();
  return {GgufType::array, std::move(out)};
}

GgufMetaValue GgufMetaValue::strings(const std::vector<std::string>& values) {
  size_t bytes = 12;
  for (const std::string& v : values) bytes += 8 + v.size();
  std::string out;
  out.reserve(bytes);
  append<uint32_t>(out, static_cast<uint32_t>(GgufType::string));
  append<uint64_t>(out, values.size());
  for (const std::string& v : values) append_string(out, v);
  return {GgufType::array, std::move(out)};
}

GgufMetaValue GgufMetaValue::f32s(std::span<const float> values) {
  return {GgufType::array, encode_array(GgufType::f32, values)};
}
GgufMetaValue GgufMetaValue::i32s(std::span<const int32_t> values) {
  return {GgufType::array, encode_array(GgufType::i32, values)};
}
GgufMetaValue GgufMetaValue::u32s(std::span<const uint32_t> values) {
  return {GgufType::array, encode_array(GgufType::u32, values)};
}

// --- GgufWriter -------------------------------------------------------------------------

GgufWriter::GgufWriter(std::filesystem::path path, uint32_t alignment)
    : path_(std::move(path)), alignment_(alignment) {
  check(alignment != 0 && std::has_single_bit(alignment), kWhere, "alignment ", alignment,
        " is not a power of two");
  partial_path_ = path_;
  partial_path_ += ".partial";
  check_replaceable(path_, "output");
  // The temporary file sits beside the output (so the rename stays on one file system); a
  // regular one left by an interrupted run is replaced, anything else refused.
  check_replaceable(partial_path_, "temporary file");
  std::error_code ignored;
  std::filesystem::remove(partial_path_, ignored);
  // O_EXCL: never opens an existing file, FIFO or link target.
  const int fd = ::open(partial_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int err = errno;
    fail(kWhere, "cannot create '", partial_path_.string(), "': ", std::strerror(err));
  }
  out_ = ::fdopen(fd, "wb");
  if (out_ == nullptr) {
    const int err = errno;
    ::close(fd);
    std::filesystem::remove(partial_path_, ignored);
    fail(kWhere, "cannot create '", partial_path_.string(), "': ", std::strerror(err));
  }
  // Large writes go straight through; the buffer only gathers the many small header fields.
  std::setvbuf(out_, nullptr, _IOFBF, 1 << 20);
  if (alignment != kDefaultAlignment) {
    metadata_.emplace_back("general.alignment", GgufMetaValue::u32(alignment));
  }
}

GgufWriter::~GgufWriter() {
  if (!finished_) close_and_remove();
}

void GgufWriter::close_and_remove() noexcept {
  if (out_ != nullptr) std::fclose(out_);
  out_ = nullptr;
  std::error_code ignored;
  std::filesystem::remove(partial_path_, ignored);
}

void GgufWriter::set(std::string key, GgufMetaValue value) {
  check(!header_written_, kWhere, path_.string(), ": metadata '", key,
        "' set after tensor data was written");
  check(!key.empty() && key.size() <= kMaxKey, kWhere, "metadata key of ", key.size(),
        " bytes (expected 1..", kMaxKey, ")");
  check(key != "general.alignment", kWhere,
        "general.alignment comes from the GgufWriter constructor's alignment argument");
  for (const auto& entry : metadata_) {
    check(entry.first != key, kWhere, path_.string(), ": metadata key '", key, "' set twice");
  }
  metadata_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::set_string(std::string key, std::string_view value) {
  set(std::move(key), GgufMetaValue::string(value));
}
void GgufWriter::set_u32(std::string key, uint32_t value) {
  set(std::move(key), GgufMetaValue::u32(value));
}
void GgufWriter::set_i32(std::string key, int32_t value) {
  set(std::move(key), GgufMetaValue::i32(value));
}
void GgufWriter::set_u64(std::string key, uint64_t value) {
  set(std::move(key), GgufMetaValue::u64(value));
}
void GgufWriter::set_f32(std::string key, float value) {
  set(std::move(key), GgufMetaValue::f32(value));
}
void GgufWriter::set_bool(std::string key, bool value) {
  set(std::move(key), GgufMetaValue::boolean(value));
}
void GgufWriter::set_strings(std::string key, const std::vector<std::string>& values) {
  set(std::move(key), GgufMetaValue::strings(values));
}
void GgufWriter::set_f32s(std::string key, std::span<const float> values) {
  set(std::move(key), GgufMetaValue::f32s(values));
}
void GgufWriter::set_i32s(std::string key, std::span<const int32_t> values) {
  set(std::move(key), GgufMetaValue::i32s(values));
}

uint64_t GgufWriter::add_tensor(std::string name, DType dtype, Shape shape) {
  check(!header_written_, kWhere, path_.string(), ": tensor '", name,
        "' declared after tensor data was written");
  check(!name.empty() && name.size() <= kMaxTensorName, kWhere, "tensor name '", name, "' has ",
        name.size(), " bytes (expected 1..", kMaxTensorName, ")");
  for (const TensorInfo& t : tensors_) {
    check(t.name != name, kWhere, path_.string(), ": tensor '", name, "' declared twice");
  }
  const DTypeInfo& info = dtype_info(dtype);
  check(info.ggml_type >= 0, kWhere, "tensor '", name, "': GGUF has no type for ", info.name);
  check(shape.ndim() >= 1, kWhere, "tensor '", name, "' needs at least one dimension");
  for (int d = 0; d < shape.ndim(); ++d) {
    check(shape[d] > 0, kWhere, "tensor '", name, "' ", shape.str(),
          ": dimensions must be positive");
  }
  check(shape.cols() % info.block_elems == 0, kWhere, "tensor '", name, "' ", shape.str(), ": ",
        info.name, " needs the innermost dimension to be a multiple of ", info.block_elems);
  TensorInfo tensor;
  tensor.name = std::move(name);
  tensor.dtype = dtype;
  tensor.shape = shape;
  tensor.bytes = dtype_bytes(dtype, shape.numel());
  tensor.offset = (data_bytes_ + alignment_ - 1) / alignment_ * alignment_;
  data_bytes_ = tensor.offset + tensor.bytes;
  tensors_.push_back(std::move(tensor));
  return tensors_.back().bytes;
}

void GgufWriter::put(const void* data, size_t bytes) {
  if (bytes == 0) return;
  if (std::fwrite(data, 1, bytes, out_) != bytes) {
    const int err = errno;
    fail(kWhere, "writing ", bytes, " bytes at offset ", written_, " of '", partial_path_.string(),
         "' failed: ", std::strerror(err));
  }
  written_ += bytes;
}

void GgufWriter::pad_to(uint64_t alignment) {
  static constexpr char kZeros[256] = {};
  uint64_t padding = (alignment - written_ % alignment) % alignment;
  while (padding > 0) {
    const uint64_t chunk = padding < sizeof(kZeros) ? padding : sizeof(kZeros);
    put(kZeros, chunk);
    padding -= chunk;
  }
}

void GgufWriter::write_header() {
  check(out_ != nullptr, kWhere, path_.string(), ": the writer was already closed");
  std::string header;
  header.append("GGUF", 4);
  append<uint32_t>(header, kVersion);
  append<uint64_t>(header, tensors_.size());
  append<uint64_t>(header, metadata_.size());
  for (const auto& [key, value] : metadata_) {
    append_string(header, key);
    append<uint32_t>(header, static_cast<uint32_t>(value.type()));
    header += value.encoded();
  }
  for (const TensorInfo& t : tensors_) {
    append_string(header, t.name);
    append<uint32_t>(header, static_cast<uint32_t>(t.shape.ndim()));
    // GGUF wants ne[0], the contiguous extent, first.
    for (int d = t.shape.ndim() - 1; d >= 0; --d) append<uint64_t>(header, t.shape[d]);
    append<uint32_t>(header, static_cast<uint32_t>(dtype_info(t.dtype).ggml_type));
    append<uint64_t>(header, t.offset);
  }
  put(header.data(), header.size());
  pad_to(alignment_);
  header_written_ = true;
}

void GgufWriter::write_tensor_data(const void* data, size_t bytes) {
  if (!header_written_) write_header();
  const auto* at = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    check(current_tensor_ < tensors_.size(), kWhere, path_.string(), ": ", bytes,
          " bytes of tensor data beyond the ", tensors_.size(), " declared tensors");
    const TensorInfo& tensor = tensors_[current_tensor_];
    const uint64_t room = tensor.bytes - current_written_;
    const size_t chunk = bytes < room ? bytes : static_cast<size_t>(room);
    put(at, chunk);
    at += chunk;
    bytes -= chunk;
    current_written_ += chunk;
    if (current_written_ == tensor.bytes) {
      pad_to(alignment_);
      ++current_tensor_;
      current_written_ = 0;
    }
  }
}

void GgufWriter::write_tensor(std::string_view name, const void* data, size_t bytes) {
  check(current_tensor_ < tensors_.size(), kWhere, path_.string(), ": tensor '", name,
        "' written but all ", tensors_.size(), " declared tensors are complete");
  const TensorInfo& tensor = tensors_[current_tensor_];
  check(current_written_ == 0, kWhere, "tensor '", name, "' written while '", tensor.name,
        "' is partly written");
  check(tensor.name == name, kWhere, "tensor '", name, "' written where '", tensor.name,
        "' is next (data goes in declaration order)");
  check(bytes == tensor.bytes, kWhere, "tensor '", name, "' ", dtype_name(tensor.dtype),
        tensor.shape.str(), " takes ", tensor.bytes, " bytes, got ", bytes);
  write_tensor_data(data, bytes);
}

void GgufWriter::finish() {
  check(!finished_, kWhere, path_.string(), ": finish() called twice");
  if (!header_written_) write_header();
  if (current_tensor_ < tensors_.size()) {
    const TensorInfo& tensor = tensors_[current_tensor_];
    fail(kWhere, path_.string(), ": tensor '", tensor.name, "' got ", current_written_, " of ",
         tensor.bytes, " bytes (", tensors_.size() - current_tensor_,
         " tensors incomplete) when finish() was called");
  }
  std::FILE* out = out_;
  out_ = nullptr;
  if (std::fclose(out) != 0) {
    const int err = errno;
    fail(kWhere, "closing '", partial_path_.string(), "' failed: ", std::strerror(err));
  }
  // The output may have been replaced while the data was written.
  check_replaceable(path_, "output");
  std::error_code error;
  std::filesystem::rename(partial_path_, path_, error);
  check(!error, kWhere, "renaming '", partial_path_.string(), "' to '", path_.string(),
        "' failed: ", error.message());
  finished_ = true;
}

}  // namespace onepass::model
