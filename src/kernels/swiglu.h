// SwiGLU activation of a fused gate/up projection (HF: act_fn(gate_proj(x)) * up_proj(x), and the
// experts' gate_up_proj(x).chunk(2)):
//   y[t, i] = silu(x[t, i]) * x[t, I + i],   gate = x[:, :I], up = x[:, I:]
// fp32 compute.
#pragma once

#include <string_view>

#include "core/tensor.h"

namespace hyla::kernels {

struct SiluAndMulParams {
  TensorView x;  ///< [T, 2I] f32: gate = x[:, :I], up = x[:, I:]; last dim contiguous
  /// out [T, I] f32, last dim contiguous; may be x's gate half in place (same data pointer and
  /// row stride)
  TensorView y;
};

Status silu_and_mul(const SiluAndMulParams& p, Stream stream = {});

/// The fused gate/up layout every GLU entry takes (silu_and_mul, situ_and_mul): x [T, 2I] and
/// y [T, I], f32, last dims contiguous, same device; y may be x's gate half in place only with
/// x's row stride.
Status check_glu_layout(std::string_view op, const TensorView& x, const TensorView& y);

namespace cpu {
void silu_and_mul(const SiluAndMulParams& p);
}  // namespace cpu

}  // namespace hyla::kernels
