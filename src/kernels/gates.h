// Decay and write-strength gates of the gated delta rule, computed in fp32 (seed: Gated DeltaNet,
// KDA sections; HF Qwen3NextGatedDeltaNet / KimiDeltaAttention).
//   GDN, per value head:       g = -exp(A_log[h]) * softplus(a + dt_bias[h]),  beta = sigmoid(b)
//   KDA, per key channel:      g = -exp(A_log[h]) * softplus(f + dt_bias[h, i_k])
//   KDA "safe gate" (K3):      g = lower_bound * sigmoid(exp(A_log[h]) * (f + dt_bias[h, i_k]))
// g is a log-space decay (g <= 0); the state is multiplied by exp(g) each step.
#pragma once

#include <optional>

#include "core/tensor.h"

namespace hyla::kernels {

struct GdnGateParams {
  TensorView a;        ///< [T, HV] f32|bf16, raw decay input (in_proj_ba / in_proj_a)
  TensorView b;        ///< [T, HV] f32|bf16, raw write-strength input
  TensorView A_log;    ///< [HV] f32
  TensorView dt_bias;  ///< [HV] f32
  TensorView g;        ///< out [T, HV] f32
  TensorView beta;     ///< out [T, HV] f32
};

struct KdaGateParams {
  TensorView f;        ///< [T, H, d_k] f32|bf16, raw forget input (f_b_proj(f_a_proj(x)))
  TensorView A_log;    ///< [H] f32 (K3 checkpoints store [head_dim]: pass the first H entries)
  TensorView dt_bias;  ///< [H, d_k] f32
  /// Safe gate when set (finite, <= 0; K3: -5): g in [lower_bound, 0]. Plain softplus gate
  /// otherwise.
  std::optional<float> lower_bound;
  TensorView g;     ///< out [T, H, d_k] f32
  TensorView b;     ///< optional [T, H] f32|bf16 raw write strength
  TensorView beta;  ///< out [T, H] f32 = sigmoid(b); required iff b is given
};

Status gdn_gate(const GdnGateParams& p, Stream stream = {});
Status kda_gate(const KdaGateParams& p, Stream stream = {});

namespace cpu {
void gdn_gate(const GdnGateParams& p);
void kda_gate(const KdaGateParams& p);
}  // namespace cpu

namespace cuda {
Status gdn_gate(const GdnGateParams& p, Stream stream);
Status kda_gate(const KdaGateParams& p, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
