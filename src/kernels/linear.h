// Dense projection (HF nn.Linear / F.linear): y = x W^T + bias, fp32 compute.
//   y[t, n] = sum_k x[t, k] * W[n, k] + bias[n]
// CPU: tiles of weight rows in parallel; a few tokens take dot products straight from the stored
// f32 / bf16 weights, more tokens an sgemm per tile (bf16 / f16 tiles widened to fp32 first, so
// the full weight is never copied).
// Layouts: x and y may have any row stride (y may be a column slice of a wider buffer); the
// weight is contiguous [N, K] (the checkpoint's [out_features, in_features]).
#pragma once

#include "core/tensor.h"

namespace hyla::kernels {

struct LinearParams {
  TensorView x;       ///< [T, K] f32, last dim contiguous, any row stride; T may be 0
  TensorView weight;  ///< [N, K] f32|bf16|f16, contiguous
  /// optional [N] f32; `{}` so designated initialisers may leave it out without a warning
  TensorView bias{};
  /// out [T, N] f32, last dim contiguous, any row stride (may be a column slice of a wider
  /// buffer); must not overlap x
  TensorView y;
};

Status linear(const LinearParams& p, Stream stream = {});

namespace cpu {
void linear(const LinearParams& p);
}  // namespace cpu

}  // namespace hyla::kernels
