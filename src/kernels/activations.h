// Elementwise activations and the per-row L2 normalisation.
//   l2norm:   y = x * rsqrt(sum_i x_i^2 + eps) over the last dimension (eps = 1e-6, as HF / fla)
//   sigmoid:  y = 1 / (1 + exp(-x))
//   softplus: y = log(1 + exp(x)), y = x for x > 20 (torch threshold)
//   silu:     y = x * sigmoid(x)
// x, y: same shape (1-4 dims), f32 | bf16 | f16 each, last dimension contiguous; y may alias x
// when it has x's dtype and strides (in place).
// Compute is fp32.
#pragma once

#include "core/tensor.h"
#include "kernels/scalar_math.h"

namespace hyla::kernels {

enum class Activation { kSigmoid, kSoftplus, kSilu };

Status l2norm(const TensorView& x, const TensorView& y, float eps = kL2NormEps, Stream stream = {});
Status activation(Activation act, const TensorView& x, const TensorView& y, Stream stream = {});

namespace cpu {
void l2norm(const TensorView& x, const TensorView& y, float eps);
void activation(Activation act, const TensorView& x, const TensorView& y);
}  // namespace cpu

namespace cuda {
Status l2norm(const TensorView& x, const TensorView& y, float eps, Stream stream);
Status activation(Activation act, const TensorView& x, const TensorView& y, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
