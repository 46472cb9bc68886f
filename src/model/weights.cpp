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
    case WeightRole::kLmHead: return "lm_head";
  }
  return "?";
}

int64_t WeightSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace hyla::model
