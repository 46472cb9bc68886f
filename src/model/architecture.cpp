// The architecture registry and the config / model entry points (see architecture.h).
#include "model/architecture.h"

#include <filesystem>

#include "model/json_file.h"

namespace hyla::model {

// Defined in archs/<arch>.cpp.
extern const Architecture kQwen3NextArchitecture;
extern const Architecture kQwen35Architecture;
extern const Architecture kQwen35MoeArchitecture;
extern const Architecture kKimiLinearArchitecture;
extern const Architecture kKimiK3Architecture;

namespace {

struct Registration {
  const char* model_type;  ///< as config.json spells it (aliases included)
  const Architecture* arch;
};

const std::vector<Registration>& registry() {
  static const std::vector<Registration> kRegistry = {
      {"qwen3_next", &kQwen3NextArchitecture},
      {"qwen3_5", &kQwen35Architecture},
      {"qwen3_5_text", &kQwen35Architecture},
      {"qwen3_5_moe", &kQwen35MoeArchitecture},
      {"qwen3_5_moe_text", &kQwen35MoeArchitecture},
      {"kimi_linear", &kKimiLinearArchitecture},
      {"kimi_k3", &kKimiK3Architecture},
  };
  return kRegistry;
}

}  // namespace

const Architecture* find_architecture(std::string_view model_type) {
  for (const Registration& r : registry())
    if (model_type == r.model_type) return r.arch;
  return nullptr;
}

std::string supported_model_types() {
  std::string s;
  for (const Registration& r : registry()) s += str_cat(s.empty() ? "" : ", ", r.model_type);
  return s;
}

Result<LoadedConfig> load_config(const std::string& path) {
  namespace fs = std::filesystem;
  const std::string file =
      fs::is_directory(path) ? (fs::path(path) / "config.json").string() : path;
  HYLA_ASSIGN_OR_RETURN(nlohmann::json json, read_json_file(file));
  if (!json.is_object()) return invalid_argument(file, ": expected a JSON object");
  // Multimodal wrappers keep the decoder's config in text_config.
  const nlohmann::json& text =
      json.contains("text_config") && json["text_config"].is_object() ? json["text_config"] : json;
  const auto type_of = [](const nlohmann::json& j) {
    return j.contains("model_type") && j["model_type"].is_string()
               ? j["model_type"].get<std::string>()
               : std::string();
  };
  // The wrapper's own model_type wins when it is registered (kimi_k3 wraps a kimi_linear-style
  // text_config but needs its own forward); otherwise the decoder's.
  std::string model_type = type_of(json);
  if (model_type.empty() || find_architecture(model_type) == nullptr) {
    const std::string inner = type_of(text);
    if (!inner.empty()) model_type = inner;
  }
  if (model_type.empty())
    return invalid_argument(file, ": no model_type; supported: ", supported_model_types());
  const Architecture* arch = find_architecture(model_type);
  if (arch == nullptr)
    return unsupported(file, ": model_type '", model_type,
                       "' is not supported; supported: ", supported_model_types());
  HYLA_ASSIGN_OR_RETURN(ModelConfig config, arch->parse_config(text, file));
  // Multimodal wrappers (kimi_k3): only the text decoder is supported; say so, do not refuse.
  if (&text != &json && json.contains("vision_config") && !json["vision_config"].is_null())
    config.warnings.push_back(
        str_cat(file, ": has a vision_config (", model_type,
                "'s vision tower): out of scope, only the text decoder in text_config is read; "
                "image inputs are not supported"));
  return LoadedConfig{arch, std::move(config)};
}

Result<std::unique_ptr<Model>> load_model(const std::string& dir) {
  HYLA_ASSIGN_OR_RETURN(LoadedConfig loaded, load_config(dir));
  HYLA_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(dir));
  return loaded.arch->load(loaded.config, ckpt);
}

}  // namespace hyla::model
