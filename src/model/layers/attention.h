// Qwen gated full attention (HF Qwen3NextAttention):
//   [q_h | gate_h]_h, k, v = x W^T                     q_proj viewed [heads, 2 head_dim]
//   q, k = rmsnorm_(1+w)(q), rmsnorm_(1+w)(k)           per head, before RoPE
//   q, k = partial NeoX RoPE (first rotary_dim dims)
//   o = softmax(q k^T * head_dim^-1/2, causal) v        GQA, over each sequence's KV pages
//   out = (o * sigmoid(gate)) W_o^T
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "model/batch.h"
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

/// One layer's pages: full attention k and v [pages, page_size, nkv, hd]; MLA the latent in k
/// ([pages, page_size, 1, kv_lora_rank + rope]) and v undefined.
struct LayerPages {
  TensorView k;
  TensorView v;
};

/// KV cache [capacity, nkv, hd] for k and v, zeros.
LayerState attention_new_state(const ModelConfig& config, int64_t capacity);

/// x: [T, hidden] f32 (already normed), the batch's new tokens packed; their k and v go to the
/// pages, then each attends over its sequence's pages; out: [T, hidden] f32. `batch`: the step's
/// page indices (batch.h), built once per step by the forward.
Status attention_forward(const AttentionWeights& w, const ModelConfig& config, const TensorView& x,
                         const PagedBatch& batch, const LayerPages& pages, const TensorView& out);

}  // namespace hyla::model
