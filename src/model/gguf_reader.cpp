// GGUF reader. Every count and length read from the file is checked against the bytes that
// remain before it is used, so parsing costs O(file size) time and memory whatever the
// file claims, and a bad file ends in one Error naming the field and its offset.
#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>

#include "onepass/core/error.h"
#include "gguf_internal.h"
#include "onepass/model/gguf.h"

namespace onepass::model {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader reads little-endian files in place");

namespace {

constexpr std::string_view kWhere = kGgufWhere;
// Spec limits: keys at most 65535 bytes, tensor names at most 64.
constexpr uint64_t kMaxKeyBytes = 65535;
constexpr uint64_t kMaxTensorNameBytes = 64;
constexpr uint64_t kNoLimit = std::numeric_limits<uint64_t>::max();
// Smallest encodings, used to bound counts by the bytes left: a metadata entry is at least
// a key length (8) + type (4) + a one-byte value; a tensor info at least a name length (8),
// n_dims (4), one dim (8), type (4) and offset (8).
constexpr uint64_t kMinEntryBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;
constexpr uint64_t kMinStringBytes = 8;
constexpr uint64_t kMinArrayBytes = 4 + 8;
// Parsed entries take several times their smallest encoding, so vectors reserve at most this
// many up front and otherwise grow only as entries are actually read.
constexpr uint64_t kMaxReserve = 1 << 16;

// GGML types by id, from the GGUF spec (ids 4, 5, 31-33 and 36-38 are retired): name, and
// values and bytes per block, so that tensors of types onepass does not compute with can
// still be listed and placed.
struct GgmlType {
  std::string_view name;
  uint32_t block_elems;
  uint32_t block_bytes;
};
constexpr std::array<GgmlType, 42> kGgmlTypes = {{
    {"f32", 1, 4},       {"f16", 1, 2},        {"q4_0", 32, 18},     {"q4_1", 32, 20},
    {"", 0, 0},          {"", 0, 0},           {"q5_0", 32, 22},     {"q5_1", 32, 24},
    {"q8_0", 32, 34},    {"q8_1", 32, 40},     {"q2_k", 256, 84},    {"q3_k", 256, 110},
    {"q4_k", 256, 144},  {"q5_k", 256, 176},   {"q6_k", 256, 210},   {"q8_k", 256, 292},
    {"iq2_xxs", 256, 66}, {"iq2_xs", 256, 74}, {"iq3_xxs", 256, 98}, {"iq1_s", 256, 50},
    {"iq4_nl", 32, 18},  {"iq3_s", 256, 110},  {"iq2_s", 256, 82},   {"iq4_xs", 256, 136},
    {"i8", 1, 1},        {"i16", 1, 2},        {"i32", 1, 4},        {"i64", 1, 8},
    {"f64", 1, 8},       {"iq1_m", 256, 56},   {"bf16", 1, 2},       {"", 0, 0},
    {"", 0, 0},          {"", 0, 0},           {"tq1_0", 256, 54},   {"tq2_0", 256, 66},
    {"", 0, 0},          {"", 0, 0},           {"", 0, 0},           {"mxfp4", 32, 17},
    {"nvfp4", 64, 36},   {"q1_0", 128, 18},
}};

// The GGML type `id` when the spec defines it (a name and a block size).
const GgmlType* ggml_type(uint32_t id) {
  if (id >= kGgmlTypes.size() || kGgmlTypes[id].name.empty()) return nullptr;
  return &kGgmlTypes[id];
}

// Encoded size of a fixed-size value type; 0 for string and array.
uint64_t fixed_size(GgufType type) {
  switch (type) {
    case GgufType::u8:
    case GgufType::i8:
    case GgufType::boolean:
      return 1;
    case GgufType::u16:
    case GgufType::i16:
      return 2;
    case GgufType::u32:
    case GgufType::i32:
    case GgufType::f32:
      return 4;
    case GgufType::u64:
    case GgufType::i64:
    case GgufType::f64:
      return 8;
    case GgufType::string:
    case GgufType::array:
      return 0;
  }
  return 0;
}

}  // namespace

bool gguf_is_integer_type(GgufType type) {
  switch (type) {
    case GgufType::u8:
    case GgufType::i8:
    case GgufType::u16:
    case GgufType::i16:
    case GgufType::u32:
    case GgufType::i32:
    case GgufType::u64:
    case GgufType::i64:
      return true;
    default:
      return false;
  }
}

namespace {

bool known_type(uint32_t id) {
  return id <= static_cast<uint32_t>(GgufType::f64);
}

template <typename T>
T load(const uint8_t* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

// Size of the already-validated value of `type` at `at`, reading at most `left` bytes;
// 0 if it would not fit (cannot happen for values the parser accepted).
uint64_t encoded_size(GgufType type, const uint8_t* at, uint64_t left) {
  if (const uint64_t size = fixed_size(type)) return size <= left ? size : 0;
  if (type == GgufType::string) {
    if (left < 8) return 0;
    const auto length = load<uint64_t>(at);
    return length <= left - 8 ? 8 + length : 0;
  }
  if (left < kMinArrayBytes) return 0;
  const auto element = static_cast<GgufType>(load<uint32_t>(at));
  const auto count = load<uint64_t>(at + 4);
  uint64_t used = kMinArrayBytes;
  if (const uint64_t size = fixed_size(element)) {
    return count <= (left - used) / size ? used + count * size : 0;
  }
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t size = encoded_size(element, at + used, left - used);
    if (size == 0) return 0;
    used += size;
  }
  return used;
}

std::string quoted(std::string_view text, size_t max_chars) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size() && i < max_chars; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += text.size() > max_chars ? "\"..." : "\"";
  return out;
}

}  // namespace

std::string gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::u8:
      return "u8";
    case GgufType::i8:
      return "i8";
    case GgufType::u16:
      return "u16";
    case GgufType::i16:
      return "i16";
    case GgufType::u32:
      return "u32";
    case GgufType::i32:
      return "i32";
    case GgufType::f32:
      return "f32";
    case GgufType::boolean:
      return "bool";
    case GgufType::string:
      return "string";
    case GgufType::array:
      return "array";
    case GgufType::u64:
      return "u64";
    case GgufType::i64:
      return "i64";
    case GgufType::f64:
      return "f64";
  }
  return cat("type ", static_cast<uint32_t>(type));
}

std::string_view ggml_type_name(int32_t ggml_type) {
  const GgmlType* type =
      ggml_type < 0 ? nullptr : model::ggml_type(static_cast<uint32_t>(ggml_type));
  return type == nullptr ? "unknown" : type->name;
}

// --- GgufValue ------------------------------------------------------------------------

bool GgufValue::is_integer() const {
  return gguf_is_integer_type(type_);
}

std::optional<int64_t> GgufValue::to_i64() const {
  switch (type_) {
    case GgufType::u8:
      return load<uint8_t>(bytes_);
    case GgufType::i8:
      return load<int8_t>(bytes_);
    case GgufType::u16:
      return load<uint16_t>(bytes_);
    case GgufType::i16:
      return load<int16_t>(bytes_);
    case GgufType::u32:
      return load<uint32_t>(bytes_);
    case GgufType::i32:
      return load<int32_t>(bytes_);
    case GgufType::i64:
      return load<int64_t>(bytes_);
    case GgufType::u64: {
      const auto value = load<uint64_t>(bytes_);
      if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(value);
    }
    default:
      return std::nullopt;
  }
}

std::optional<uint64_t> GgufValue::to_u64() const {
  if (type_ == GgufType::u64) return load<uint64_t>(bytes_);
  const std::optional<int64_t> value = to_i64();
  if (!value || *value < 0) return std::nullopt;
  return static_cast<uint64_t>(*value);
}

std::optional<double> GgufValue::to_f64() const {
  if (type_ == GgufType::f32) return load<float>(bytes_);
  if (type_ == GgufType::f64) return load<double>(bytes_);
  return std::nullopt;
}

std::optional<bool> GgufValue::to_bool() const {
  if (type_ != GgufType::boolean) return std::nullopt;
  return bytes_[0] != 0;
}

std::optional<std::string_view> GgufValue::to_string_view() const {
  if (type_ != GgufType::string) return std::nullopt;
  const auto length = load<uint64_t>(bytes_);
  return std::string_view(reinterpret_cast<const char*>(bytes_ + 8), length);
}

void GgufValue::for_each(const std::function<bool(const GgufValue&)>& fn) const {
  if (type_ != GgufType::array) return;
  GgufValue item;
  item.type_ = array_type_;
  uint64_t used = kMinArrayBytes;
  for (uint64_t i = 0; i < count_; ++i) {
    const uint8_t* at = bytes_ + used;
    const uint64_t size = encoded_size(array_type_, at, size_ - used);
    check(size != 0, kWhere, "array element ", i, " at offset ", offset_ + used,
          " overruns its array (the file changed after it was opened?)");
    item.offset_ = offset_ + used;
    item.bytes_ = at;
    item.size_ = size;
    if (array_type_ == GgufType::array) {
      item.array_type_ = static_cast<GgufType>(load<uint32_t>(at));
      item.count_ = load<uint64_t>(at + 4);
    }
    if (!fn(item)) return;
    used += size;
  }
}

GgufValue GgufValue::at(uint64_t index) const {
  check(type_ == GgufType::array, kWhere, "value at offset ", offset_, " is ",
        gguf_type_name(type_), ", not an array");
  check(index < count_, kWhere, "index ", index, " outside array of ", count_, " at offset ",
        offset_);
  if (const uint64_t size = fixed_size(array_type_)) {
    GgufValue item;
    item.type_ = array_type_;
    item.offset_ = offset_ + kMinArrayBytes + index * size;
    item.bytes_ = bytes_ + kMinArrayBytes + index * size;
    item.size_ = size;
    return item;
  }
  GgufValue found;
  uint64_t i = 0;
  for_each([&](const GgufValue& item) {
    if (i++ < index) return true;
    found = item;
    return false;
  });
  return found;
}

std::string GgufValue::describe(size_t max_items, size_t max_chars) const {
  switch (type_) {
    case GgufType::boolean:
      return bytes_[0] != 0 ? "true" : "false";
    case GgufType::f32:
    case GgufType::f64: {
      // Shortest text that reads back as the same value: 1e-05, not 9.99999975e-06.
      char text[40];
      const auto result = type_ == GgufType::f32
                              ? std::to_chars(text, text + sizeof(text), load<float>(bytes_))
                              : std::to_chars(text, text + sizeof(text), load<double>(bytes_));
      return std::string(text, result.ptr);
    }
    case GgufType::string:
      return quoted(*to_string_view(), max_chars);
    case GgufType::u64:
      return std::to_string(*to_u64());
    case GgufType::array: {
      std::string out = cat("[", count_, " x ", gguf_type_name(array_type_));
      size_t shown = 0;
      for_each([&](const GgufValue& item) {
        if (shown == max_items) {
          out += ", ...";
          return false;
        }
        out += shown++ == 0 ? ": " : ", ";
        out += item.describe(max_items, max_chars);
        return true;
      });
      return out + "]";
    }
    default:
      return std::to_string(*to_i64());
  }
}

// --- parser ---------------------------------------------------------------------------

// Reads one file front to back. `context_` names what is being read ("metadata key 3
// ('general.name')") for error messages.
class GgufParser {
 public:
  GgufParser(GgufFile& file, const uint8_t* data, size_t size)
      : file_(file), data_(data), size_(size) {}

  void parse() {
    parse_header();
    parse_metadata();
    parse_alignment();
    parse_tensor_infos();
    place_tensors();
  }

 private:
  template <typename... Parts>
  [[noreturn]] void error(const Parts&... parts) const {
    if (context_.empty()) fail(kWhere, file_.source_, ": ", parts...);
    fail(kWhere, file_.source_, ": ", context_, ": ", parts...);
  }

  uint64_t left() const { return size_ - pos_; }

  // Throws unless `bytes` more bytes exist at the current position. The `what` parts name
  // the field; they are only formatted when the check fails.
  template <typename... What>
  void need(uint64_t bytes, const What&... what) const {
    if (bytes > left()) {
      error(what..., " (", bytes, " bytes) at offset ", pos_, " runs past the end of the file (",
            left(), " bytes left)");
    }
  }

  template <typename T, typename... What>
  T read(const What&... what) {
    need(sizeof(T), what...);
    const T value = load<T>(data_ + pos_);
    pos_ += sizeof(T);
    return value;
  }

  // A length-prefixed string no longer than `max_length` (or the rest of the file).
  template <typename... What>
  std::string_view read_string(uint64_t max_length, const What&... what) {
    const uint64_t at = pos_;
    const auto length = read<uint64_t>(what..., " length");
    if (length > left()) {
      error(what..., " of ", length, " bytes at offset ", at, " exceeds the file (", left(),
            " bytes left)");
    }
    if (length > max_length) {
      error(what..., " of ", length, " bytes at offset ", at, " exceeds the GGUF limit of ",
            max_length, " bytes");
    }
    const std::string_view text(reinterpret_cast<const char*>(data_ + pos_), length);
    pos_ += length;
    return text;
  }

  GgufType read_type(std::string_view what) {
    const uint64_t at = pos_;
    const auto id = read<uint32_t>(what);
    if (!known_type(id)) {
      error("unknown ", what, " ", id, " at offset ", at,
            " (metadata types are 0..12: u8, i8, u16, i16, u32, i32, f32, bool, string, "
            "array, u64, i64, f64)");
    }
    return static_cast<GgufType>(id);
  }

  void parse_header() {
    if (size_ < 4 || std::memcmp(data_, "GGUF", 4) != 0) {
      std::string seen;
      for (size_t i = 0; i < 4 && i < size_; ++i) seen += cat(i ? " " : "", int{data_[i]});
      error("not a GGUF file: the first bytes are [", seen, "] at offset 0, expected 'GGUF'");
    }
    pos_ = 4;
    const uint64_t version_at = pos_;
    const auto version = read<uint32_t>("version");
    if (version == 0x02000000u || version == 0x03000000u) {
      error("big-endian GGUF (version bytes ", version, " at offset ", version_at,
            ") is not supported");
    }
    if (version != 2 && version != 3) {
      error("GGUF version ", version, " at offset ", version_at,
            " is not supported (versions 2 and 3 are)");
    }
    file_.version_ = version;
    const uint64_t tensors_at = pos_;
    tensor_count_ = read<uint64_t>("tensor count");
    const uint64_t entries_at = pos_;
    entry_count_ = read<uint64_t>("metadata count");
    // Each entry and each tensor info needs some bytes, so neither count can exceed what is
    // left; checking here keeps later reserve() calls bounded by the file size.
    if (entry_count_ > left() / kMinEntryBytes) {
      error("metadata count ", entry_count_, " at offset ", entries_at, " exceeds the file (",
            left(), " bytes left, at least ", kMinEntryBytes, " per entry)");
    }
    if (tensor_count_ > (left() - entry_count_ * kMinEntryBytes) / kMinTensorInfoBytes) {
      error("tensor count ", tensor_count_, " at offset ", tensors_at, " exceeds the file (",
            left(), " bytes left for ", entry_count_, " metadata entries and the tensor infos, ",
            "at least ", kMinTensorInfoBytes, " per tensor)");
    }
  }

  void parse_metadata() {
    file_.entries_.reserve(std::min<uint64_t>(entry_count_, kMaxReserve));
    for (uint64_t i = 0; i < entry_count_; ++i) {
      context_ = cat("metadata key ", i);
      const std::string_view key = read_string(kMaxKeyBytes, "key");
      context_ = cat("metadata key ", i, " ('", key, "')");
      const uint64_t key_at = pos_ - key.size() - 8;
      if (file_.entry_index_.count(key) != 0) {
        error("duplicate key at offset ", key_at);
      }
      const GgufType type = read_type("value type");
      const GgufValue value = parse_value(type, 0);
      file_.entry_index_.emplace(std::string(key), file_.entries_.size());
      file_.entries_.push_back(GgufEntry{std::string(key), value});
    }
    context_.clear();
  }

  // Reads one value of `type`; `depth` counts the arrays it is nested in.
  GgufValue parse_value(GgufType type, int depth) {
    GgufValue value;
    value.type_ = type;
    value.offset_ = pos_;
    value.bytes_ = data_ + pos_;
    if (const uint64_t size = fixed_size(type)) {
      need(size, gguf_type_name(type), " value");
      pos_ += size;
    } else if (type == GgufType::string) {
      read_string(kNoLimit, "string");
    } else {
      parse_array(value, depth);
    }
    value.size_ = pos_ - value.offset_;
    return value;
  }

  void parse_array(GgufValue& value, int depth) {
    const uint64_t at = pos_;
    if (depth >= kGgufMaxArrayDepth) {
      error("array at offset ", at, " is nested deeper than ", kGgufMaxArrayDepth, " levels");
    }
    const GgufType element = read_type("array element type");
    const auto count = read<uint64_t>("array length");
    value.array_type_ = element;
    value.count_ = count;
    const uint64_t element_min = fixed_size(element) != 0      ? fixed_size(element)
                                 : element == GgufType::string ? kMinStringBytes
                                                               : kMinArrayBytes;
    if (count > left() / element_min) {
      error("array of ", count, " ", gguf_type_name(element), element == GgufType::array ? "s" : "",
            element == GgufType::string ? "s" : "", " at offset ", at, " exceeds the file (",
            left(), " bytes left)");
    }
    if (fixed_size(element) != 0) {
      pos_ += count * element_min;
      return;
    }
    for (uint64_t i = 0; i < count; ++i) {
      if (element == GgufType::string) {
        read_string(kNoLimit, "array element ", i, " (string)");
      } else {
        GgufValue inner;
        parse_array(inner, depth + 1);
      }
    }
  }

  void parse_alignment() {
    const GgufValue* value = file_.find("general.alignment");
    if (value == nullptr) return;
    context_ = "metadata key 'general.alignment'";
    const std::optional<uint64_t> alignment = value->to_u64();
    if (!value->is_integer() || !alignment) {
      error("is ", gguf_type_name(value->type()), " ", value->describe(), " at offset ",
            value->offset(), ", expected an unsigned integer");
    }
    if (*alignment == 0 || !std::has_single_bit(*alignment) ||
        *alignment > std::numeric_limits<uint32_t>::max()) {
      error("alignment ", *alignment, " at offset ", value->offset(),
            " must be a power of two below 2^32");
    }
    file_.alignment_ = *alignment;
    context_.clear();
  }

  void parse_tensor_infos() {
    file_.tensors_.reserve(std::min<uint64_t>(tensor_count_, kMaxReserve));
    info_offsets_.reserve(std::min<uint64_t>(tensor_count_, kMaxReserve));
    for (uint64_t i = 0; i < tensor_count_; ++i) {
      context_ = cat("tensor ", i);
      info_offsets_.push_back(pos_);
      TensorInfo info;
      info.name = std::string(read_string(kMaxTensorNameBytes, "name"));
      if (info.name.empty()) error("empty name at offset ", info_offsets_.back());
      context_ = cat("tensor ", i, " ('", info.name, "')");
      if (file_.tensor_index_.count(info.name) != 0) {
        error("duplicate tensor name at offset ", info_offsets_.back());
      }
      const uint64_t dims_at = pos_;
      const auto n_dims = read<uint32_t>("n_dims");
      if (n_dims == 0 || n_dims > static_cast<uint32_t>(Shape::kMaxDims)) {
        error("n_dims ", n_dims, " at offset ", dims_at, " is outside 1..", Shape::kMaxDims);
      }
      // GGUF stores ne[0] (the contiguous extent) first; onepass shapes are outermost first.
      std::array<int64_t, Shape::kMaxDims> ne{};
      int64_t elements = 1;
      for (uint32_t d = 0; d < n_dims; ++d) {
        const uint64_t at = pos_;
        const auto dim = read<uint64_t>("dimension ", d);
        if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          error("dimension ", d, " is ", dim, " at offset ", at, "; dimensions must be positive");
        }
        if (__builtin_mul_overflow(elements, static_cast<int64_t>(dim), &elements)) {
          error("dimensions up to ", d, " at offset ", at, " multiply to more than 2^63 elements");
        }
        ne[d] = static_cast<int64_t>(dim);
      }
      info.shape = make_shape(ne, n_dims);
      const auto type_id = read<uint32_t>("type");
      const std::optional<DType> dtype =
          type_id <= static_cast<uint32_t>(std::numeric_limits<int32_t>::max())
              ? dtype_from_ggml(static_cast<int32_t>(type_id))
              : std::nullopt;
      // A type onepass does not compute with is kept by name (inspect lists it; loading the
      // tensor fails): placed by its block size where the spec gives one, else as 0 bytes.
      const GgmlType* spec = ggml_type(type_id);
      info.dtype = dtype.value_or(DType::u8);
      if (!dtype) info.unsupported_type = spec != nullptr ? std::string(spec->name) : cat("type ", type_id);
      const uint32_t block = dtype ? dtype_block_elems(*dtype) : spec != nullptr ? spec->block_elems : 1;
      const uint64_t block_bytes = dtype ? dtype_size(*dtype) : spec != nullptr ? spec->block_bytes : 0;
      const std::string type_name = dtype ? std::string(dtype_name(*dtype)) : info.unsupported_type;
      if (ne[0] % block != 0) {
        error("innermost dimension ", ne[0], " at offset ", dims_at + 4, " is not a multiple of ",
              type_name, "'s block of ", block, " values");
      }
      const uint64_t blocks = static_cast<uint64_t>(elements) / block;
      if (__builtin_mul_overflow(blocks, block_bytes, &info.bytes)) {
        error(info.shape.str(), " ", type_name, " at offset ", dims_at, " needs more than 2^64 bytes");
      }
      const uint64_t offset_at = pos_;
      info.offset = read<uint64_t>("data offset");
      if (info.offset % file_.alignment_ != 0) {
        error("data offset ", info.offset, " at offset ", offset_at,
              " is not a multiple of the alignment ", file_.alignment_);
      }
      file_.tensor_index_.emplace(info.name, file_.tensors_.size());
      file_.tensors_.push_back(std::move(info));
    }
    context_.clear();
  }

  static Shape make_shape(const std::array<int64_t, Shape::kMaxDims>& ne, uint32_t n_dims) {
    switch (n_dims) {
      case 1:
        return Shape{ne[0]};
      case 2:
        return Shape{ne[1], ne[0]};
      case 3:
        return Shape{ne[2], ne[1], ne[0]};
      default:
        return Shape{ne[3], ne[2], ne[1], ne[0]};
    }
  }

  // Places the data section after the header and checks every tensor lies inside the
  // file without overlapping another.
  void place_tensors() {
    const uint64_t header_end = pos_;
    const uint64_t alignment = file_.alignment_;
    file_.data_offset_ = (header_end + alignment - 1) / alignment * alignment;
    const uint64_t data_begin = file_.data_offset_;
    const uint64_t data_bytes = data_begin <= size_ ? size_ - data_begin : 0;
    for (size_t i = 0; i < file_.tensors_.size(); ++i) {
      TensorInfo& info = file_.tensors_[i];
      if (info.offset > data_bytes || info.bytes > data_bytes - info.offset) {
        context_ = cat("tensor ", i, " ('", info.name, "')");
        error("data of ", info.bytes, " bytes at data offset ", info.offset,
              " (tensor info at offset ", info_offsets_[i],
              ") runs past the end of the file: ", "the data section starts at ", data_begin,
              " and the file has ", size_, " bytes");
      }
      info.offset += data_begin;
      info.data = data_ + info.offset;
    }
    std::vector<size_t> order(file_.tensors_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return file_.tensors_[a].offset < file_.tensors_[b].offset;
    });
    for (size_t k = 1; k < order.size(); ++k) {
      const TensorInfo& previous = file_.tensors_[order[k - 1]];
      const TensorInfo& next = file_.tensors_[order[k]];
      if (previous.offset + previous.bytes > next.offset) {
        error("tensor '", next.name, "' [", next.offset, ", ", next.offset + next.bytes,
              ") overlaps tensor '", previous.name, "' [", previous.offset, ", ",
              previous.offset + previous.bytes, ") (file offsets)");
      }
    }
  }

  GgufFile& file_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t tensor_count_ = 0;
  uint64_t entry_count_ = 0;
  std::vector<uint64_t> info_offsets_;  // file offset of each tensor info, for messages
  std::string context_;
};

// --- GgufFile -------------------------------------------------------------------------

GgufFile GgufFile::open(const std::filesystem::path& path) {
  GgufFile file;
  file.file_ = MappedFile(path);
  file.source_ = path.string();
  file.size_ = file.file_.size();
  GgufParser(file, file.file_.data(), file.size_).parse();
  return file;
}

GgufFile GgufFile::from_memory(const void* data, size_t size, std::string name) {
  check(data != nullptr || size == 0, kWhere, name, ": null data of ", size, " bytes");
  GgufFile file;
  file.source_ = std::move(name);
  file.size_ = size;
  GgufParser(file, static_cast<const uint8_t*>(data), size).parse();
  return file;
}

}  // namespace onepass::model
