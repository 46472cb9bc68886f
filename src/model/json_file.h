// Reading a JSON file (config.json, model.safetensors.index.json) into nlohmann::json, with errors
// that name the path.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/error.h"

namespace hyla::model {

/// The parsed file. Errors: the file is missing (kNotFound) or unreadable (kIo), or is not valid
/// JSON (kInvalidArgument, with the parser's line and column).
Result<nlohmann::json> read_json_file(const std::string& path);

}  // namespace hyla::model
