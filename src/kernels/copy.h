// Strided copy with conversion between two views of the same shape (1 to 4 dims): y = x, each
// side f32|bf16 with any strides (bf16 rounded to nearest even). Attention-Residual snapshots into
// the bank, contiguous copies of narrow views, bf16 casts; a zero stride in x broadcasts it.
#pragma once

#include "core/tensor.h"

namespace hyla::kernels {

/// Most dimensions a copy takes.
inline constexpr int kMaxCopyDims = 4;

struct CopyParams {
  TensorView x;  ///< [...] 1-4 dims f32|bf16, any strides (0 = broadcast)
  /// out, x's shape, f32|bf16, any strides but no zero stride on a dimension of size > 1; y must
  /// not overlap x unless it is x itself (same start, dtype and strides).
  TensorView y;
};

Status copy(const CopyParams& p, Stream stream = {});

namespace cpu {
void copy(const CopyParams& p);
}  // namespace cpu

namespace cuda {
Status copy(const CopyParams& p, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
