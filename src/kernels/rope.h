// Partial rotary position embedding, NeoX ("rotate_half") form, applied in place (HF
// Qwen3NextRotaryEmbedding + apply_rotary_pos_emb with partial_rotary_factor).
//   inv_freq[i] = 1 / theta^(2i / rotary_dim),   i in [0, rotary_dim / 2)
//   angle       = pos * inv_freq[i]
//   x1 = x[i], x2 = x[i + rotary_dim/2]:
//     x[i] = x1 cos - x2 sin,   x[i + rotary_dim/2] = x2 cos + x1 sin
// Dims [rotary_dim, head_dim) pass through. inv_freq, the angle and its cos / sin are computed in
// fp32 exactly as HF does (not in double), so large positions round the angle the same way.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace hyla::kernels {

/// inv_freq[i] = 1 / theta^(2i / rotary_dim) in fp32, as HF: 1.0 / (theta ** (arange(0, dim, 2)
/// .float() / dim)). Both bodies take it from here (the CUDA body's table is computed on the
/// host), so their angles agree bit for bit.
float rope_inv_freq(float theta, int64_t rotary_dim, int64_t i);

/// The largest rotary_dim the CUDA body takes (its inv_freq table travels in the kernel's
/// parameters).
inline constexpr int64_t kRopeCudaMaxRotaryDim = 512;

struct RopeParams {
  TensorView x;  ///< [T, heads, head_dim] f32, last dim contiguous; rotated in place
  /// [T] i32 on x's device, >= 0 (checked on the host for CPU calls only: no device sync)
  TensorView positions;
  int64_t rotary_dim = 0;  ///< even, in [2, head_dim]: the first rotary_dim dims rotate
  float theta = 10000.0f;  ///< rope_theta, finite and > 0
};

Status rope(const RopeParams& p, Stream stream = {});

namespace cpu {
void rope(const RopeParams& p);
}  // namespace cpu

namespace cuda {
Status rope(const RopeParams& p, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
