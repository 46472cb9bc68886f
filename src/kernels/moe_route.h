// Top-k expert selection of a mixture-of-experts router (HF Qwen3NextTopKRouter / Qwen3.5-MoE,
// KimiLinearTopkRouter / DeepSeek-V3 "noaux_tc"), fp32.
//   scores = softmax(logits) (kSoftmax) or sigmoid(logits) (kSigmoid)
//   choice = scores + correction_bias (bias only steers the selection)
//   group-limited: experts split into num_groups contiguous groups; group score = sum of the top-2
//     choices in the group; the best topk_groups groups stay eligible (ties: lower group first)
//   topk_ids     = the top_k eligible experts by choice, descending (ties: lower expert first)
//   topk_weights = scores[topk_ids] / (sum + (kSigmoid ? 1e-20 : 0)) if renormalize, else
//                  scores[topk_ids]; then * routed_scaling
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace hyla::kernels {

enum class MoeScoring {
  kSoftmax,  ///< Qwen: softmax over experts
  kSigmoid,  ///< Kimi / DeepSeek-V3: sigmoid per expert
};

struct MoeRouteParams {
  TensorView logits;  ///< [T, E] f32 router logits, last dim contiguous
  /// optional [E] f32: added to the scores for SELECTION only (weights use the raw scores); `{}`
  /// so designated initialisers may leave it out without a warning
  TensorView correction_bias{};
  MoeScoring scoring = MoeScoring::kSoftmax;
  int64_t top_k = 1;  ///< in [1, E], and at most the experts in the kept groups
  /// divide the chosen weights by their sum (+1e-20 for sigmoid scoring)
  bool renormalize = false;
  float routed_scaling = 1.0f;  ///< multiplies the final weights; finite, > 0
  /// group-limited selection: experts split into num_groups contiguous groups (E divisible by
  /// num_groups, >= 2 experts per group when num_groups > 1); group score = sum of the top-2
  /// selection scores in the group; keep the best topk_groups groups (in [1, num_groups]), then
  /// top_k experts among them
  int64_t num_groups = 1;
  int64_t topk_groups = 1;
  /// out [T, top_k] i32, in descending order of selection score (like torch.topk); last dim
  /// contiguous
  TensorView topk_ids;
  TensorView topk_weights;  ///< out [T, top_k] f32, last dim contiguous
};

Status moe_route(const MoeRouteParams& p, Stream stream = {});

namespace cpu {
void moe_route(const MoeRouteParams& p);
}  // namespace cpu

namespace cuda {
Status moe_route(const MoeRouteParams& p, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
