// Opening model files: a GGUF file or an mlx-lm directory, as a ModelSource.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>

#include "onepass/model/gguf.h"
#include "onepass/model/model_source.h"
#include "onepass/model/tokenizer.h"

namespace onepass::model {

/// A GGUF file (memory-mapped) or an MLX model directory; throws Error naming the path
/// and what is wrong or unsupported.
std::unique_ptr<ModelSource> open_model(const std::filesystem::path& path);
std::unique_ptr<ModelSource> open_gguf_model(const std::filesystem::path& path);
std::unique_ptr<ModelSource> open_mlx_model(const std::filesystem::path& dir);

/// The Llama-family hyper-parameters stored in a GGUF file's metadata.
LlamaConfig config_from_gguf(const GgufFile& file);
/// The vocabulary of a GGUF file (tokenizer.ggml.*).
TokenizerData tokenizer_data_from_gguf(const GgufFile& file);
/// The vocabulary of a Hugging Face / mlx-lm model directory: tokenizer.json, with BOS, EOS
/// and the chat template from tokenizer_config.json (or chat_template.jinja); nullopt when
/// there is no tokenizer.json. Throws Error naming the file and the field it cannot follow.
std::optional<TokenizerData> tokenizer_data_from_hf(const std::filesystem::path& dir);

}  // namespace onepass::model
