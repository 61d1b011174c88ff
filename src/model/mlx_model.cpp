#include "onepass/model/mlx_model.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "model/mlx_config_json.h"
#include "onepass/core/error.h"
#include "onepass/model/mapped_file.h"

namespace onepass::model {
namespace {

constexpr std::string_view kWhere = "mlx";
constexpr std::string_view kIndexName = "model.safetensors.index.json";
constexpr std::string_view kSingleName = "model.safetensors";

nlohmann::json read_json(const std::filesystem::path& path) {
  require_regular_file(path, kWhere);
  std::ifstream in(path, std::ios::binary);
  check(in.good(), kWhere, "cannot read '", path.string(), "'");
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    fail(kWhere, path.string(), " is not valid JSON: ", e.what());
  }
}

std::string_view strip_suffix(std::string_view name, std::string_view suffix) {
  if (name.size() > suffix.size() && name.ends_with(suffix)) {
    name.remove_suffix(suffix.size());
  }
  return name;
}

// {bits, group_size} from a quantization object, or nullopt when it holds neither.
std::optional<AffineFormat> parse_format(const nlohmann::json& q, const std::string& what) {
  if (!q.is_object() || (!q.contains("bits") && !q.contains("group_size"))) return std::nullopt;
  const auto bits = q.find("bits");
  const auto group = q.find("group_size");
  check(bits != q.end() && bits->is_number_integer() && group != q.end() &&
            group->is_number_integer(),
        kWhere, what, " ", q.dump(), " needs integer bits and group_size");
  if (const auto mode = q.find("mode"); mode != q.end()) {
    check(mode->is_string() && mode->get<std::string>() == "affine", kWhere, what, " mode ",
          mode->dump(), " is not supported (only affine)");
  }
  AffineFormat format;
  format.bits = bits->get<uint32_t>();
  format.group_size = group->get<uint32_t>();
  return format;
}

}  // namespace

MlxModel MlxModel::open(const std::filesystem::path& dir) {
  MlxModel model;
  model.dir_ = dir;
  check(std::filesystem::is_directory(dir), kWhere, "'", dir.string(),
        "' is not a directory (an mlx-lm model is a directory with config.json and "
        "safetensors files)");
  model.load_config();
  model.open_shards();
  model.check_quantized();
  return model;
}

void MlxModel::load_config() {
  const std::filesystem::path path = dir_ / "config.json";
  check(std::filesystem::exists(path), kWhere, "'", dir_.string(),
        "' has no config.json (not an mlx-lm model directory?)");
  config_ = std::make_shared<MlxConfigJson>(MlxConfigJson{read_json(path)});
  const nlohmann::json& config = config_->json;
  check(config.is_object(), kWhere, path.string(), " is a ", config.type_name(),
        ", expected an object");
  for (const char* key : {"quantization", "quantization_config"}) {
    const auto it = config.find(key);
    if (it == config.end()) continue;
    quantization_ = parse_format(*it, cat(path.string(), ": ", key));
    if (quantization_) break;
  }
}

void MlxModel::open_shards() {
  const std::filesystem::path index_path = dir_ / kIndexName;
  std::vector<std::string> shard_names;
  nlohmann::json weight_map;
  if (std::filesystem::exists(index_path)) {
    const nlohmann::json index = read_json(index_path);
    const auto map_it = index.find("weight_map");
    check(index.is_object() && map_it != index.end() && map_it->is_object(), kWhere,
          index_path.string(), " has no weight_map object");
    weight_map = *map_it;
    std::set<std::string> names;
    for (const auto& [tensor, shard] : weight_map.items()) {
      check(shard.is_string(), kWhere, index_path.string(), ": weight_map['", tensor, "'] is ",
            shard.dump(), ", expected a file name");
      const std::string file = shard.get<std::string>();
      // The index must only name files in this directory.
      check(!file.empty() && file.find('/') == std::string::npos &&
                file.find('\\') == std::string::npos && file != "." && file != "..",
            kWhere, index_path.string(), ": shard '", file, "' for tensor '", tensor,
            "' is not a file name in the model directory");
      names.insert(file);
    }
    shard_names.assign(names.begin(), names.end());
  } else if (std::filesystem::exists(dir_ / kSingleName)) {
    shard_names.emplace_back(kSingleName);
  } else {
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      if (entry.path().extension() == ".safetensors") {
        shard_names.push_back(entry.path().filename().string());
      }
    }
    std::sort(shard_names.begin(), shard_names.end());
  }
  check(!shard_names.empty(), kWhere, "'", dir_.string(), "' has no ", kSingleName, ", no ",
        kIndexName, " and no other .safetensors file");

  files_.reserve(shard_names.size());
  for (const std::string& name : shard_names) {
    const std::filesystem::path path = dir_ / name;
    check(std::filesystem::exists(path), kWhere, index_path.string(), " names shard '", name,
          "', which does not exist");
    files_.push_back(SafetensorsFile::open(path));
  }

  std::map<std::string_view, const SafetensorsFile*> owner;
  for (const SafetensorsFile& file : files_) {
    for (const TensorInfo& t : file.tensors()) {
      const auto [it, inserted] = owner.emplace(t.name, &file);
      check(inserted, kWhere, "tensor '", t.name, "' is in both ", it->second->source(), " and ",
            file.source());
      tensors_.push_back(t);
    }
  }
  for (const auto& [tensor, shard] : weight_map.items()) {
    const auto it = owner.find(tensor);
    const std::string expected = (dir_ / shard.get<std::string>()).string();
    check(it != owner.end() && it->second->source() == expected, kWhere, index_path.string(),
          " puts tensor '", tensor, "' in ", shard.get<std::string>(), ", but ",
          it == owner.end() ? std::string("no shard has it")
                            : cat("it is in ", it->second->source()));
  }
  std::sort(tensors_.begin(), tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

void MlxModel::check_quantized() {
  const nlohmann::json* layer_config = nullptr;
  for (const char* key : {"quantization", "quantization_config"}) {
    if (const auto it = config_->json.find(key); it != config_->json.end() && it->is_object()) {
      layer_config = &*it;
      break;
    }
  }
  for (const TensorInfo& t : tensors_) {
    if (!t.name.ends_with(".scales")) continue;
    const std::string module(strip_suffix(t.name, ".scales"));
    const std::string what = cat(dir_.string(), ": quantised weight '", module, "'");
    const TensorInfo* weight = find(module + ".weight");
    const TensorInfo* biases = find(module + ".biases");
    check(weight != nullptr && biases != nullptr, kWhere, what, " has scales but no ",
          weight == nullptr ? ".weight" : ".biases");

    // A per-layer entry overrides the model-wide format (mlx-lm's mixed quantisation).
    std::optional<AffineFormat> format = quantization_;
    if (layer_config != nullptr) {
      if (const auto it = layer_config->find(module); it != layer_config->end()) {
        check(!it->is_boolean() || it->get<bool>(), kWhere, what,
              " has scales but config.json marks it unquantised");
        if (auto layer = parse_format(*it, cat("config.json quantization['", module, "']"))) {
          format = layer;
        }
      }
    }
    check(format.has_value(), kWhere, what,
          " has scales but config.json has no quantization "
          "{group_size, bits}");
    format->scale_type = t.dtype;
    try {
      format->validate(kWhere);
    } catch (const Error& e) {
      fail(kWhere, what, ": ", e.detail());  // the directory and the weight, not only the value
    }

    check(weight->dtype == DType::u32, kWhere, what, ": .weight is ", dtype_name(weight->dtype),
          ", expected u32 (packed)");
    check(biases->dtype == t.dtype && biases->shape == t.shape, kWhere, what, ": .biases ",
          dtype_name(biases->dtype), biases->shape.str(), " differ from .scales ",
          dtype_name(t.dtype), t.shape.str());
    const Shape& packed = weight->shape;
    const int ndim = packed.ndim();
    bool outer_match = ndim >= 1 && t.shape.ndim() == ndim;
    for (int d = 0; outer_match && d + 1 < ndim; ++d) outer_match = packed[d] == t.shape[d];
    const int64_t inputs = ndim >= 1 ? packed.cols() * (32 / format->bits) : 0;
    check(outer_match && inputs == t.shape.cols() * format->group_size, kWhere, what,
          ": .weight u32", packed.str(), " does not match .scales ", t.shape.str(), " for ",
          format->bits, "-bit groups of ", format->group_size, " (expected scales ",
          "[..., inputs / group_size] with inputs = packed columns x ", 32 / format->bits, ")");
    MlxQuantizedWeight q;
    q.weight = weight;
    q.scales = &t;
    q.biases = biases;
    q.format = *format;
    q.shape = packed;
    q.shape[ndim - 1] = inputs;
    quantized_.emplace(module, q);
  }
  if (quantization_ && !quantized_.empty()) {
    quantization_->scale_type = quantized_.begin()->second.format.scale_type;
  }
}

std::string MlxModel::config_text(int indent, bool ascii) const {
  return config_->json.dump(indent, ' ', ascii);
}

const TensorInfo* MlxModel::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& MlxModel::tensor(std::string_view name) const {
  const TensorInfo* info = find(name);
  if (info == nullptr) {
    fail(kWhere, dir_.string(), ": no tensor named '", name, "' (", tensors_.size(), " tensors in ",
         files_.size(), " files)");
  }
  return *info;
}

const MlxQuantizedWeight* MlxModel::find_quantized(std::string_view name) const {
  const auto it = quantized_.find(strip_suffix(name, ".weight"));
  return it == quantized_.end() ? nullptr : &it->second;
}

bool MlxModel::is_quantized(std::string_view name) const {
  return find_quantized(name) != nullptr;
}

std::optional<AffineFormat> MlxModel::quantization_of(std::string_view name) const {
  const MlxQuantizedWeight* q = find_quantized(name);
  if (q == nullptr) return std::nullopt;
  return q->format;
}

const MlxQuantizedWeight& MlxModel::quantized(std::string_view name) const {
  const MlxQuantizedWeight* q = find_quantized(name);
  if (q == nullptr) {
    fail(kWhere, dir_.string(), ": '", name, "' is not a quantised weight (no ",
         strip_suffix(name, ".weight"), ".scales)");
  }
  return *q;
}

}  // namespace onepass::model
