// GgufFile's metadata and tensor look-ups: typed accessors that name the key, its type and
// its offset when a value is missing or of the wrong type.
#include <algorithm>
#include <limits>

#include "gguf_internal.h"
#include "onepass/core/error.h"
#include "onepass/model/gguf.h"

namespace onepass::model {

void GgufFile::release_metadata_pages() const {
  if (file_.data() != nullptr) MappedFile::release_pages(file_.data(), std::min<size_t>(data_offset_, file_.size()));
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = entry_index_.find(key);
  return it == entry_index_.end() ? nullptr : &entries_[it->second].value;
}

const GgufValue& GgufFile::get(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) fail(kGgufWhere, source_, ": metadata key '", key, "' is missing");
  return *value;
}

void GgufFile::fail_key(std::string_view key, const GgufValue& value,
                        std::string_view expected) const {
  fail(kGgufWhere, source_, ": metadata key '", key, "' is ", gguf_type_name(value.type()), " ",
       value.describe(4), " (at offset ", value.offset(), "), expected ", expected);
}

std::optional<std::string> GgufFile::find_string(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return std::nullopt;
  const std::optional<std::string_view> text = value->to_string_view();
  if (!text) fail_key(key, *value, "a string");
  return std::string(*text);
}

std::optional<uint64_t> GgufFile::find_u64(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return std::nullopt;
  const std::optional<uint64_t> number = value->to_u64();
  if (!number) fail_key(key, *value, "a non-negative integer");
  return number;
}

std::optional<uint32_t> GgufFile::find_u32(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return std::nullopt;
  const std::optional<uint64_t> number = value->to_u64();
  if (!number || *number > std::numeric_limits<uint32_t>::max()) {
    fail_key(key, *value, "an integer in [0, 4294967295]");
  }
  return static_cast<uint32_t>(*number);
}

std::optional<int32_t> GgufFile::find_i32(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return std::nullopt;
  const std::optional<int64_t> number = value->to_i64();
  if (!number || *number < std::numeric_limits<int32_t>::min() ||
      *number > std::numeric_limits<int32_t>::max()) {
    fail_key(key, *value, "an integer in [-2147483648, 2147483647]");
  }
  return static_cast<int32_t>(*number);
}

std::optional<float> GgufFile::find_f32(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return std::nullopt;
  const std::optional<double> number = value->to_f64();
  if (!number) fail_key(key, *value, "f32 or f64");
  return static_cast<float>(*number);
}

std::optional<bool> GgufFile::find_bool(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return std::nullopt;
  const std::optional<bool> flag = value->to_bool();
  if (!flag) fail_key(key, *value, "bool");
  return flag;
}

std::optional<std::vector<std::string>> GgufFile::find_strings(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_array() || value->array_type() != GgufType::string) {
    fail_key(key, *value, "an array of strings");
  }
  std::vector<std::string> out;
  out.reserve(value->array_size());  // validated against the file size at open
  value->for_each([&](const GgufValue& item) {
    out.emplace_back(*item.to_string_view());
    return true;
  });
  return out;
}

std::optional<std::vector<float>> GgufFile::find_f32s(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_array() ||
      (value->array_type() != GgufType::f32 && value->array_type() != GgufType::f64)) {
    fail_key(key, *value, "an array of f32 or f64");
  }
  std::vector<float> out;
  out.reserve(value->array_size());
  value->for_each([&](const GgufValue& item) {
    out.push_back(static_cast<float>(*item.to_f64()));
    return true;
  });
  return out;
}

std::optional<std::vector<int32_t>> GgufFile::find_i32s(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_array() || !gguf_is_integer_type(value->array_type())) {
    fail_key(key, *value, "an array of integers");
  }
  std::vector<int32_t> out;
  out.reserve(value->array_size());
  uint64_t index = 0;
  value->for_each([&](const GgufValue& item) {
    const std::optional<int64_t> number = item.to_i64();
    if (!number || *number < std::numeric_limits<int32_t>::min() ||
        *number > std::numeric_limits<int32_t>::max()) {
      fail(kGgufWhere, source_, ": metadata key '", key, "': element ", index, " (", item.describe(),
           " at offset ", item.offset(), ") does not fit in i32");
    }
    out.push_back(static_cast<int32_t>(*number));
    ++index;
    return true;
  });
  return out;
}

namespace {

// get_X is find_X plus an error for a missing key.
template <typename T>
T required(const std::optional<T>& value, const std::string& source, std::string_view key) {
  if (!value) fail(kGgufWhere, source, ": metadata key '", key, "' is missing");
  return *value;
}

}  // namespace

std::string GgufFile::get_string(std::string_view key) const {
  return required(find_string(key), source_, key);
}
uint32_t GgufFile::get_u32(std::string_view key) const {
  return required(find_u32(key), source_, key);
}
uint64_t GgufFile::get_u64(std::string_view key) const {
  return required(find_u64(key), source_, key);
}
int32_t GgufFile::get_i32(std::string_view key) const {
  return required(find_i32(key), source_, key);
}
float GgufFile::get_f32(std::string_view key) const {
  return required(find_f32(key), source_, key);
}
bool GgufFile::get_bool(std::string_view key) const {
  return required(find_bool(key), source_, key);
}
std::vector<std::string> GgufFile::get_strings(std::string_view key) const {
  return required(find_strings(key), source_, key);
}
std::vector<float> GgufFile::get_f32s(std::string_view key) const {
  return required(find_f32s(key), source_, key);
}
std::vector<int32_t> GgufFile::get_i32s(std::string_view key) const {
  return required(find_i32s(key), source_, key);
}

std::string GgufFile::architecture() const {
  return get_string("general.architecture");
}

std::string GgufFile::arch_key(std::string_view suffix) const {
  return cat(architecture(), ".", suffix);
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& GgufFile::tensor(std::string_view name) const {
  const TensorInfo* info = find_tensor(name);
  if (info == nullptr) {
    fail(kGgufWhere, source_, ": no tensor named '", name, "' (the file has ", tensors_.size(),
         " tensors", tensors_.empty() ? "" : cat(", e.g. '", tensors_.front().name, "'"), ")");
  }
  return *info;
}

}  // namespace onepass::model
