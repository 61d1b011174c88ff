// MlxModel: an mlx-lm model directory — config.json plus model.safetensors, or shards
// model-0000k-of-0000n.safetensors listed by model.safetensors.index.json.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "onepass/core/dtype.h"
#include "onepass/model/mapped_file.h"
#include "onepass/model/safetensors.h"

namespace onepass::model {

/// config.json as parsed. Complete only inside the library (src/model/mlx_config_json.h),
/// so no JSON library reaches the public headers; config_text() gives its text.
struct MlxConfigJson;

/// An MLX affine-quantised weight: `<name>.weight` (u32, values packed low bits first),
/// `<name>.scales` and `<name>.biases` (f16 or bf16, one per group of `format.group_size`).
struct MlxQuantizedWeight {
  const TensorInfo* weight = nullptr;
  const TensorInfo* scales = nullptr;
  const TensorInfo* biases = nullptr;
  AffineFormat format;
  Shape shape;  // logical (unpacked) shape: the weight's outer dims, then the input features
};

/// An open mlx-lm model directory. Opening reads config.json, opens every safetensors
/// file (validating each), checks the shard index against the shards, and checks every
/// quantised weight's companions, shapes and dtypes against config.json's
/// `quantization` ({group_size, bits}, with optional per-layer overrides).
class MlxModel {
 public:
  static MlxModel open(const std::filesystem::path& dir);

  MlxModel(MlxModel&&) noexcept = default;
  MlxModel& operator=(MlxModel&&) noexcept = default;

  const std::filesystem::path& dir() const { return dir_; }
  /// config.json as parsed (opaque outside the library).
  const MlxConfigJson& config() const { return *config_; }
  /// config.json written out again; `indent` < 0 gives one line, `ascii` writes every
  /// non-ASCII or control character as a \u escape.
  std::string config_text(int indent = -1, bool ascii = false) const;
  /// The model-wide quantisation of config.json; nullopt for an unquantised model. Its
  /// scale_type is that of the first quantised weight's scales (f16 when there is none).
  std::optional<AffineFormat> quantization() const { return quantization_; }

  /// Every tensor of every shard, sorted by name.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;
  /// The tensor called `name` ("model.layers.0.mlp.up_proj.weight"); throws when absent.
  const TensorInfo& tensor(std::string_view name) const;

  /// Whether the weight `name` ("<module>.weight" or just "<module>") is affine-quantised.
  bool is_quantized(std::string_view name) const;
  /// The format of a quantised weight; nullopt when it is not quantised.
  std::optional<AffineFormat> quantization_of(std::string_view name) const;
  /// The quantised weight `name` with its scales and biases; throws when not quantised.
  const MlxQuantizedWeight& quantized(std::string_view name) const;

 private:
  MlxModel() = default;
  void load_config();
  void open_shards();
  void check_quantized();
  const MlxQuantizedWeight* find_quantized(std::string_view name) const;

  std::filesystem::path dir_;
  std::shared_ptr<const MlxConfigJson> config_;  // never null once opened
  std::optional<AffineFormat> quantization_;
  std::vector<SafetensorsFile> files_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, MlxQuantizedWeight, std::less<>> quantized_;  // by module name
};

}  // namespace onepass::model
