#include "onepass/model/safetensors.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "onepass/core/error.h"

namespace onepass::model {
namespace {

constexpr std::string_view kWhere = "safetensors";
// A valid header nests three levels ({name: {shape: [...]}}); deeper JSON is refused before
// it can cost memory or time.
constexpr int kMaxJsonDepth = 8;

struct DTypeName {
  std::string_view name;
  DType dtype;
};
constexpr std::array<DTypeName, 6> kDTypeNames = {{
    {"F32", DType::f32},
    {"F16", DType::f16},
    {"BF16", DType::bf16},
    {"I32", DType::i32},
    {"U32", DType::u32},
    {"U8", DType::u8},
}};

std::string supported_names() {
  std::string out;
  for (const DTypeName& entry : kDTypeNames) {
    if (!out.empty()) out += ", ";
    out += entry.name;
  }
  return out;
}

// A non-negative JSON integer, or nullopt.
std::optional<uint64_t> json_count(const nlohmann::json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    return static_cast<uint64_t>(value.get<int64_t>());
  }
  return std::nullopt;
}

Shape make_shape(const std::vector<int64_t>& dims) {
  switch (dims.size()) {
    case 0:
      return Shape{};
    case 1:
      return Shape{dims[0]};
    case 2:
      return Shape{dims[0], dims[1]};
    case 3:
      return Shape{dims[0], dims[1], dims[2]};
    default:
      return Shape{dims[0], dims[1], dims[2], dims[3]};
  }
}

}  // namespace

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  for (const DTypeName& entry : kDTypeNames) {
    if (entry.name == name) return entry.dtype;
  }
  return std::nullopt;
}

std::string_view safetensors_dtype_name(DType dtype) {
  for (const DTypeName& entry : kDTypeNames) {
    if (entry.dtype == dtype) return entry.name;
  }
  fail(kWhere, "safetensors has no dtype for ", dtype_name(dtype));
}

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile file;
  file.file_ = MappedFile(path);
  file.source_ = path.string();
  file.parse(file.file_.data(), file.file_.size());
  return file;
}

SafetensorsFile SafetensorsFile::from_memory(const void* data, size_t size, std::string name) {
  check(data != nullptr || size == 0, kWhere, name, ": null data of ", size, " bytes");
  SafetensorsFile file;
  file.source_ = std::move(name);
  file.parse(static_cast<const uint8_t*>(data), size);
  return file;
}

void SafetensorsFile::parse(const uint8_t* data, size_t size) {
  check(size >= 8, kWhere, source_, ": ", size,
        " bytes is too short for the 8-byte header length at offset 0");
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, data, 8);
  check(header_bytes <= size - 8, kWhere, source_, ": header length ", header_bytes,
        " at offset 0 exceeds the file (", size - 8, " bytes after it)");
  check(header_bytes <= kSafetensorsMaxHeaderBytes, kWhere, source_, ": header length ",
        header_bytes, " at offset 0 exceeds the limit of ", kSafetensorsMaxHeaderBytes, " bytes");
  data_offset_ = 8 + header_bytes;
  const uint64_t data_bytes = size - data_offset_;
  const auto* text = reinterpret_cast<const char*>(data + 8);

  nlohmann::json header;
  // nlohmann keeps the last of two equal keys; a duplicate tensor name is an error here.
  std::set<std::string> top_level_keys;
  try {
    header = nlohmann::json::parse(
        text, text + header_bytes,
        [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
          if (depth > kMaxJsonDepth) {
            fail(kWhere, source_, ": JSON header nests deeper than ", kMaxJsonDepth, " levels");
          }
          if (event == nlohmann::json::parse_event_t::key && depth == 1 &&
              !top_level_keys.insert(parsed.get<std::string>()).second) {
            fail(kWhere, source_, ": the JSON header names '", parsed.get<std::string>(),
                 "' twice");
          }
          return true;
        });
  } catch (const nlohmann::json::exception& e) {
    // nlohmann's byte positions count from the start of the JSON; report file offsets.
    fail(kWhere, source_, ": the JSON header (file offsets 8..", data_offset_,
         ") does not parse: ", e.what());
  }
  check(header.is_object(), kWhere, source_, ": the JSON header is a ", header.type_name(),
        ", expected an object of tensors");

  tensors_.reserve(header.size());
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      check(entry.is_object(), kWhere, source_, ": __metadata__ is a ", entry.type_name(),
            ", expected an object of strings");
      for (const auto& [key, value] : entry.items()) {
        metadata_[key] = value.is_string() ? value.get<std::string>() : value.dump();
      }
      continue;
    }
    const std::string what = cat(source_, ": tensor '", name, "'");
    check(entry.is_object(), kWhere, what, " is a ", entry.type_name(), ", expected an object");
    const auto dtype_it = entry.find("dtype");
    const auto shape_it = entry.find("shape");
    const auto offsets_it = entry.find("data_offsets");
    check(dtype_it != entry.end() && dtype_it->is_string(), kWhere, what, " has no dtype string");
    check(shape_it != entry.end() && shape_it->is_array(), kWhere, what, " has no shape array");
    check(offsets_it != entry.end() && offsets_it->is_array() && offsets_it->size() == 2, kWhere,
          what, " has no data_offsets [begin, end]");

    TensorInfo info;
    info.name = name;
    const std::string dtype_text = dtype_it->get<std::string>();
    const std::optional<DType> dtype = dtype_from_safetensors(dtype_text);
    check(dtype.has_value(), kWhere, what, ": dtype '", dtype_text,
          "' is not supported; supported: ", supported_names());
    info.dtype = *dtype;

    check(shape_it->size() <= static_cast<size_t>(Shape::kMaxDims), kWhere, what, ": shape ",
          shape_it->dump(), " has more than ", Shape::kMaxDims, " dimensions");
    std::vector<int64_t> dims;
    uint64_t elements = 1;
    for (const nlohmann::json& dim : *shape_it) {
      const std::optional<uint64_t> extent = json_count(dim);
      check(extent.has_value() && *extent <= uint64_t{std::numeric_limits<int64_t>::max()}, kWhere,
            what, ": shape ", shape_it->dump(), " must hold non-negative integers");
      check(!__builtin_mul_overflow(elements, *extent, &elements) &&
                elements <= uint64_t{std::numeric_limits<int64_t>::max()},
            kWhere, what, ": shape ", shape_it->dump(), " has more than 2^63 elements");
      dims.push_back(static_cast<int64_t>(*extent));
    }
    info.shape = make_shape(dims);

    const std::optional<uint64_t> begin = json_count((*offsets_it)[0]);
    const std::optional<uint64_t> end = json_count((*offsets_it)[1]);
    check(begin && end && *begin <= *end, kWhere, what, ": data_offsets ", offsets_it->dump(),
          " must be non-negative integers [begin, end] with begin <= end");
    check(*end <= data_bytes, kWhere, what, ": data_offsets ", offsets_it->dump(),
          " (file offsets ", data_offset_ + *begin, "..", data_offset_ + *end,
          ") run past the end of the file (", data_bytes, " data bytes from offset ", data_offset_,
          ")");
    uint64_t bytes = 0;
    check(!__builtin_mul_overflow(elements, uint64_t{dtype_size(info.dtype)}, &bytes), kWhere, what,
          ": shape ", shape_it->dump(), " x ", dtype_text, " overflows");
    check(bytes == *end - *begin, kWhere, what, ": shape ", shape_it->dump(), " x ", dtype_text,
          " is ", bytes, " bytes but data_offsets ", offsets_it->dump(), " span ", *end - *begin);
    info.offset = data_offset_ + *begin;
    info.bytes = bytes;
    info.data = data + info.offset;
    tensors_.push_back(std::move(info));
  }

  // nlohmann's object is ordered by key, so tensors_ is sorted by name already; the
  // overlap check needs them by offset.
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const TensorInfo& t : tensors_) {
    if (t.bytes != 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& previous = *by_offset[i - 1];
    const TensorInfo& next = *by_offset[i];
    check(previous.offset + previous.bytes <= next.offset, kWhere, source_, ": tensor '", next.name,
          "' (file bytes ", next.offset, "..", next.offset + next.bytes, ") overlaps tensor '",
          previous.name, "' (", previous.offset, "..", previous.offset + previous.bytes, ")");
  }
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& SafetensorsFile::tensor(std::string_view name) const {
  const TensorInfo* info = find(name);
  if (info == nullptr) {
    fail(kWhere, source_, ": no tensor named '", name, "' (", tensors_.size(), " tensors)");
  }
  return *info;
}

}  // namespace onepass::model
