// Row gather: y[i] = x[index[i]] (each sequence's last token before the lm_head, a permutation of
// tokens). x [N, W] and y [M, W] f32|bf16 (converted, rounded to nearest even), index [M] i32.
#pragma once

#include "core/tensor.h"

namespace hyla::kernels {

struct GatherRowsParams {
  TensorView x;  ///< [N, W] f32|bf16, last dim contiguous
  /// [M] i32 contiguous, on the kernel's device. CPU calls check every index in [0, N); on CUDA
  /// the values are not read on the host, and a row whose index is outside [0, N) is filled with
  /// NaN (never read out of bounds).
  TensorView index;
  TensorView y;  ///< out [M, W] f32|bf16, last dim contiguous; must not overlap x
};

Status gather_rows(const GatherRowsParams& p, Stream stream = {});

namespace cpu {
void gather_rows(const GatherRowsParams& p);
}  // namespace cpu

namespace cuda {
Status gather_rows(const GatherRowsParams& p, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
