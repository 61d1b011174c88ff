// Internal to the GGUF reader (gguf_reader.cpp, gguf_metadata.cpp).
#pragma once

#include <string_view>

#include "onepass/model/gguf.h"

namespace onepass::model {

/// Where GGUF errors say they come from.
inline constexpr std::string_view kGgufWhere = "gguf";

/// True for the integer value types u8 ... i64.
bool gguf_is_integer_type(GgufType type);

}  // namespace onepass::model
