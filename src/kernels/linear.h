// Dense projection (HF nn.Linear / F.linear): y = x W^T + bias, fp32 compute.
//   y[t, n] = sum_k x[t, k] * W[n, k] + bias[n]
// CPU: tiles of weight rows in parallel; a few tokens take dot products straight from the stored
// f32 / bf16 weights, more tokens an sgemm per tile (bf16 / f16 tiles widened to fp32 first, so
// the full weight is never copied).
// CUDA (cuda/linear.cu): up to kLinearCudaDirectMaxTokens tokens a memory-bound kernel reads the
// weights in their stored dtype and x as given, fp32 sums (the CPU's numbers up to summation
// order); more tokens a cuBLASLt GEMM with fp32 accumulation (no TF32): f32 weights x f32 x, or
// bf16 weights x bf16 x, where an f32 x is rounded to bf16 first (nearest even): each x element
// moves by <= 2^-8 of itself, so y moves by <= 2^-8 sum_k |x w| (about 2^-8 sqrt(sum_k (x w)^2)
// for independent roundings); f16 weights take the direct kernel 4 tokens at a time.
// Layouts: x and y may have any row stride (y may be a column slice of a wider buffer); the
// weight is contiguous [N, K] (the checkpoint's [out_features, in_features]).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace hyla::kernels {

struct LinearParams {
  /// [T, K] f32 (CUDA also bf16), last dim contiguous, any row stride; T may be 0
  TensorView x;
  TensorView weight;  ///< [N, K] f32|bf16|f16, contiguous
  /// optional [N] f32; `{}` so designated initialisers may leave it out without a warning
  TensorView bias{};
  /// out [T, N] f32 (CUDA also bf16, rounded to nearest even once from the fp32 sum + bias), last
  /// dim contiguous, any row stride (may be a column slice of a wider buffer); must not overlap x
  TensorView y;
};

/// On CUDA, calls with at most this many tokens read x as given (the direct kernel); beyond it a
/// bf16 weight multiplies x rounded to bf16.
inline constexpr int64_t kLinearCudaDirectMaxTokens = 4;

Status linear(const LinearParams& p, Stream stream = {});

namespace cpu {
void linear(const LinearParams& p);
}  // namespace cpu

namespace cuda {
Status linear(const LinearParams& p, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
