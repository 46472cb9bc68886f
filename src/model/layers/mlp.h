// Feed-forward blocks: the SwiGLU MLP, down(silu(gate(x)) * up(x)), and the mixture of experts
// (Qwen: softmax top-k, optional renormalisation, sigmoid-gated shared expert; Kimi: sigmoid
// scores, correction bias for selection only, renormalisation, routed scaling, ungated shared
// experts).
#pragma once

#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace hyla::model {

struct DenseMlpWeights {
  Tensor gate_up;  ///< [2 I, hidden]: rows [gate | up]
  Tensor down;     ///< [hidden, I]
};

struct MoeWeights {
  Tensor router;           ///< [E, hidden]
  Tensor correction_bias;  ///< [E], selection only (Kimi); undefined otherwise
  std::vector<DenseMlpWeights> experts;
  DenseMlpWeights shared;  ///< shared expert(s) fused; undefined when there are none
  Tensor shared_gate;      ///< [1, hidden] (Qwen); undefined otherwise
};

/// x: [T, hidden] f32; out: [T, hidden] f32.
Status dense_mlp_forward(const DenseMlpWeights& w, const TensorView& x, const TensorView& out);

/// x: [T, hidden] f32; out: [T, hidden] f32. topk_ids / topk_weights, when given, receive the
/// routing ([T, top_k] i32 / f32).
Status moe_forward(const MoeWeights& w, const MoeConfig& config, const TensorView& x,
                   const TensorView& out, Tensor* topk_ids = nullptr,
                   Tensor* topk_weights = nullptr);

}  // namespace hyla::model
