// SiTU-GLU activation of a fused gate/up projection (Kimi K3: hidden_act "situ", the reference's
// SituAndMul on gate_proj(x), up_proj(x); every K3 MLP, shared and routed expert uses it):
//   y[t, i] = beta tanh(g / beta) sigmoid(g) * linear_beta tanh(u / linear_beta)
//   g = x[t, i] (gate), u = x[t, I + i] (up); K3: beta = activation_situ_beta = 4,
//   linear_beta = activation_situ_linear_beta = 25.
// SiTU is SiLU with its linear factor bounded: g sigmoid(g) -> beta tanh(g / beta) sigmoid(g); the
// up projection is bounded the same way. fp32 compute.
#pragma once

#include "core/tensor.h"

namespace hyla::kernels {

struct SituAndMulParams {
  TensorView x;               ///< [T, 2I] f32: gate = x[:, :I], up = x[:, I:]; last dim contiguous
  float beta = 4.0f;          ///< > 0: bound of the gate's linear factor (activation_situ_beta)
  float linear_beta = 25.0f;  ///< > 0: bound of the up projection (activation_situ_linear_beta)
  /// out [T, I] f32, last dim contiguous; may be x's gate half in place (same data pointer and
  /// row stride)
  TensorView y;
};

Status situ_and_mul(const SituAndMulParams& p, Stream stream = {});

namespace cpu {
void situ_and_mul(const SituAndMulParams& p);
}  // namespace cpu

}  // namespace hyla::kernels
