// PLACEHOLDER being replaced by the Kimi-Linear architecture (issue 3, in progress).
#include "model/architecture.h"

namespace hyla::model {

namespace {
Result<ModelConfig> parse_kimi(const nlohmann::json&, const std::string& source) {
  return unsupported(source, ": kimi_linear is not implemented yet");
}
std::vector<WeightSpec> kimi_weights(const ModelConfig&) { return {}; }
Result<std::unique_ptr<Model>> load_kimi(const ModelConfig&, const Checkpoint&) {
  return unsupported("kimi_linear is not implemented yet");
}
}  // namespace

extern const Architecture kKimiLinearArchitecture{"kimi_linear", "Kimi-Linear: KDA + MLA, MoE",
                                                  parse_kimi, kimi_weights, load_kimi};

}  // namespace hyla::model
