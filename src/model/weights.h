// The mapping table vocabulary: every checkpoint tensor an architecture expects, with its shape and
// its role in the computation. The loader checks a checkpoint against it; `hyla inspect` prints it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace hyla::model {

/// What a tensor does (seed: the K3 KDA weight accounting groups them this way).
enum class WeightRole : uint8_t {
  kEmbedding,      ///< token embedding
  kContent,        ///< q / k / v projections and their short convs: what is written and read
  kWriteStrength,  ///< beta's projection (b_proj, in_proj_b)
  kForgetGate,     ///< alpha: a / f projections, A_log, dt_bias
  kOutput,         ///< output gate, output norm, output projection of a mixer
  kAttention,      ///< projections and norms of full attention / MLA
  kNorm,           ///< decoder RMSNorms (input, post-attention, final)
  kDenseMlp,       ///< SwiGLU MLP
  kRouter,         ///< MoE router weight and correction bias
  kExperts,        ///< routed experts
  kSharedExperts,  ///< shared experts and their gate
  kMoeLatent,  ///< latent MoE: routed_expert_down_proj, routed_expert_norm, routed_expert_up_proj
  kAttnResidual,  ///< Attention Residuals: the *_res_norm / *_res_proj score pairs (K3)
  kLmHead,        ///< output projection to the vocabulary
  kMtp,  ///< the MTP draft head's own tensors (mtp.fc, its norms); its layers keep their roles
};
const char* weight_role_name(WeightRole role);

/// One checkpoint tensor as the architecture expects it.
struct WeightSpec {
  std::string name;
  std::vector<int64_t> shape;
  WeightRole role;
  int64_t layer = -1;  ///< decoder layer, -1 = model level

  int64_t numel() const;
};

/// True for roles that belong to a layer's token mixer (GDN / KDA / attention / MLA).
bool is_mixer_role(WeightRole role);

/// The seed's accounting of one kind of mixer over the model: parameters per layer, over all
/// layers of that kind, and (for linear attention) how they split between the gates that decide
/// how much is written and forgotten (beta, alpha) and the 2-D content / output projections.
struct MixerAccounting {
  MixerKind kind;
  int64_t layers = 0;
  int64_t per_layer = 0;    ///< mixer parameters of one layer (0 when the layers differ)
  int64_t total = 0;        ///< over all layers of this kind
  int64_t gates = 0;        ///< per layer: write strength + forget gate roles
  int64_t projections = 0;  ///< per layer: 2-D content and output tensors (q/k/v/g/o)
};
std::vector<MixerAccounting> mixer_accounting(const ModelConfig& config,
                                              const std::vector<WeightSpec>& specs);

}  // namespace hyla::model
