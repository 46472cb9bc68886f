// SwiGLU activation of a fused gate/up projection (HF: act_fn(gate_proj(x)) * up_proj(x), and the
// experts' gate_up_proj(x).chunk(2)):
//   y[t, i] = silu(x[t, i]) * x[t, I + i],   gate = x[:, :I], up = x[:, I:]
// fp32 compute; y is f32, or bf16 (rounded once) to feed a bf16 GEMM.
#pragma once

#include <string_view>

#include "core/tensor.h"

namespace hyla::kernels {

struct SwigluParams {
  TensorView x;  ///< [T, 2I] f32: gate = x[:, :I], up = x[:, I:]; last dim contiguous
  /// out [T, I] f32|bf16, last dim contiguous; an f32 y may be x's gate half in place (same data
  /// pointer and row stride)
  TensorView y;
};

Status swiglu(const SwigluParams& p, Stream stream = {});

/// The fused gate/up layout every GLU entry takes (swiglu, situ_glu): x [T, 2I] f32 and
/// y [T, I] f32|bf16, last dims contiguous, same device; y may be x's gate half in place only
/// with x's dtype and row stride.
Status check_glu_layout(std::string_view op, const TensorView& x, const TensorView& y);

namespace cpu {
void swiglu(const SwigluParams& p);
}  // namespace cpu

namespace cuda {
Status swiglu(const SwigluParams& p, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
