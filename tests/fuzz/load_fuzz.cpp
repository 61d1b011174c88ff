// libFuzzer target for the whole GGUF load path: the input is a .gguf file, opened as
// `generate` opens one (config_from_gguf and validate, the vocabulary and a tokenizer, the
// weights checked against the config and bound on a CPU backend, one forward pass). Any
// outcome but success or onepass::Error — a crash, a sanitizer report, another exception,
// a hang, a leak or a huge allocation — is a bug.
#include "load_fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path path = onepass::fuzz::scratch_dir() / "model.gguf";
  onepass::fuzz::write_file(path, data, size);
  try {
    const std::unique_ptr<onepass::model::ModelSource> source = onepass::model::open_model(path);
    onepass::fuzz::use_source(*source);
  } catch (const onepass::Error& e) {
    // The expected outcome for a bad file.
    onepass::fuzz::note_error(e);
  }
  return 0;
}
