// RMSNorm over the last dimension (HF Qwen3NextRMSNorm, KimiLinearRMSNorm / LlamaRMSNorm):
//   xhat = x * rsqrt(mean(x^2) + eps)           in fp32
//   y    = w * xhat          (kWeight: Kimi, MLA kv_a_layernorm, Qwen3-Next's gated norm weight)
//   y    = (1 + w) * xhat    (kOffset: Qwen3-Next / Qwen3.5 zero-centred norms)
// All compute is fp32 and y is rounded once. (For bf16 x, HF's Llama-style norm rounds xhat to
// bf16 before the weight multiply; with fp32 activations, as the models run here, the two agree.)
// With a residual (the pre-norm block's "h += branch; normed = norm(h)" in one pass):
//   residual = residual + x   (fp32, written back),   y = norm(residual)
#pragma once

#include "core/tensor.h"

namespace hyla::kernels {

enum class RmsNormForm {
  kWeight,  ///< y = w * xhat
  kOffset,  ///< y = (1 + w) * xhat (Qwen3-Next zero-centred)
};

struct RmsNormParams {
  TensorView x;       ///< [..., d] 1-4 dims f32|bf16, last dim contiguous
  TensorView weight;  ///< [d] f32|bf16
  float eps = 1e-6f;  ///< > 0; HF: rms_norm_eps (Qwen3-Next 1e-6, Kimi 1e-5)
  RmsNormForm form = RmsNormForm::kWeight;
  TensorView y;  ///< out, same shape as x, f32|bf16; may alias x (same dtype and strides)
  /// optional in/out, same shape as x, f32, last dim contiguous, on x's device: when given,
  /// residual += x first and y = norm(residual); must not overlap x or y
  TensorView residual = {};
};

Status rmsnorm(const RmsNormParams& p, Stream stream = {});

namespace cpu {
void rmsnorm(const RmsNormParams& p);
}  // namespace cpu

namespace cuda {
Status rmsnorm(const RmsNormParams& p, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
