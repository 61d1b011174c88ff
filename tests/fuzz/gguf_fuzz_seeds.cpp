// Writes the GGUF fuzz seed corpus with GgufWriter: small valid files covering every
// metadata type, every tensor type, nested arrays and several alignments.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "onepass/core/error.h"
#include "onepass/model/gguf.h"

namespace {

using onepass::DType;
using onepass::Shape;
using onepass::model::GgufMetaValue;
using onepass::model::GgufType;
using onepass::model::GgufWriter;

void add_metadata(GgufWriter& w) {
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 2);
  w.set("u8", GgufMetaValue::u8(1));
  w.set("i8", GgufMetaValue::i8(-1));
  w.set("u16", GgufMetaValue::u16(2));
  w.set("i16", GgufMetaValue::i16(-2));
  w.set("i32", GgufMetaValue::i32(-3));
  w.set("u64", GgufMetaValue::u64(4));
  w.set("i64", GgufMetaValue::i64(-4));
  w.set_f32("f32", 0.5f);
  w.set("f64", GgufMetaValue::f64(0.25));
  w.set_bool("bool", true);
  w.set_strings("tokenizer.ggml.tokens", {"<s>", "a", "bc"});
  w.set_f32s("tokenizer.ggml.scores", std::vector<float>{0.0f, -1.0f, -2.0f});
  w.set_i32s("tokenizer.ggml.token_type", std::vector<int32_t>{3, 1, 1});
  w.set("nested",
        GgufMetaValue::array(GgufType::array,
                             {GgufMetaValue::strings({"x"}),
                              GgufMetaValue::array(GgufType::u16, {GgufMetaValue::u16(7)})}));
}

void write_seed(const std::filesystem::path& path, uint32_t alignment, bool metadata,
                const std::vector<std::pair<DType, Shape>>& tensors) {
  GgufWriter w(path, alignment);
  if (metadata) add_metadata(w);
  int index = 0;
  for (const auto& [dtype, shape] : tensors) {
    w.add_tensor(onepass::cat("t", index++, ".", onepass::dtype_name(dtype)), dtype, shape);
  }
  for (const onepass::model::TensorInfo& t : w.tensors()) {
    std::vector<uint8_t> data(t.bytes);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 31 + 7);
    w.write_tensor(t.name, data.data(), data.size());
  }
  w.finish();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SEED_DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  try {
    std::filesystem::create_directories(dir);
    write_seed(dir / "metadata_only.gguf", 32, true, {});
    write_seed(dir / "empty.gguf", 32, false, {});
    write_seed(dir / "scalars.gguf", 32, true,
               {{DType::f32, Shape{2, 3}},
                {DType::f16, Shape{4}},
                {DType::bf16, Shape{2, 2, 2}},
                {DType::i32, Shape{1, 1, 1, 2}}});
    write_seed(dir / "blocks.gguf", 32, false,
               {{DType::q4_0, Shape{32}},
                {DType::q4_1, Shape{32}},
                {DType::q8_0, Shape{32}},
                {DType::q4_k, Shape{256}},
                {DType::q5_k, Shape{256}},
                {DType::q6_k, Shape{256}}});
    write_seed(dir / "align1.gguf", 1, true, {{DType::f32, Shape{3}}, {DType::f16, Shape{3}}});
    write_seed(dir / "align64.gguf", 64, false,
               {{DType::f32, Shape{5}}, {DType::q8_0, Shape{2, 32}}});
  } catch (const onepass::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
