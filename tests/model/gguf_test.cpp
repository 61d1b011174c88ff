// GGUF writer -> reader round trips, typed getters, writer misuse, a cross-check against
// gguf-py's reader, and known facts of the default model when it is installed.
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "onepass/core/error.h"
#include "onepass/model/gguf.h"
#include "support/testing.h"

namespace onepass {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class GgufTest : public testing::TempDirTest {
 protected:
  GgufTest() : TempDirTest("onepass_gguf_") {}
};

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

std::vector<uint8_t> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// Every metadata type, with edge values.
void write_every_metadata_type(model::GgufWriter& w) {
  w.set("t.u8", model::GgufMetaValue::u8(255));
  w.set("t.i8", model::GgufMetaValue::i8(-128));
  w.set("t.u16", model::GgufMetaValue::u16(65535));
  w.set("t.i16", model::GgufMetaValue::i16(-32768));
  w.set("t.u32", model::GgufMetaValue::u32(4294967295u));
  w.set("t.i32", model::GgufMetaValue::i32(std::numeric_limits<int32_t>::min()));
  w.set("t.u64", model::GgufMetaValue::u64(std::numeric_limits<uint64_t>::max()));
  w.set("t.i64", model::GgufMetaValue::i64(std::numeric_limits<int64_t>::min()));
  w.set("t.f32", model::GgufMetaValue::f32(-1.5e-7f));
  w.set("t.f64", model::GgufMetaValue::f64(3.141592653589793));
  w.set("t.true", model::GgufMetaValue::boolean(true));
  w.set("t.false", model::GgufMetaValue::boolean(false));
  w.set("t.string", model::GgufMetaValue::string("héllo \"gguf\"\n"));
  w.set("t.empty_string", model::GgufMetaValue::string(""));
  w.set("a.u8", model::GgufMetaValue::array(model::GgufType::u8, {model::GgufMetaValue::u8(0),
                                                                  model::GgufMetaValue::u8(7)}));
  w.set("a.i8", model::GgufMetaValue::array(model::GgufType::i8, {model::GgufMetaValue::i8(-1)}));
  w.set("a.u16", model::GgufMetaValue::array(model::GgufType::u16, {model::GgufMetaValue::u16(1),
                                                                    model::GgufMetaValue::u16(2)}));
  w.set("a.i16",
        model::GgufMetaValue::array(model::GgufType::i16, {model::GgufMetaValue::i16(-300)}));
  const std::vector<uint32_t> u32s = {1, 2, 4000000000u};
  w.set("a.u32", model::GgufMetaValue::u32s(u32s));
  const std::vector<int32_t> i32s = {-5, 0, 5, std::numeric_limits<int32_t>::max()};
  w.set_i32s("a.i32", i32s);
  w.set("a.u64",
        model::GgufMetaValue::array(model::GgufType::u64, {model::GgufMetaValue::u64(1ull << 40)}));
  w.set("a.i64", model::GgufMetaValue::array(model::GgufType::i64,
                                             {model::GgufMetaValue::i64(-(1ll << 40))}));
  const std::vector<float> f32s = {0.5f, -2.25f, 1e30f};
  w.set_f32s("a.f32", f32s);
  w.set("a.f64",
        model::GgufMetaValue::array(model::GgufType::f64, {model::GgufMetaValue::f64(0.1),
                                                           model::GgufMetaValue::f64(-0.0)}));
  w.set("a.bool", model::GgufMetaValue::array(
                      model::GgufType::boolean,
                      {model::GgufMetaValue::boolean(true), model::GgufMetaValue::boolean(false)}));
  w.set_strings("a.string", {"<unk>", "", "▁the", "a b"});
  w.set("a.empty", model::GgufMetaValue::array(model::GgufType::f32, {}));
  w.set("a.nested",
        model::GgufMetaValue::array(
            model::GgufType::array,
            {model::GgufMetaValue::i32s(std::vector<int32_t>{1, 2}),
             model::GgufMetaValue::strings({"x", "yz"}),
             model::GgufMetaValue::array(model::GgufType::array,
                                         {model::GgufMetaValue::array(model::GgufType::u8, {})})}));
}

TEST_F(GgufTest, RoundTripEveryMetadataType) {
  {
    model::GgufWriter w(path("meta.gguf"));
    w.set_string("general.architecture", "llama");
    write_every_metadata_type(w);
    w.finish();
  }
  const model::GgufFile f = model::GgufFile::open(path("meta.gguf"));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_EQ(f.architecture(), "llama");
  EXPECT_EQ(f.arch_key("block_count"), "llama.block_count");

  EXPECT_EQ(f.get("t.u8").type(), model::GgufType::u8);
  EXPECT_EQ(f.get_u32("t.u8"), 255u);
  EXPECT_EQ(f.get("t.i8").to_i64(), -128);
  EXPECT_EQ(f.get_u32("t.u16"), 65535u);
  EXPECT_EQ(f.get_i32("t.i16"), -32768);
  EXPECT_EQ(f.get_u32("t.u32"), 4294967295u);
  EXPECT_EQ(f.get_i32("t.i32"), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(f.get_u64("t.u64"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(f.get("t.u64").to_i64(), std::nullopt);  // does not fit
  EXPECT_EQ(f.get("t.i64").to_i64(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(f.get("t.i64").to_u64(), std::nullopt);
  EXPECT_EQ(f.get_f32("t.f32"), -1.5e-7f);
  EXPECT_EQ(f.get("t.f64").to_f64(), 3.141592653589793);
  EXPECT_TRUE(f.get_bool("t.true"));
  EXPECT_FALSE(f.get_bool("t.false"));
  EXPECT_EQ(f.get_string("t.string"), "héllo \"gguf\"\n");
  EXPECT_EQ(f.get_string("t.empty_string"), "");

  EXPECT_EQ(f.get_i32s("a.u8"), (std::vector<int32_t>{0, 7}));
  EXPECT_EQ(f.get_i32s("a.i8"), (std::vector<int32_t>{-1}));
  EXPECT_EQ(f.get_i32s("a.u16"), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(f.get_i32s("a.i16"), (std::vector<int32_t>{-300}));
  EXPECT_EQ(f.get("a.u32").array_type(), model::GgufType::u32);
  EXPECT_EQ(f.get("a.u32").at(2).to_u64(), 4000000000u);
  EXPECT_THROW(f.get_i32s("a.u32"), Error);  // 4e9 does not fit in i32
  EXPECT_EQ(f.get_i32s("a.i32"),
            (std::vector<int32_t>{-5, 0, 5, std::numeric_limits<int32_t>::max()}));
  EXPECT_EQ(f.get("a.u64").at(0).to_u64(), 1ull << 40);
  EXPECT_EQ(f.get("a.i64").at(0).to_i64(), -(1ll << 40));
  EXPECT_EQ(f.get_f32s("a.f32"), (std::vector<float>{0.5f, -2.25f, 1e30f}));
  EXPECT_EQ(f.get_f32s("a.f64"), (std::vector<float>{0.1f, -0.0f}));
  EXPECT_EQ(f.get("a.bool").at(0).to_bool(), true);
  EXPECT_EQ(f.get("a.bool").at(1).to_bool(), false);
  EXPECT_EQ(f.get_strings("a.string"), (std::vector<std::string>{"<unk>", "", "▁the", "a b"}));
  EXPECT_EQ(f.get("a.string").at(2).to_string_view(), "▁the");
  EXPECT_EQ(f.get_f32s("a.empty"), std::vector<float>{});
  EXPECT_EQ(f.get("a.empty").array_type(), model::GgufType::f32);

  const model::GgufValue& nested = f.get("a.nested");
  ASSERT_EQ(nested.array_type(), model::GgufType::array);
  ASSERT_EQ(nested.array_size(), 3u);
  EXPECT_EQ(nested.at(0).array_type(), model::GgufType::i32);
  EXPECT_EQ(nested.at(0).at(1).to_i64(), 2);
  EXPECT_EQ(nested.at(1).at(1).to_string_view(), "yz");
  EXPECT_EQ(nested.at(2).at(0).array_type(), model::GgufType::u8);
  EXPECT_EQ(nested.at(2).at(0).array_size(), 0u);
  EXPECT_EQ(nested.describe(),
            "[3 x array: [2 x i32: 1, 2], [2 x string: \"x\", \"yz\"], "
            "[1 x array: [0 x u8]]]");
  EXPECT_EQ(f.get("a.string").describe(2), "[4 x string: \"<unk>\", \"\", ...]");
  EXPECT_EQ(f.get("t.string").describe(), "\"héllo \\\"gguf\\\"\\n\"");

  // Keys come back in file order.
  ASSERT_EQ(f.metadata().size(), 29u);
  EXPECT_EQ(f.metadata()[0].key, "general.architecture");
  EXPECT_EQ(f.metadata()[1].key, "t.u8");
  EXPECT_EQ(f.metadata().back().key, "a.nested");
}

TEST_F(GgufTest, TypedGettersExplainMisuse) {
  {
    model::GgufWriter w(path("g.gguf"));
    w.set("neg", model::GgufMetaValue::i64(-3));
    w.set("big", model::GgufMetaValue::u64(1ull << 33));
    w.set("small", model::GgufMetaValue::i64(12));
    w.set_string("name", "x");
    w.set_f32s("floats", std::vector<float>{1.0f});
    w.finish();
  }
  const model::GgufFile f = model::GgufFile::open(path("g.gguf"));
  EXPECT_EQ(f.get_u32("small"), 12u);  // an i64 that fits is fine
  EXPECT_EQ(f.get_i32("small"), 12);
  EXPECT_EQ(f.find_u32("absent"), std::nullopt);
  EXPECT_EQ(f.find_strings("absent"), std::nullopt);
  EXPECT_FALSE(f.has("absent"));
  EXPECT_EQ(f.find("absent"), nullptr);
  auto message = [&](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { f.get_u32("neg"); }).find("'neg' is i64 -3"), std::string::npos);
  EXPECT_NE(message([&] { f.get_u32("big"); }).find("expected an integer in [0, 4294967295]"),
            std::string::npos);
  EXPECT_NE(message([&] { f.get_u32("absent"); }).find("metadata key 'absent' is missing"),
            std::string::npos);
  EXPECT_NE(message([&] { f.get_f32("name"); }).find("'name' is string \"x\""), std::string::npos);
  EXPECT_NE(message([&] { f.find_u32("name"); }).find("expected"), std::string::npos);
  EXPECT_NE(message([&] { f.get_strings("floats"); }).find("expected an array of strings"),
            std::string::npos);
  EXPECT_NE(message([&] { f.architecture(); }).find("general.architecture"), std::string::npos);
  EXPECT_NE(message([&] { f.tensor("nope"); }).find("no tensor named 'nope'"), std::string::npos);
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
  EXPECT_EQ(message([&] { f.get_u32("neg"); }).rfind("[gguf] ", 0), 0u);
}

struct TensorSpec {
  std::string name;
  DType dtype;
  Shape shape;
};

std::vector<TensorSpec> tensor_specs() {
  return {
      {"f32.2d", DType::f32, Shape{3, 5}},  {"f16.3d", DType::f16, Shape{2, 3, 4}},
      {"bf16.1d", DType::bf16, Shape{7}},   {"i32.4d", DType::i32, Shape{2, 2, 2, 3}},
      {"q4_0", DType::q4_0, Shape{4, 64}},  {"q4_1", DType::q4_1, Shape{2, 32}},
      {"q8_0", DType::q8_0, Shape{3, 96}},  {"q4_k", DType::q4_k, Shape{2, 256}},
      {"q5_k", DType::q5_k, Shape{1, 512}}, {"q6_k", DType::q6_k, Shape{2, 1, 2, 256}},
  };
}

class GgufTensorTest : public GgufTest, public ::testing::WithParamInterface<uint32_t> {};

TEST_P(GgufTensorTest, RoundTripTensors) {
  const uint32_t alignment = GetParam();
  const std::vector<TensorSpec> specs = tensor_specs();
  std::vector<std::vector<uint8_t>> payloads;
  {
    model::GgufWriter w(path("t.gguf"), alignment);
    w.set_string("general.architecture", "test");
    for (const TensorSpec& s : specs) {
      const uint64_t bytes = w.add_tensor(s.name, s.dtype, s.shape);
      EXPECT_EQ(bytes, dtype_bytes(s.dtype, s.shape.numel()));
      payloads.push_back(random_bytes(bytes, static_cast<uint32_t>(payloads.size() + 1)));
    }
    for (size_t i = 0; i < specs.size(); ++i) {
      w.write_tensor(specs[i].name, payloads[i].data(), payloads[i].size());
    }
    w.finish();
  }
  EXPECT_FALSE(fs::exists(path("t.gguf.partial")));
  const model::GgufFile f = model::GgufFile::open(path("t.gguf"));
  EXPECT_EQ(f.alignment(), alignment);
  EXPECT_EQ(f.data_offset() % alignment, 0u);
  if (alignment != 32) {
    EXPECT_EQ(f.get_u32("general.alignment"), alignment);
  }
  ASSERT_EQ(f.tensors().size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE(specs[i].name);
    const model::TensorInfo& t = f.tensors()[i];
    EXPECT_EQ(&f.tensor(specs[i].name), &t);
    EXPECT_EQ(t.name, specs[i].name);
    EXPECT_EQ(t.dtype, specs[i].dtype);
    EXPECT_EQ(t.shape, specs[i].shape) << t.shape.str();
    EXPECT_EQ(t.bytes, payloads[i].size());
    EXPECT_EQ(t.offset % alignment, 0u);
    EXPECT_GE(t.offset, f.data_offset());
    EXPECT_EQ(
        static_cast<const uint8_t*>(t.data) - static_cast<const uint8_t*>(f.tensors()[0].data),
        static_cast<ptrdiff_t>(t.offset - f.tensors()[0].offset));
    EXPECT_EQ(std::memcmp(t.data, payloads[i].data(), t.bytes), 0);
  }
  // The file ends with the last tensor padded to the alignment.
  const model::TensorInfo& last = f.tensors().back();
  EXPECT_EQ(f.size(), (last.offset + last.bytes + alignment - 1) / alignment * alignment);

  // from_memory sees the same file.
  const std::vector<uint8_t> bytes = read_file(path("t.gguf"));
  const model::GgufFile m = model::GgufFile::from_memory(bytes.data(), bytes.size(), "copy");
  ASSERT_EQ(m.tensors().size(), specs.size());
  EXPECT_EQ(m.tensors()[3].offset, f.tensors()[3].offset);
  EXPECT_EQ(std::memcmp(m.tensors()[3].data, payloads[3].data(), payloads[3].size()), 0);
  EXPECT_EQ(m.source(), "copy");
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufTensorTest, ::testing::Values(32u, 1u, 64u, 4096u));

TEST_F(GgufTest, StreamsDataInChunksAcrossTensors) {
  const std::vector<TensorSpec> specs = tensor_specs();
  std::vector<uint8_t> all;
  std::vector<std::pair<size_t, size_t>> ranges;  // where each tensor's bytes sit in `all`
  {
    model::GgufWriter w(path("s.gguf"));
    for (const TensorSpec& s : specs) {
      const uint64_t bytes = w.add_tensor(s.name, s.dtype, s.shape);
      ranges.emplace_back(all.size(), bytes);
      const std::vector<uint8_t> payload = random_bytes(bytes, static_cast<uint32_t>(bytes));
      all.insert(all.end(), payload.begin(), payload.end());
    }
    // Odd chunk sizes, so chunks start and end inside tensors and span several.
    size_t at = 0;
    for (size_t chunk = 1; at < all.size(); chunk = chunk * 3 + 1) {
      const size_t n = std::min(chunk, all.size() - at);
      w.write_tensor_data(all.data() + at, n);
      at += n;
    }
    w.finish();
  }
  const model::GgufFile f = model::GgufFile::open(path("s.gguf"));
  ASSERT_EQ(f.tensors().size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(std::memcmp(f.tensors()[i].data, all.data() + ranges[i].first, ranges[i].second), 0)
        << specs[i].name;
  }
}

TEST_F(GgufTest, WriterRejectsMisuse) {
  auto expect_error = [](auto&& fn, const std::string& fragment) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected one containing '" << fragment << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  {
    model::GgufWriter w(path("m.gguf"));
    w.set_u32("k", 1);
    expect_error([&] { w.set_u32("k", 2); }, "set twice");
    expect_error([&] { w.set_u32("general.alignment", 64); }, "constructor");
    expect_error([&] { w.add_tensor("u8", DType::u8, Shape{4}); }, "GGUF has no type for u8");
    expect_error([&] { w.add_tensor("q", DType::q4_0, Shape{2, 48}); }, "multiple of 32");
    expect_error([&] { w.add_tensor("z", DType::f32, Shape{0, 4}); }, "must be positive");
    expect_error([&] { w.add_tensor(std::string(64, 'n'), DType::f32, Shape{4}); }, "1..63");
    expect_error([&] { w.add_tensor("", DType::f32, Shape{4}); }, "1..63");
    w.add_tensor("a", DType::f32, Shape{2});
    w.add_tensor("b", DType::f16, Shape{4});
    expect_error([&] { w.add_tensor("a", DType::f32, Shape{2}); }, "declared twice");
    const float a[2] = {1, 2};
    expect_error([&] { w.write_tensor("b", a, 8); }, "where 'a' is next");
    expect_error([&] { w.write_tensor("a", a, 4); }, "takes 8 bytes, got 4");
    w.write_tensor("a", a, 8);
    expect_error([&] { w.set_u32("late", 1); }, "after tensor data");
    expect_error([&] { w.add_tensor("c", DType::f32, Shape{2}); }, "after tensor data");
    w.write_tensor_data(a, 3);
    expect_error([&] { w.finish(); }, "tensor 'b' got 3 of 8 bytes");
    EXPECT_TRUE(fs::exists(path("m.gguf.partial")));
  }
  // Abandoned without finish(): nothing is left behind.
  EXPECT_FALSE(fs::exists(path("m.gguf.partial")));
  EXPECT_FALSE(fs::exists(path("m.gguf")));
  {
    model::GgufWriter w(path("n.gguf"));
    w.add_tensor("a", DType::f32, Shape{1});
    const float a[2] = {1, 2};
    expect_error([&] { w.write_tensor_data(a, 8); }, "beyond the 1 declared tensors");
  }
  expect_error([&] { model::GgufWriter w(path("x.gguf"), 48); }, "not a power of two");
  expect_error([&] { model::GgufWriter w(path("no/such/dir/x.gguf")); }, "cannot create");
  expect_error(
      [] { model::GgufMetaValue::array(model::GgufType::u8, {model::GgufMetaValue::i8(1)}); },
      "item 0 is i8");
}

TEST_F(GgufTest, OpenReportsMissingAndUnreadableFiles) {
  try {
    model::GgufFile::open(path("missing.gguf"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.gguf"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
  EXPECT_THROW(model::GgufFile::open(dir_), Error);  // a directory
  write_file(path("empty.gguf"), {});
  try {
    model::GgufFile::open(path("empty.gguf"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a GGUF file"), std::string::npos) << e.what();
  }
  model::MappedFile empty(path("empty.gguf"));
  EXPECT_EQ(empty.size(), 0u);
  model::MappedFile moved = std::move(empty);
  EXPECT_EQ(moved.size(), 0u);
}

TEST_F(GgufTest, ReadsVersion2) {
  {
    model::GgufWriter w(path("v.gguf"));
    w.set_u32("x", 5);
    w.add_tensor("t", DType::f32, Shape{2});
    const float t[2] = {1, 2};
    w.write_tensor("t", t, sizeof(t));
    w.finish();
  }
  std::vector<uint8_t> bytes = read_file(path("v.gguf"));
  bytes[4] = 2;  // the v2 and v3 layouts are identical for little-endian files
  const model::GgufFile f = model::GgufFile::from_memory(bytes.data(), bytes.size());
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.get_u32("x"), 5u);
  EXPECT_EQ(static_cast<const float*>(f.tensor("t").data)[1], 2.0f);
}

// --- cross-check with gguf-py -----------------------------------------------------------

uint64_t fnv1a(const void* data, size_t bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 0x100000001b3ull;
  return hash;
}

// The canonical text tests/tools/gguf_check.py prints, made from our own reader.
std::string canonical_value(const model::GgufValue& v) {
  const auto id = static_cast<uint32_t>(v.type());
  char text[64];
  switch (v.type()) {
    case model::GgufType::boolean:
      return cat(id, ":", *v.to_bool() ? "true" : "false");
    case model::GgufType::f32:
      std::snprintf(text, sizeof(text), "%.9g", *v.to_f64());
      return cat(id, ":", text);
    case model::GgufType::f64:
      std::snprintf(text, sizeof(text), "%.17g", *v.to_f64());
      return cat(id, ":", text);
    case model::GgufType::string: {
      std::string out = cat(id, ":");
      const std::string_view text_value = *v.to_string_view();
      for (const char c : text_value) {
        std::snprintf(text, sizeof(text), "%02x", static_cast<unsigned char>(c));
        out += text;
      }
      return out;
    }
    case model::GgufType::array: {
      std::string out = cat(id, "[", static_cast<uint32_t>(v.array_type()), "](");
      bool first = true;
      v.for_each([&](const model::GgufValue& item) {
        out += first ? "" : ",";
        first = false;
        out += canonical_value(item);
        return true;
      });
      return out + ")";
    }
    case model::GgufType::u64:
      return cat(id, ":", *v.to_u64());
    default:
      return cat(id, ":", *v.to_i64());
  }
}

std::string canonical_dump(const model::GgufFile& f, bool checksums = true) {
  std::string out = cat("version ", f.version(), "\nalignment ", f.alignment(), "\ndata_offset ",
                        f.data_offset(), "\n");
  for (const model::GgufEntry& e : f.metadata())
    out += cat("kv ", e.key, " ", canonical_value(e.value), "\n");
  for (const model::TensorInfo& t : f.tensors()) {
    std::string dims;
    for (int d = 0; d < t.shape.ndim(); ++d) dims += cat(d ? "," : "", t.shape[d]);
    char hash[24];
    std::snprintf(hash, sizeof(hash), "%016llx",
                  static_cast<unsigned long long>(fnv1a(t.data, t.bytes)));
    if (!checksums) std::snprintf(hash, sizeof(hash), "-");
    out += cat("tensor ", t.name, " ", dtype_info(t.dtype).ggml_type, " ", dims, " ", t.offset, " ",
               t.bytes, " ", hash, "\n");
  }
  return out;
}

// tests/model/gguf_test.cpp -> the repository root when __FILE__ is absolute; else the
// working directory, the repository root where ctest runs the model tests.
fs::path repo_root() {
  const fs::path from_file = fs::path(__FILE__).parent_path().parent_path().parent_path();
  if (fs::exists(from_file / "tests/tools/gguf_check.py")) return from_file;
  return fs::current_path();
}
fs::path default_model() {
  return repo_root() / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

bool have_gguf_py() {
  int status = 0;
  testing::run_command("python3 -c 'import gguf, numpy' 2>&1", &status);
  return status == 0;
}

TEST_F(GgufTest, GgufPyReadsOurFiles) {
  if (!have_gguf_py()) GTEST_SKIP() << "python3 with the gguf package is not available";
  const fs::path script = repo_root() / "tests" / "tools" / "gguf_check.py";
  ASSERT_TRUE(fs::exists(script)) << script;
  int status = 0;

  for (const uint32_t alignment : {32u, 64u}) {
    SCOPED_TRACE(cat("alignment ", alignment));
    const fs::path file = path(cat("py", alignment, ".gguf"));
    {
      model::GgufWriter w(file, alignment);
      w.set_string("general.architecture", "llama");
      write_every_metadata_type(w);
      uint32_t seed = 100;
      for (const TensorSpec& s : tensor_specs()) {
        const uint64_t bytes = w.add_tensor(s.name, s.dtype, s.shape);
        (void)bytes;
      }
      for (const model::TensorInfo& t : w.tensors()) {
        const std::vector<uint8_t> payload = random_bytes(t.bytes, seed++);
        w.write_tensor(t.name, payload.data(), payload.size());
      }
      w.finish();
    }
    const model::GgufFile f = model::GgufFile::open(file);
    const std::string expected = canonical_dump(f);
    const std::string actual = testing::run_command(
        cat("python3 '", script.string(), "' '", file.string(), "' 2>&1"), &status);
    ASSERT_EQ(status, 0) << actual;
    EXPECT_EQ(actual, expected);
  }
}

// --- the default model --------------------------------------------------------------------

// A file written by llama.cpp's tools: gguf-py and our reader must agree on all of it.
TEST(GgufModelTest, GgufPyAgreesOnDefaultModel) {
  const fs::path model = default_model();
  if (!fs::exists(model)) GTEST_SKIP() << model << " is not installed (scripts/fetch-model)";
  if (!have_gguf_py()) GTEST_SKIP() << "python3 with the gguf package is not available";
  const fs::path script = repo_root() / "tests" / "tools" / "gguf_check.py";
  int status = 0;
  const std::string actual = testing::run_command(
      cat("python3 '", script.string(), "' --no-checksum '", model.string(), "' 2>&1"), &status);
  ASSERT_EQ(status, 0) << actual;
  EXPECT_EQ(actual, canonical_dump(model::GgufFile::open(model), false));
}

TEST(GgufModelTest, DefaultModelFacts) {
  const fs::path model = default_model();
  if (!fs::exists(model)) GTEST_SKIP() << model << " is not installed (scripts/fetch-model)";
  const model::GgufFile f = model::GgufFile::open(model);
  EXPECT_EQ(f.architecture(), "llama");
  EXPECT_EQ(f.get_u32(f.arch_key("block_count")), 30u);
  EXPECT_EQ(f.get_u32(f.arch_key("embedding_length")), 576u);
  EXPECT_EQ(f.get_u32(f.arch_key("attention.head_count")), 9u);
  EXPECT_EQ(f.get_u32(f.arch_key("attention.head_count_kv")), 3u);
  EXPECT_EQ(f.get_strings("tokenizer.ggml.tokens").size(), 49152u);
  EXPECT_EQ(f.get_i32s("tokenizer.ggml.token_type").size(), 49152u);
  if (f.has("tokenizer.ggml.scores")) {
    EXPECT_EQ(f.get_f32s("tokenizer.ggml.scores").size(), 49152u);
  }
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  // Per layer: attn_norm, attn_q/k/v/output, ffn_norm, ffn_gate/up/down; plus token_embd and
  // output_norm, and output only when the embeddings are not tied.
  const size_t expected = 2 + 9 * 30 + (f.find_tensor("output.weight") ? 1 : 0);
  EXPECT_EQ(f.tensors().size(), expected);
  const model::TensorInfo& embd = f.tensor("token_embd.weight");
  EXPECT_EQ(embd.shape, (Shape{49152, 576}));
  const model::TensorInfo& q = f.tensor("blk.0.attn_q.weight");
  EXPECT_EQ(q.shape, (Shape{576, 576}));
  EXPECT_EQ(q.dtype, DType::q4_1);
  EXPECT_EQ(f.tensor("blk.29.ffn_down.weight").shape, (Shape{576, 1536}));
  // Every tensor's data lies inside the file (the reader checked; spot-check the last byte).
  size_t sum = 0;
  for (const model::TensorInfo& t : f.tensors())
    sum += static_cast<const uint8_t*>(t.data)[t.bytes - 1];
  EXPECT_GT(sum, 0u);
}

}  // namespace
}  // namespace onepass
