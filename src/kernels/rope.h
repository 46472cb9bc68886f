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

struct RopeParams {
  TensorView x;            ///< [T, heads, head_dim] f32, last dim contiguous; rotated in place
  TensorView positions;    ///< [T] i32, host; >= 0
  int64_t rotary_dim = 0;  ///< even, in [2, head_dim]: the first rotary_dim dims rotate
  float theta = 10000.0f;  ///< rope_theta, finite and > 0
};

Status rope(const RopeParams& p, Stream stream = {});

namespace cpu {
void rope(const RopeParams& p);
}  // namespace cpu

}  // namespace hyla::kernels
