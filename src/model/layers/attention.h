// Qwen gated full attention (HF Qwen3NextAttention):
//   [q_h | gate_h]_h, k, v = x W^T                     q_proj viewed [heads, 2 head_dim]
//   q, k = rmsnorm_(1+w)(q), rmsnorm_(1+w)(k)           per head, before RoPE
//   q, k = partial NeoX RoPE (first rotary_dim dims)
//   o = softmax(q k^T * head_dim^-1/2, causal) v        GQA, KV cache per sequence
//   out = (o * sigmoid(gate)) W_o^T
#pragma once

#include "core/tensor.h"
#include "model/config.h"
#include "model/layer_state.h"

namespace hyla::model {

struct AttentionWeights {
  /// [nh hd (2 with the output gate) + 2 nkv hd, hidden]: rows [q_0 | gate_0 | q_1 | gate_1 | ... |
  /// k | v]
  Tensor qkv_proj;
  Tensor q_norm;  ///< [head_dim]
  Tensor k_norm;  ///< [head_dim]
  Tensor o_proj;  ///< [hidden, nh hd]
};

/// KV cache [capacity, nkv, hd] for k and v, zeros.
LayerState attention_new_state(const ModelConfig& config, int64_t capacity);

/// x: [T, hidden] f32 (already normed) at positions past .. past+T-1; out: [T, hidden] f32.
Status attention_forward(const AttentionWeights& w, const ModelConfig& config, const TensorView& x,
                         int64_t past, LayerState& state, const TensorView& out);

}  // namespace hyla::model
