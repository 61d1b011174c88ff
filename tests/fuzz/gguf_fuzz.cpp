// libFuzzer target for the GGUF reader: any input must parse or end in onepass::Error.
// Anything else — a crash, a sanitizer report, another exception type, a hang or a huge
// allocation (libFuzzer's -malloc_limit_mb) — is a bug.
#include <cstddef>
#include <cstdint>

#include "onepass/core/error.h"
#include "onepass/model/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const onepass::model::GgufFile file = onepass::model::GgufFile::from_memory(data, size, "fuzz");
    // Use what an accepted file offers, as `inspect` and the model loader would.
    for (const onepass::model::GgufEntry& entry : file.metadata()) {
      (void)entry.value.describe(16, 64);
      try {
        (void)file.find_u32(entry.key);
      } catch (const onepass::Error&) {
      }
      if (entry.value.is_array()) {
        try {
          (void)file.find_strings(entry.key);
        } catch (const onepass::Error&) {
        }
        try {
          (void)file.find_i32s(entry.key);
        } catch (const onepass::Error&) {
        }
        if (entry.value.array_size() > 0) (void)entry.value.at(entry.value.array_size() - 1);
      }
    }
    volatile uint8_t sink = 0;
    for (const onepass::model::TensorInfo& tensor : file.tensors()) {
      const auto* bytes = static_cast<const uint8_t*>(tensor.data);
      if (tensor.bytes == 0) continue;  // a type of unknown block size (unsupported_type)
      sink = sink + bytes[0] + bytes[tensor.bytes - 1];  // ASan checks both ends are in the input
      (void)file.tensor(tensor.name);
    }
  } catch (const onepass::Error&) {
    // The expected outcome for a bad file.
  }
  return 0;
}
