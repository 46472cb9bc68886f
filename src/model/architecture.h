// The architecture registry, keyed by config.json's model_type. Each architecture file
// (archs/<arch>.cpp) provides its config parser, its mapping table of checkpoint tensors and its
// loader; everything else is shared.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/model.h"
#include "model/weights.h"

namespace hyla::model {

struct Architecture {
  const char* model_type;
  const char* description;
  /// config.json (already parsed) -> typed config; `source` names the file for messages.
  Result<ModelConfig> (*parse_config)(const nlohmann::json& json, const std::string& source);
  /// The mapping table: every checkpoint tensor with its shape and role.
  std::vector<WeightSpec> (*checkpoint_weights)(const ModelConfig& config);
  /// Loads (and fuses) the weights into a Model.
  Result<std::unique_ptr<Model>> (*load)(const ModelConfig& config, const Checkpoint& checkpoint);
  /// Adapts mapping-table entries to a checkpoint's spelling where it differs in a way the loader
  /// accepts (another name, another stored shape); nullptr when the table is used as is.
  void (*resolve_weights)(const Checkpoint& checkpoint, const ModelConfig& config,
                          std::vector<WeightSpec>& specs);
};

/// nullptr when unknown.
const Architecture* find_architecture(std::string_view model_type);
/// "qwen3_next, qwen3_5, ..." for messages.
std::string supported_model_types();

/// A config together with the architecture that parsed it.
struct LoadedConfig {
  const Architecture* arch = nullptr;
  ModelConfig config;
};
/// Reads config.json (a path to it, or to the folder holding it) and parses it.
Result<LoadedConfig> load_config(const std::string& path);
/// Loads a checkpoint folder (config.json + safetensors), checking every tensor against the
/// architecture's mapping table first (missing or mis-shaped tensors are named).
Result<std::unique_ptr<Model>> load_model(const std::string& dir);

}  // namespace hyla::model
