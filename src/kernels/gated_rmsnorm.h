// Gated RMSNorm on the delta rule's output, per head (HF Qwen3NextRMSNormGated, KDA o_norm):
//   y = weight * x * rsqrt(mean(x^2) + eps) * act(gate),   act = silu (GDN) or sigmoid (KDA)
// The weight is plain (ones-initialised), not the zero-centred (1 + w) form.
#pragma once

#include "core/tensor.h"

namespace hyla::kernels {

enum class GateActivation { kSilu, kSigmoid };

struct GatedRmsNormParams {
  TensorView x;       ///< [T, HV, d_v] f32|bf16, last dim contiguous
  TensorView gate;    ///< [T, HV, d_v] f32|bf16 (z for GDN, sigmoid gate input for KDA)
  TensorView weight;  ///< [d_v] f32|bf16, shared by all heads
  float eps = 1e-6f;  ///< > 0; HF: rms_norm_eps (Qwen3-Next 1e-6, Kimi 1e-5)
  GateActivation act = GateActivation::kSilu;  ///< silu (GDN) or sigmoid (KDA)
  TensorView y;  ///< out [T, HV, d_v] f32|bf16; may alias x (same dtype and strides)
};

Status gated_rmsnorm(const GatedRmsNormParams& p, Stream stream = {});

namespace cpu {
void gated_rmsnorm(const GatedRmsNormParams& p);
}  // namespace cpu

namespace cuda {
Status gated_rmsnorm(const GatedRmsNormParams& p, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
