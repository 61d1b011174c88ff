// libFuzzer target for MLX model directories: the input is config.json, a NUL byte, then
// model.safetensors (no NUL: config.json alone, with an empty safetensors file). The
// directory is opened and used as `generate` would (see load_fuzz_common.h). Any outcome
// but success or onepass::Error is a bug.
#include <cstring>

#include "load_fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path dir = onepass::fuzz::scratch_dir() / "mlx";
  std::filesystem::create_directories(dir);
  const auto* split = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t config_bytes = split != nullptr ? static_cast<size_t>(split - data) : size;
  onepass::fuzz::write_file(dir / "config.json", data, config_bytes);
  const size_t rest = split != nullptr ? size - config_bytes - 1 : 0;
  onepass::fuzz::write_file(dir / "model.safetensors", split != nullptr ? split + 1 : data, rest);
  try {
    const std::unique_ptr<onepass::model::ModelSource> source = onepass::model::open_model(dir);
    onepass::fuzz::use_source(*source);
  } catch (const onepass::Error& e) {
    // The expected outcome for a bad directory.
    onepass::fuzz::note_error(e);
  }
  return 0;
}
