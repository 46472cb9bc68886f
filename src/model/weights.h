// The mapping table vocabulary: every checkpoint tensor an architecture expects, with its shape and
// its role in the computation. The loader checks a checkpoint against it; `hyla inspect` prints it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
  kLmHead,         ///< output projection to the vocabulary
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

}  // namespace hyla::model
