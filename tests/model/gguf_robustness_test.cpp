// The GGUF reader against truncated, corrupt and hostile files: each must give an
// onepass::Error naming the field and offset — never a crash, hang or huge allocation.
#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "onepass/core/error.h"
#include "onepass/model/gguf.h"

namespace onepass {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kHuge = 0xFFFFFFFFFFFFFFFFull;

// Builds GGUF bytes field by field, so tests can write counts and lengths that lie.
class Bytes {
 public:
  Bytes& u8(uint8_t v) { return raw(&v, 1); }
  Bytes& u32(uint32_t v) { return raw(&v, 4); }
  Bytes& u64(uint64_t v) { return raw(&v, 8); }
  Bytes& str(std::string_view s) {
    u64(s.size());
    return raw(s.data(), s.size());
  }
  Bytes& raw(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    bytes_.insert(bytes_.end(), p, p + n);
    return *this;
  }
  Bytes& header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
    raw("GGUF", 4);
    u32(version);
    u64(tensors);
    return u64(kvs);
  }
  // A metadata entry's key and type tag; the caller appends the value.
  Bytes& key(std::string_view name, model::GgufType type) {
    str(name);
    return u32(static_cast<uint32_t>(type));
  }
  // A tensor info with dims in GGUF order (ne[0] first).
  Bytes& tensor(std::string_view name, std::vector<uint64_t> ne, uint32_t ggml_type,
                uint64_t offset) {
    str(name);
    u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) u64(d);
    u32(ggml_type);
    return u64(offset);
  }
  Bytes& pad(size_t alignment) {
    while (bytes_.size() % alignment != 0) u8(0);
    return *this;
  }
  Bytes& zeros(size_t n) {
    bytes_.resize(bytes_.size() + n, 0);
    return *this;
  }
  size_t size() const { return bytes_.size(); }
  const std::vector<uint8_t>& get() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// Parses `bytes`; returns the Error message ("" when the file was accepted). Any other
// exception fails the test.
std::string parse_error(const std::vector<uint8_t>& bytes, size_t size) {
  try {
    const model::GgufFile f = model::GgufFile::from_memory(bytes.data(), size, "t.gguf");
    // Touch everything an accepted file offers.
    for (const model::GgufEntry& e : f.metadata()) (void)e.value.describe(1000, 1000);
    for (const model::TensorInfo& t : f.tensors()) {
      if (t.bytes == 0) continue;  // a type of unknown block size
      volatile uint8_t last = static_cast<const uint8_t*>(t.data)[t.bytes - 1];
      (void)last;
    }
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}
std::string parse_error(const Bytes& b) {
  return parse_error(b.get(), b.size());
}

#define EXPECT_GGUF_ERROR(bytes, fragment)                                                  \
  do {                                                                                      \
    const std::string message_ = parse_error(bytes);                                        \
    EXPECT_NE(message_.find(fragment), std::string::npos)                                   \
        << "expected an error containing '" << (fragment) << "', got '" << message_ << "'"; \
    EXPECT_EQ(message_.rfind("[gguf] t.gguf: ", 0), 0u) << message_;                        \
  } while (0)

// A small valid file with every kind of metadata and three tensors.
std::vector<uint8_t> small_valid_file() {
  const fs::path path = fs::temp_directory_path() / cat("onepass_gguf_small_", ::getpid(), ".gguf");
  {
    model::GgufWriter w(path);
    w.set_string("general.architecture", "llama");
    w.set_u32("llama.block_count", 2);
    w.set("f", model::GgufMetaValue::f64(0.5));
    w.set("b", model::GgufMetaValue::boolean(true));
    w.set_strings("tokens", {"a", "bc", ""});
    w.set("nested",
          model::GgufMetaValue::array(model::GgufType::array,
                                      {model::GgufMetaValue::i32s(std::vector<int32_t>{1, 2})}));
    std::vector<uint8_t> data(100, 7);
    w.add_tensor("a", DType::f32, Shape{2, 3});
    w.add_tensor("b", DType::q4_0, Shape{1, 32});
    w.add_tensor("c", DType::f16, Shape{5});
    w.write_tensor("a", data.data(), 24);
    w.write_tensor("b", data.data(), 18);
    w.write_tensor("c", data.data(), 10);
    w.finish();
  }
  std::FILE* in = std::fopen(path.c_str(), "rb");
  std::vector<uint8_t> bytes(4096);
  bytes.resize(std::fread(bytes.data(), 1, bytes.size(), in));
  std::fclose(in);
  fs::remove(path);
  return bytes;
}

TEST(GgufRobustness, SmallValidFileParses) {
  const std::vector<uint8_t> bytes = small_valid_file();
  EXPECT_EQ(parse_error(bytes, bytes.size()), "");
}

TEST(GgufRobustness, EveryTruncationIsAnError) {
  const std::vector<uint8_t> bytes = small_valid_file();
  const model::GgufFile full = model::GgufFile::from_memory(bytes.data(), bytes.size());
  const model::TensorInfo& last = full.tensors().back();
  const size_t data_end = last.offset + last.bytes;  // the padding after it is optional
  ASSERT_GT(full.data_offset(), 100u);
  for (size_t size = 0; size < data_end; ++size) {
    SCOPED_TRACE(cat("truncated to ", size, " bytes"));
    const std::string message = parse_error(bytes, size);
    EXPECT_EQ(message.rfind("[gguf] t.gguf: ", 0), 0u) << message;
    EXPECT_NE(message.find("offset"), std::string::npos) << message;
  }
  for (size_t size = data_end; size <= bytes.size(); ++size) {
    EXPECT_EQ(parse_error(bytes, size), "") << size;
  }
  // A cut inside the header names what was being read.
  EXPECT_NE(parse_error(bytes, 10).find("tensor count (8 bytes) at offset 8 runs past the end"),
            std::string::npos)
      << parse_error(bytes, 10);
}

TEST(GgufRobustness, BadMagicAndVersion) {
  EXPECT_GGUF_ERROR(Bytes().raw("GGML", 4).u32(3).u64(0).u64(0), "not a GGUF file");
  EXPECT_GGUF_ERROR(Bytes().header(0, 0, 1), "GGUF version 1 at offset 4 is not supported");
  EXPECT_GGUF_ERROR(Bytes().header(0, 0, 4), "GGUF version 4");
  EXPECT_GGUF_ERROR(Bytes().header(0, 0, 0x03000000), "big-endian");
  EXPECT_EQ(parse_error(Bytes().header(0, 0)), "");  // empty but valid
}

TEST(GgufRobustness, LyingCounts) {
  EXPECT_GGUF_ERROR(Bytes().header(0, kHuge), "metadata count 18446744073709551615 at offset 16");
  EXPECT_GGUF_ERROR(Bytes().header(kHuge, 0), "tensor count 18446744073709551615 at offset 8");
  EXPECT_GGUF_ERROR(Bytes().header(1ull << 40, 0).zeros(64), "exceeds the file");
  // A count that passes the size bound still fails on the first entry that is not there.
  EXPECT_GGUF_ERROR(Bytes().header(0, 2).key("k", model::GgufType::u8).u8(1).zeros(12),
                    "metadata key 1 ('')");
  EXPECT_GGUF_ERROR(Bytes().header(1, 0).zeros(40), "tensor 0");
}

TEST(GgufRobustness, LyingLengths) {
  EXPECT_GGUF_ERROR(
      Bytes().header(0, 1).u64(kHuge).zeros(16),
      "metadata key 0: key of 18446744073709551615 bytes at offset 24 exceeds the file");
  EXPECT_GGUF_ERROR(Bytes().header(0, 1).u64(70000).zeros(70000 + 16),
                    "exceeds the GGUF limit of 65535");
  EXPECT_GGUF_ERROR(Bytes().header(0, 1).key("s", model::GgufType::string).u64(1ull << 62).zeros(8),
                    "metadata key 0 ('s'): string of 4611686018427387904 bytes at offset 37");
  // The example from the brief: a string array whose count cannot fit.
  EXPECT_GGUF_ERROR(Bytes()
                        .header(0, 1)
                        .key("tokenizer.ggml.tokens", model::GgufType::array)
                        .u32(static_cast<uint32_t>(model::GgufType::string))
                        .u64(4294967296ull)
                        .zeros(8000),
                    "metadata key 0 ('tokenizer.ggml.tokens'): array of 4294967296 strings at "
                    "offset 57 exceeds the file (8000 bytes left)");
  for (const model::GgufType element :
       {model::GgufType::u8, model::GgufType::u32, model::GgufType::f64, model::GgufType::array}) {
    SCOPED_TRACE(model::gguf_type_name(element));
    EXPECT_GGUF_ERROR(Bytes()
                          .header(0, 1)
                          .key("a", model::GgufType::array)
                          .u32(static_cast<uint32_t>(element))
                          .u64(kHuge / 2)
                          .zeros(100),
                      "array of 9223372036854775807");
  }
  // One string element inside an array lies about its length.
  EXPECT_GGUF_ERROR(Bytes()
                        .header(0, 1)
                        .key("a", model::GgufType::array)
                        .u32(static_cast<uint32_t>(model::GgufType::string))
                        .u64(2)
                        .str("ok")
                        .u64(1000)
                        .zeros(10),
                    "array element 1 (string) of 1000 bytes at offset 59 exceeds the file");
  // Tensor name longer than the spec's 64 bytes.
  EXPECT_GGUF_ERROR(Bytes().header(1, 0).tensor(std::string(65, 'x'), {4}, 0, 0).pad(32).zeros(16),
                    "exceeds the GGUF limit of 64");
}

TEST(GgufRobustness, UnknownAndUnsupportedTypes) {
  EXPECT_GGUF_ERROR(Bytes().header(0, 1).str("k").u32(13).zeros(8),
                    "unknown value type 13 at offset 33");
  EXPECT_GGUF_ERROR(Bytes().header(0, 1).str("k").u32(0xFFFFFFFF).zeros(8), "unknown value type");
  EXPECT_GGUF_ERROR(Bytes().header(0, 1).key("k", model::GgufType::array).u32(99).u64(0),
                    "unknown array element type 99");
  auto file_with_type = [](uint32_t ggml_type, uint64_t ne0 = 256) {
    return Bytes().header(1, 0).tensor("w", {ne0}, ggml_type, 0).pad(32).zeros(1024);
  };
  EXPECT_EQ(parse_error(file_with_type(14)), "");  // q6_k
  EXPECT_EQ(parse_error(file_with_type(6)), "");   // q5_0
  // Types onepass does not compute with are listed by name (or id) with the u8 placeholder;
  // tensors of a type with a known block size are placed and checked by it.
  auto type_of = [&](uint32_t ggml_type) {
    const Bytes b = file_with_type(ggml_type);
    const model::GgufFile f = model::GgufFile::from_memory(b.get().data(), b.size(), "t.gguf");
    const model::TensorInfo& t = f.tensor("w");
    EXPECT_EQ(t.dtype, DType::u8);
    return std::pair(t.unsupported_type, t.bytes);
  };
  EXPECT_EQ(type_of(16), std::pair(std::string("iq2_xxs"), uint64_t{66}));
  EXPECT_EQ(type_of(99), std::pair(std::string("type 99"), uint64_t{0}));
  EXPECT_EQ(type_of(4), std::pair(std::string("type 4"), uint64_t{0}));  // a retired id
  EXPECT_EQ(type_of(0xFFFFFFFF), std::pair(std::string("type 4294967295"), uint64_t{0}));
  {
    const Bytes b = file_with_type(6);
    EXPECT_EQ(model::GgufFile::from_memory(b.get().data(), b.size(), "t.gguf").tensor("w").dtype,
              DType::q5_0);
  }
  EXPECT_GGUF_ERROR(file_with_type(16, 100), "innermost dimension 100 at offset 37 is not a multiple of iq2_xxs's block of 256");
}

TEST(GgufRobustness, BadDims) {
  auto file = [](std::vector<uint64_t> ne, uint32_t type = 0) {
    return Bytes().header(1, 0).tensor("w", std::move(ne), type, 0).pad(32).zeros(256);
  };
  EXPECT_GGUF_ERROR(file({4, 0}), "dimension 1 is 0 at offset");
  EXPECT_GGUF_ERROR(file({}), "n_dims 0 at offset 33 is outside 1..4");
  EXPECT_GGUF_ERROR(file({1, 1, 1, 1, 1}), "n_dims 5");
  EXPECT_GGUF_ERROR(file({kHuge}), "dimension 0 is 18446744073709551615");
  EXPECT_GGUF_ERROR(file({1ull << 32, 1ull << 32}), "multiply to more than 2^63 elements");
  EXPECT_GGUF_ERROR(file({1ull << 61, 2}), "needs more than 2^64 bytes");  // f32: 2^62 x 4
  EXPECT_GGUF_ERROR(file({1ull << 20, 1ull << 20}), "runs past the end of the file");
  EXPECT_GGUF_ERROR(file({48}, 2),
                    "innermost dimension 48 at offset 37 is not a multiple of q4_0's block of 32");
  EXPECT_EQ(parse_error(file({2, 3, 4, 1})), "");
}

TEST(GgufRobustness, BadDataOffsets) {
  // Misaligned (relative offset 4 with alignment 32).
  EXPECT_GGUF_ERROR(Bytes().header(1, 0).tensor("w", {4}, 0, 4).pad(32).zeros(64),
                    "data offset 4 at offset 49 is not a multiple of the alignment 32");
  // Beyond the file, and so far beyond that offset + bytes would overflow.
  EXPECT_GGUF_ERROR(Bytes().header(1, 0).tensor("w", {4}, 0, 1ull << 40).pad(32).zeros(64),
                    "runs past the end of the file");
  EXPECT_GGUF_ERROR(Bytes().header(1, 0).tensor("w", {4}, 0, kHuge - 31).pad(32).zeros(64),
                    "runs past the end of the file");
  // Extent crosses the end of the file by one byte.
  EXPECT_GGUF_ERROR(Bytes().header(1, 0).tensor("w", {16}, 0, 0).pad(32).zeros(63),
                    "data of 64 bytes at data offset 0");
  // Overlapping tensors (both at 0; and one starting inside the other).
  EXPECT_GGUF_ERROR(
      Bytes().header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 0).pad(32).zeros(128),
      "overlaps tensor");
  EXPECT_GGUF_ERROR(
      Bytes().header(2, 0).tensor("a", {16}, 0, 32).tensor("b", {16}, 0, 0).pad(32).zeros(128),
      "tensor 'a' [");
  // Tensors in reverse order without overlap are fine.
  EXPECT_EQ(
      parse_error(
          Bytes().header(2, 0).tensor("a", {16}, 0, 64).tensor("b", {16}, 0, 0).pad(32).zeros(128)),
      "");
  // Data offsets are relative to the data section, so no tensor can overlap the header.
  const Bytes b = Bytes().header(1, 0).tensor("w", {4}, 0, 0).pad(32).zeros(16);
  const model::GgufFile f = model::GgufFile::from_memory(b.get().data(), b.size());
  EXPECT_GE(f.tensors()[0].offset, f.data_offset());
  EXPECT_EQ(f.data_offset(), 64u);
}

TEST(GgufRobustness, DuplicatesAndEmptyNames) {
  EXPECT_GGUF_ERROR(
      Bytes().header(0, 2).key("k", model::GgufType::u8).u8(1).key("k", model::GgufType::u8).u8(2),
      "metadata key 1 ('k'): duplicate key at offset");
  EXPECT_GGUF_ERROR(
      Bytes().header(2, 0).tensor("w", {4}, 0, 0).tensor("w", {4}, 0, 32).pad(32).zeros(64),
      "tensor 1 ('w'): duplicate tensor name");
  EXPECT_GGUF_ERROR(Bytes().header(1, 0).tensor("", {4}, 0, 0).pad(32).zeros(64), "empty name");
}

TEST(GgufRobustness, BadAlignment) {
  auto file = [](model::GgufType type, uint64_t value) {
    Bytes b;
    b.header(0, 1).key("general.alignment", type);
    if (type == model::GgufType::string) return b.str("32");
    if (type == model::GgufType::u64) return b.u64(value);
    return b.u32(static_cast<uint32_t>(value));
  };
  EXPECT_GGUF_ERROR(file(model::GgufType::u32, 0), "alignment 0 at offset");
  EXPECT_GGUF_ERROR(file(model::GgufType::u32, 48),
                    "alignment 48 at offset 53 must be a power of two");
  EXPECT_GGUF_ERROR(file(model::GgufType::u64, 1ull << 40), "must be a power of two below 2^32");
  EXPECT_GGUF_ERROR(file(model::GgufType::string, 0),
                    "is string \"32\" at offset 53, expected an unsigned");
  EXPECT_GGUF_ERROR(file(model::GgufType::i32, 0xFFFFFFE0), "expected an unsigned integer");  // -32
  EXPECT_EQ(parse_error(file(model::GgufType::u32, 1)), "");
  EXPECT_EQ(parse_error(file(model::GgufType::u32, 1u << 31)), "");
  // With alignment 1 any offset is aligned.
  Bytes b;
  b.header(1, 1)
      .key("general.alignment", model::GgufType::u32)
      .u32(1)
      .tensor("w", {2}, 0, 3)
      .zeros(11);
  EXPECT_EQ(parse_error(b), "");
}

// Arrays of arrays `depth` levels deep, innermost an empty u8 array.
Bytes nested_arrays(int depth) {
  Bytes b;
  b.header(0, 1).key("bomb", model::GgufType::array);
  for (int level = 1; level < depth; ++level)
    b.u32(static_cast<uint32_t>(model::GgufType::array)).u64(1);
  return b.u32(static_cast<uint32_t>(model::GgufType::u8)).u64(0);
}

TEST(GgufRobustness, NestingBombs) {
  EXPECT_EQ(parse_error(nested_arrays(model::kGgufMaxArrayDepth)), "");
  EXPECT_GGUF_ERROR(nested_arrays(model::kGgufMaxArrayDepth + 1), "is nested deeper than 8 levels");
  EXPECT_GGUF_ERROR(nested_arrays(100000), "is nested deeper than 8 levels");
  // Wide: an array of a million empty arrays is parsed in time linear in the file.
  Bytes wide;
  wide.header(0, 1)
      .key("wide", model::GgufType::array)
      .u32(static_cast<uint32_t>(model::GgufType::array))
      .u64(1000000);
  for (int i = 0; i < 1000000; ++i) wide.u32(static_cast<uint32_t>(model::GgufType::u8)).u64(0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(parse_error(wide), "");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // Inner arrays claiming more than the file holds.
  Bytes lying;
  lying.header(0, 1)
      .key("a", model::GgufType::array)
      .u32(static_cast<uint32_t>(model::GgufType::array))
      .u64(2);
  lying.u32(static_cast<uint32_t>(model::GgufType::array)).u64(kHuge).zeros(64);
  EXPECT_GGUF_ERROR(lying, "array of 18446744073709551615 arrays");
}

// Random corruption of a valid file: every outcome is acceptance or an Error.
TEST(GgufRobustness, RandomCorruption) {
  const std::vector<uint8_t> original = small_valid_file();
  std::mt19937_64 rng(12345);
  size_t accepted = 0;
  for (int round = 0; round < 5000; ++round) {
    std::vector<uint8_t> bytes = original;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) {
      const size_t at = rng() % bytes.size();
      switch (rng() % 3) {
        case 0:
          bytes[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
          break;
        case 1:
          bytes[at] = 0xFF;
          break;
        default:
          bytes[at] = static_cast<uint8_t>(rng());
          break;
      }
    }
    const size_t size = rng() % 4 == 0 ? rng() % bytes.size() : bytes.size();
    if (parse_error(bytes, size).empty()) ++accepted;
  }
  // Flips in tensor data and padding leave the file valid; most others do not.
  EXPECT_GT(accepted, 100u);
  EXPECT_LT(accepted, 4900u);
}

}  // namespace
}  // namespace onepass
