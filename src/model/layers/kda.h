// Kimi Delta Attention layer (Kimi-Linear; Kimi K3 variant with a full-rank output gate and the
// safe gate; HF KimiDeltaAttention):
//   q, k, v = silu(causal_conv1d(x [W_q | W_k | W_v]^T))
//   f = (x W_fa^T) W_fb^T;  g = -exp(A_log[h]) softplus(f + dt_bias)   (or the safe gate)
//   beta = sigmoid(x W_b^T);  o = gated_delta_rule(q, k, v, g (per channel), beta)
//   gate = (x W_ga^T) W_gb^T  (K3: x W_g^T);  out = (o_norm_w * rmsnorm(o) * sigmoid(gate)) W_o^T
#pragma once

#include "core/tensor.h"
#include "model/config.h"
#include "model/layer_state.h"

namespace hyla::model {

struct KdaWeights {
  /// [3 H d, hidden] rows [q | k | v]; with a full-rank output gate (K3) also [.. | g]: [4 H d,
  /// hidden]
  Tensor qkv_proj;
  Tensor conv;     ///< [3 H d, K], channels [q | k | v] (the three checkpoint convs merged)
  Tensor fa_b;     ///< [rank + H, hidden]: rows [f_a | b] (two GEMVs on the same input merged)
  Tensor f_b;      ///< [H d, rank]
  Tensor g_a;      ///< [rank, hidden] low-rank output gate (undefined when full rank)
  Tensor g_b;      ///< [H d, rank]
  Tensor A_log;    ///< [H] (truncated from the checkpoint's stored length)
  Tensor dt_bias;  ///< [H, d]
  Tensor o_norm;   ///< [d]
  Tensor o_proj;   ///< [hidden, H d]
};

/// x: [T, hidden] f32 (already normed), the new tokens of memory's sequences; out: [T, hidden] f32.
Status kda_forward(const KdaWeights& w, const ModelConfig& config, const TensorView& x,
                   const LinearMemory& memory, const TensorView& out);

}  // namespace hyla::model
