// The architecture registry and the config / model entry points (see architecture.h).
#include "model/architecture.h"

#include <filesystem>
#include <functional>
#include <optional>

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

namespace {

/// The value of a count field as config.json spells it, when it is a number (the parser reports
/// every other form); the config's spelling of the value for messages in `text`.
std::optional<double> raw_count(const nlohmann::json& j, const char* key, std::string* text) {
  if (!j.is_object()) return std::nullopt;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  *text = json_excerpt(*it);
  return it->get<double>();
}

/// Compares the counts that size everything built from the config (layers, experts per layer)
/// with what the checkpoint holds, before the config is parsed: a corrupt count (1e9 layers) must
/// fail here, not in an allocation. Holding fewer than the config claims is an error; holding
/// more is check_checkpoint's (tensors that the config never reads).
Status check_counts(const nlohmann::json& text, const std::string& file, const Checkpoint& ckpt) {
  const CheckpointHoldings holds = checkpoint_holdings(ckpt);
  std::string shown;
  if (const auto layers = raw_count(text, "num_hidden_layers", &shown);
      layers && *layers > double(holds.layers)) {
    return invalid_argument(
        file, ": num_hidden_layers is ", shown, " but the checkpoint ", ckpt.source(), " holds ",
        holds.layers == 0
            ? std::string("no decoder layers (no model.layers.* tensors)")
            : str_cat(holds.layers, " (model.layers.0 to model.layers.", holds.layers - 1, ")"));
  }
  // Every architecture's spelling of the routed expert count; checked only against a checkpoint
  // that has per-expert tensors (a dense checkpoint's config may carry the field unused).
  if (holds.experts > 0) {
    for (const char* key : {"num_experts", "n_routed_experts", "num_local_experts"}) {
      if (const auto experts = raw_count(text, key, &shown);
          experts && *experts > double(holds.experts))
        return invalid_argument(file, ": ", key, " is ", shown, " but the checkpoint ",
                                ckpt.source(), " holds at most ", holds.experts,
                                " experts per layer (experts.0 to experts.", holds.experts - 1,
                                ")");
    }
  }
  return ok_status();
}

/// load_config, with `before_parse` run on the decoder's JSON once the architecture is known.
Result<LoadedConfig> load_config_with(
    const std::string& path,
    const std::function<Status(const nlohmann::json& text, const std::string& file)>&
        before_parse) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string file =
      fs::is_directory(path, ec) ? (fs::path(path) / "config.json").string() : path;
  HYLA_ASSIGN_OR_RETURN(nlohmann::json json, read_json_file(file));
  if (!json.is_object())
    return invalid_argument(file, ": expected a JSON object, got ", json_excerpt(json));
  // Multimodal wrappers keep the decoder's config in text_config.
  const auto text_it = json.find("text_config");
  const nlohmann::json& text = text_it != json.end() && text_it->is_object() ? *text_it : json;
  const auto type_of = [](const nlohmann::json& j) {
    const auto it = j.find("model_type");
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
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
    return unsupported(file, ": model_type '", text_excerpt(model_type),
                       "' is not supported; supported: ", supported_model_types());
  if (before_parse) HYLA_RETURN_IF_ERROR(before_parse(text, file));
  HYLA_ASSIGN_OR_RETURN(ModelConfig config, arch->parse_config(text, file));
  // Multimodal wrappers (kimi_k3): only the text decoder is supported; say so, do not refuse.
  const auto vision_it = json.find("vision_config");
  if (&text != &json && vision_it != json.end() && !vision_it->is_null())
    config.warnings.push_back(
        str_cat(file, ": has a vision_config (", model_type,
                "'s vision tower): out of scope, only the text decoder in text_config is read; "
                "image inputs are not supported"));
  return LoadedConfig{arch, std::move(config)};
}

}  // namespace

Result<LoadedConfig> load_config(const std::string& path) { return load_config_with(path, {}); }

Result<std::unique_ptr<Model>> load_model(const std::string& dir) {
  std::optional<Checkpoint> ckpt;
  HYLA_ASSIGN_OR_RETURN(
      LoadedConfig loaded,
      load_config_with(dir, [&](const nlohmann::json& text, const std::string& file) -> Status {
        HYLA_ASSIGN_OR_RETURN(Checkpoint opened, Checkpoint::open(dir));
        ckpt.emplace(std::move(opened));
        return check_counts(text, file, *ckpt);
      }));
  return loaded.arch->load(loaded.config, *ckpt);
}

}  // namespace hyla::model
