// Gated DeltaNet layer (Qwen3-Next, Qwen3.5; HF Qwen3NextGatedDeltaNet):
//   [q | k | v | z | b | a] = x W_in^T                        one GEMM over the fused projection
//   q, k, v = silu(causal_conv1d([q | k | v]))                 conv state carried per sequence
//   g = -exp(A_log) softplus(a + dt_bias),  beta = sigmoid(b)
//   o = gated_delta_rule(q, k, v, g, beta)                      l2norm(q, k) in the kernel; GVA
//   out = (norm_w * rmsnorm(o) * silu(z)) W_out^T
#pragma once

#include "core/tensor.h"
#include "model/config.h"
#include "model/layer_state.h"

namespace hyla::model {

struct GdnWeights {
  /// [2 H d_k + 2 HV d_v + 2 HV, hidden], rows [q (all key heads) | k | v (all value heads) | z | b
  /// | a] (Qwen3-Next's per-key-group in_proj_qkvz / in_proj_ba are regrouped into this order at
  /// load).
  Tensor in_proj;
  Tensor conv;      ///< [2 H d_k + HV d_v, K] (channels in [q | k | v] order)
  Tensor A_log;     ///< [HV]
  Tensor dt_bias;   ///< [HV]
  Tensor norm;      ///< [d_v] plain weight of the gated RMSNorm
  Tensor out_proj;  ///< [hidden, HV d_v]
};

/// x: [T, hidden] f32 (already normed), the new tokens of memory's sequences; out: [T, hidden] f32.
Status gdn_forward(const GdnWeights& w, const ModelConfig& config, const TensorView& x,
                   const LinearMemory& memory, const TensorView& out);

}  // namespace hyla::model
