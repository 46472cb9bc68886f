// Scaled residual add: y[t] += s_t * x[t], s_t = scale, or scale * sigmoid(gate[t]) when a per-row
// gate is given (Qwen's shared expert: sigmoid(x W_g^T) * expert(x)). Each element is one fused
// multiply-add in fp32, fma(s_t, x, y), on both bodies (with scale 1 and no gate: exactly y + x).
#pragma once

#include "core/tensor.h"

namespace hyla::kernels {

struct AddParams {
  TensorView x;  ///< [T, W] f32, last dim contiguous (row stride allowed)
  /// Optional [T] f32 (any stride): per-row gate logits; s_t = scale * sigmoid(gate[t]).
  TensorView gate;
  float scale = 1.0f;  ///< finite
  TensorView y;        ///< in/out [T, W] f32, last dim contiguous; may be x (same strides)
};

Status add(const AddParams& p, Stream stream = {});

namespace cpu {
void add(const AddParams& p);
}  // namespace cpu

namespace cuda {
Status add(const AddParams& p, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
