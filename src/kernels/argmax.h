// Greedy pick over rows of logits, with the finiteness census the engine reports:
//   ids[b]         = the lowest v with logits[b, v] == max over the row, NaN counted as -inf
//                    (an all -inf / NaN row gives 0): exactly runtime::Sampler's greedy rule
//   non_finite[b]  = #{v : logits[b, v] is NaN or +-inf}
//   first_bad[b]   = the lowest such v, or -1
//   first_bad_value[b] = logits[b, first_bad[b]] (optional; 0 when there is none)
// On CUDA this keeps the [B, vocab] logits on the device: only 3 B ints come back per step.
#pragma once

#include "core/tensor.h"

namespace hyla::kernels {

struct ArgmaxParams {
  TensorView logits;             ///< [B, V] f32, V >= 1, last dim contiguous (row stride allowed)
  TensorView ids;                ///< out [B] i32 (any stride)
  TensorView non_finite;         ///< out [B] i32 (any stride)
  TensorView first_bad;          ///< out [B] i32 (any stride)
  TensorView first_bad_value{};  ///< optional out [B] f32 (any stride)
};

Status argmax(const ArgmaxParams& p, Stream stream = {});

namespace cpu {
void argmax(const ArgmaxParams& p);
}  // namespace cpu

namespace cuda {
Status argmax(const ArgmaxParams& p, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
