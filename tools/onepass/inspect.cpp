// onepass inspect: metadata and tensors of a GGUF file or an MLX model directory.
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "common.h"
#include "onepass/core/error.h"
#include "onepass/model/gguf.h"
#include "onepass/model/loader.h"
#include "onepass/model/mlx_model.h"

namespace onepass::cli {
namespace {

struct InspectArgs {
  std::string model;
  bool tensors = true;
  size_t max_items = 8;
};

struct TypeTotal {
  size_t tensors = 0;
  uint64_t parameters = 0;
  uint64_t bytes = 0;
};

void print_totals(const std::map<std::string, TypeTotal>& totals, uint64_t parameters,
                  uint64_t tensor_bytes, size_t tensor_count, const char* size_label,
                  uint64_t file_bytes) {
  std::printf("\ntotals by type:\n");
  for (const auto& [type, t] : totals) {
    std::printf("  %-10s %5zu tensor%s %12s params %12s  %5.1f%%\n", type.c_str(), t.tensors,
                t.tensors == 1 ? " " : "s", format_count(t.parameters).c_str(),
                format_bytes(t.bytes).c_str(),
                tensor_bytes
                    ? 100.0 * static_cast<double>(t.bytes) / static_cast<double>(tensor_bytes)
                    : 0.0);
  }
  std::printf("tensors: %zu\n", tensor_count);
  std::printf("parameters: %s (%s)\n", format_grouped(parameters).c_str(),
              format_count(parameters).c_str());
  std::printf(
      "tensor data: %s bytes (%s), %.2f bits per parameter\n", format_grouped(tensor_bytes).c_str(),
      format_bytes(tensor_bytes).c_str(),
      parameters ? 8.0 * static_cast<double>(tensor_bytes) / static_cast<double>(parameters) : 0.0);
  std::printf("%s: %s bytes (%s)\n", size_label, format_grouped(file_bytes).c_str(),
              format_bytes(file_bytes).c_str());
}

void inspect_gguf(const std::filesystem::path& path, const InspectArgs& args) {
  const model::GgufFile file = model::GgufFile::open(path);
  std::printf("file: %s\nformat: GGUF v%u, alignment %llu, tensor data at offset %llu\n",
              printable(path.string(), false).c_str(), file.version(),
              static_cast<unsigned long long>(file.alignment()),
              static_cast<unsigned long long>(file.data_offset()));
  // The model as the loader sees it, when it is a supported architecture.
  try {
    std::printf("model: %s\n", printable(model::config_from_gguf(file).describe(), false).c_str());
  } catch (const Error& e) {
    std::printf("model: not loadable by onepass: %s\n", printable(e.what(), false).c_str());
  }

  std::printf("\nmetadata: %zu keys\n", file.metadata().size());
  for (const model::GgufEntry& entry : file.metadata()) {
    // Keys and values come from the file: escaped, so that they cannot drive the terminal.
    std::printf("  %s = %s\n", printable(entry.key, false).c_str(),
                printable(entry.value.describe(args.max_items), false).c_str());
  }

  std::map<std::string, TypeTotal> totals;
  uint64_t parameters = 0;
  uint64_t tensor_bytes = 0;
  if (args.tensors) std::printf("\ntensors (shape outermost first):\n");
  size_t index = 0;
  for (const model::TensorInfo& t : file.tensors()) {
    const auto numel = static_cast<uint64_t>(t.shape.numel());
    // A type onepass cannot compute with is listed by the file's name for it.
    const std::string type = t.unsupported_type.empty() ? std::string(dtype_name(t.dtype))
                                                        : t.unsupported_type + " (unsupported)";
    if (args.tensors) {
      std::printf("  %4zu %-32s %-6s %-18s %12s bytes\n", index, printable(t.name, false).c_str(),
                  type.c_str(), t.shape.str().c_str(), format_grouped(t.bytes).c_str());
    }
    TypeTotal& total = totals[type];
    ++total.tensors;
    total.parameters += numel;
    total.bytes += t.bytes;
    parameters += numel;
    tensor_bytes += t.bytes;
    ++index;
  }
  print_totals(totals, parameters, tensor_bytes, file.tensors().size(), "file size", file.size());
}

void inspect_mlx(const std::filesystem::path& dir, const InspectArgs& args) {
  const model::MlxModel model = model::MlxModel::open(dir);
  std::printf("directory: %s\nformat: MLX (safetensors)\n", printable(dir.string(), false).c_str());
  if (const auto q = model.quantization()) {
    std::printf("quantization: affine %u-bit, group %u, scales %s\n", q->bits, q->group_size,
                std::string(dtype_name(q->scale_type)).c_str());
  }
  // ascii: every control character in a key or string is a \u escape.
  std::printf("\nconfig.json:\n%s\n", printable(model.config_text(2, /*ascii=*/true)).c_str());

  // A quantised module's scales and biases are part of its storage, not parameters.
  auto companion_of_quantized = [&](const std::string& name) {
    for (const char* suffix : {".scales", ".biases"}) {
      const std::string s = suffix;
      if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
        return model.is_quantized(name.substr(0, name.size() - s.size()));
      }
    }
    return false;
  };
  std::map<std::string, TypeTotal> totals;
  uint64_t parameters = 0;
  uint64_t tensor_bytes = 0;
  if (args.tensors) std::printf("\ntensors (shape outermost first; packed shapes as stored):\n");
  size_t index = 0;
  for (const model::TensorInfo& t : model.tensors()) {
    std::string type(dtype_name(t.dtype));
    uint64_t numel = static_cast<uint64_t>(t.shape.numel());
    std::string note;
    if (companion_of_quantized(t.name)) {
      numel = 0;
    } else if (model.is_quantized(t.name)) {
      const model::MlxQuantizedWeight& q = model.quantized(t.name);
      numel = static_cast<uint64_t>(q.shape.numel());
      type = cat("affine", q.format.bits);
      note = cat("  (", q.shape.str(), " in ", q.format.bits, " bits, group ", q.format.group_size,
                 ")");
    }
    if (args.tensors) {
      std::printf("  %4zu %-48s %-7s %-18s %12s bytes%s\n", index, printable(t.name, false).c_str(),
                  type.c_str(), t.shape.str().c_str(), format_grouped(t.bytes).c_str(),
                  printable(note, false).c_str());
    }
    TypeTotal& total = totals[type];
    ++total.tensors;
    total.parameters += numel;
    total.bytes += t.bytes;
    parameters += numel;
    tensor_bytes += t.bytes;
    ++index;
  }
  uint64_t file_bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file()) file_bytes += entry.file_size();
  }
  print_totals(totals, parameters, tensor_bytes, model.tensors().size(), "directory size",
               file_bytes);
}

int run_inspect(const InspectArgs& args) {
  const std::filesystem::path path = resolve_model(args.model, "inspect");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    inspect_mlx(path, args);
  } else {
    check(std::filesystem::exists(path, ec), "inspect",
          "no such file or directory: ", path.string());
    inspect_gguf(path, args);
  }
  return 0;
}

}  // namespace

Command add_inspect_command(CLI::App& parent) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* app = parent.add_subcommand(
      "inspect", "Show the metadata and tensors of a GGUF file or MLX directory");
  app->add_option("model", args->model,
                  "GGUF file or MLX model directory (default: the default model)");
  app->add_flag("!--no-tensors", args->tensors, "Only metadata and totals, no line per tensor");
  app->add_option("--max-items", args->max_items, "Array elements shown per metadata value")
      ->capture_default_str();
  return {app, [args] { return run_inspect(*args); }};
}

}  // namespace onepass::cli
