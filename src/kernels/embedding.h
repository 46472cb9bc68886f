// Token embedding lookup (HF nn.Embedding): y[t] = table[ids[t]], widened to f32.
// table [V, H] f32|bf16 (row stride allowed), ids [T] i32 on the kernel's device, y [T, H] f32.
#pragma once

#include "core/tensor.h"

namespace hyla::kernels {

struct EmbeddingParams {
  TensorView table;  ///< [V, H] f32|bf16, last dim contiguous
  /// [T] i32 contiguous, on the kernel's device. CPU calls check every id in [0, V); on CUDA the
  /// values are not read on the host, and a row whose id is outside [0, V) is filled with NaN
  /// (never read out of bounds; the NaN makes the bad id visible in the logits).
  TensorView ids;
  TensorView y;  ///< out [T, H] f32, last dim contiguous
};

Status embedding(const EmbeddingParams& p, Stream stream = {});

namespace cpu {
void embedding(const EmbeddingParams& p);
}  // namespace cpu

namespace cuda {
Status embedding(const EmbeddingParams& p, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
