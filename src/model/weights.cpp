// WeightRole names and WeightSpec helpers (see weights.h).
#include "model/weights.h"

namespace hyla::model {

const char* weight_role_name(WeightRole role) {
  switch (role) {
    case WeightRole::kEmbedding: return "embedding";
    case WeightRole::kContent: return "content q/k/v";
    case WeightRole::kWriteStrength: return "write strength beta";
    case WeightRole::kForgetGate: return "forget gate alpha";
    case WeightRole::kOutput: return "output";
    case WeightRole::kAttention: return "attention";
    case WeightRole::kNorm: return "norm";
    case WeightRole::kDenseMlp: return "mlp";
    case WeightRole::kRouter: return "moe router";
    case WeightRole::kExperts: return "moe experts";
    case WeightRole::kSharedExperts: return "moe shared experts";
    case WeightRole::kMoeLatent: return "moe latent projection";
    case WeightRole::kAttnResidual: return "attention residual";
    case WeightRole::kLmHead: return "lm_head";
    case WeightRole::kMtp: return "mtp draft head";
  }
  return "?";
}

int64_t WeightSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool is_mixer_role(WeightRole role) {
  return role == WeightRole::kContent || role == WeightRole::kWriteStrength ||
         role == WeightRole::kForgetGate || role == WeightRole::kOutput ||
         role == WeightRole::kAttention;
}

std::vector<MixerAccounting> mixer_accounting(const ModelConfig& config,
                                              const std::vector<WeightSpec>& specs) {
  const size_t L = size_t(config.num_layers);
  std::vector<int64_t> mixer(L, 0), gates(L, 0), projections(L, 0);
  for (const WeightSpec& s : specs) {
    if (s.layer < 0 || size_t(s.layer) >= L || !is_mixer_role(s.role)) continue;
    const size_t i = size_t(s.layer);
    mixer[i] += s.numel();
    if (s.role == WeightRole::kWriteStrength || s.role == WeightRole::kForgetGate)
      gates[i] += s.numel();
    if ((s.role == WeightRole::kContent || s.role == WeightRole::kOutput) && s.shape.size() == 2)
      projections[i] += s.numel();
  }
  std::vector<MixerAccounting> out;
  for (MixerKind kind : {MixerKind::kGatedDeltaNet, MixerKind::kKimiDelta,
                         MixerKind::kFullAttention, MixerKind::kLatentAttention}) {
    MixerAccounting a{kind};
    bool uniform = true;
    for (size_t i = 0; i < L; ++i) {
      if (config.mixers[i] != kind) continue;
      if (a.layers > 0 && (mixer[i] != a.per_layer || gates[i] != a.gates)) uniform = false;
      ++a.layers;
      a.per_layer = mixer[i];
      a.gates = gates[i];
      a.projections = projections[i];
      a.total += mixer[i];
    }
    if (a.layers == 0) continue;
    if (!uniform) a.per_layer = a.gates = a.projections = 0;
    out.push_back(a);
  }
  return out;
}

}  // namespace hyla::model
