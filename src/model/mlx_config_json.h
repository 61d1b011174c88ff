// The parsed config.json of an MlxModel: the library's side of the opaque MlxConfigJson.
#pragma once

#include <nlohmann/json.hpp>

#include "onepass/model/mlx_model.h"

namespace onepass::model {

struct MlxConfigJson {
  nlohmann::json json;
};

}  // namespace onepass::model
