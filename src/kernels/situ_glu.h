// SiTU-GLU activation of a fused gate/up projection (Kimi K3: hidden_act "situ", the reference's
// SituAndMul on gate_proj(x), up_proj(x); every K3 MLP, shared and routed expert uses it):
//   y[t, i] = beta tanh(g / beta) sigmoid(g) * linear_beta tanh(u / linear_beta)
//   g = x[t, i] (gate), u = x[t, I + i] (up); K3: beta = activation_situ_beta = 4,
//   linear_beta = activation_situ_linear_beta = 25.
// SiTU is SiLU with its linear factor bounded: g sigmoid(g) -> beta tanh(g / beta) sigmoid(g); the
// up projection is bounded the same way. fp32 compute; y is f32, or bf16 (rounded once) to feed a
// bf16 GEMM.
#pragma once

#include "core/tensor.h"
#include "kernels/scalar_math.h"

namespace hyla::kernels {

/// One output of SiTU-GLU from its gate g and up u, in the order both bodies evaluate it.
HYLA_HOST_DEVICE float situ_glu_value(float g, float u, float beta, float linear_beta) {
  const float bounded_gate = beta * tanhf(g / beta) * sigmoid(g);
  return bounded_gate * (linear_beta * tanhf(u / linear_beta));
}

struct SituGluParams {
  TensorView x;               ///< [T, 2I] f32: gate = x[:, :I], up = x[:, I:]; last dim contiguous
  float beta = 4.0f;          ///< > 0: bound of the gate's linear factor (activation_situ_beta)
  float linear_beta = 25.0f;  ///< > 0: bound of the up projection (activation_situ_linear_beta)
  /// out [T, I] f32|bf16, last dim contiguous; an f32 y may be x's gate half in place (same data
  /// pointer and row stride)
  TensorView y;
};

Status situ_glu(const SituGluParams& p, Stream stream = {});

namespace cpu {
void situ_glu(const SituGluParams& p);
}  // namespace cpu

namespace cuda {
Status situ_glu(const SituGluParams& p, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
