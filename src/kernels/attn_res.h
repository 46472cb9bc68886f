// Attention Residuals (Kimi K3 Block AttnRes, Kimi K3 Technical Report §2.2; the reference's
// _apply_attn_res): each sublayer input is a softmax mixture, per token, over the candidates
// rows = [block snapshots 0 .. n-1, the running partial sum of the current block]:
//   score_j = (rows_j * rsqrt(mean(rows_j^2) + eps)) . cw     (RMSNorm without weight, then the
//                                                              folded score vector)
//   p = softmax_j(score);   y = sum_j p_j rows_j               (the raw, un-normalised rows)
// cw = res_norm.weight * res_proj.weight, folded once at load. fp32 compute; n = 0 gives y = the
// partial sum exactly.
#pragma once

#include "core/tensor.h"

namespace hyla::kernels {

struct AttnResParams {
  /// [T, n, d] f32 (n >= 1), last dim contiguous: block snapshots, e.g. the first n rows of a
  /// bank [T, NB, d]; undefined for n = 0 (the partial sum is the only candidate)
  TensorView blocks;
  TensorView partial;  ///< [T, d] f32, last dim contiguous: the current block's running sum
  TensorView cw;       ///< [d] f32 | bf16: the folded score vector
  float eps = 1e-5f;   ///< > 0: the score's RMSNorm eps (rms_norm_eps)
  TensorView y;        ///< out [T, d] f32, last dim contiguous; must not overlap the inputs
  /// optional out [T, n + 1] f32: the mixture weights p, blocks first, the partial sum last
  TensorView probs = {};
};

Status attn_res(const AttnResParams& p, Stream stream = {});

namespace cpu {
void attn_res(const AttnResParams& p);
}  // namespace cpu

namespace cuda {
Status attn_res(const AttnResParams& p, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
