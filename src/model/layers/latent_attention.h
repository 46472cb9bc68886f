// Multi-head latent attention without RoPE (Kimi-Linear; HF KimiLinearAttention, mla_use_nope):
//   q = x W_q^T                                  [heads, nope + rope]
//   (q LoRA: q = rmsnorm(x W_qa^T) W_qb^T, q_a_layernorm with the same eps as kv_a_layernorm)
//   [c | k_pe] = x W_kva^T;  c = rmsnorm(c) (kv_a_layernorm, eps kv_a_norm_eps: 1e-6 as in HF)
//   [k_nope | v]_h = c W_kvb^T                   per head
//   k_h = [k_nope_h | k_pe] (k_pe shared by all heads, never rotated)
//   o = softmax(q k^T * (nope + rope)^-1/2, causal) v;  out = o W_o^T (K3: times sigmoid(x W_g^T))
// Cache: the compressed c (normed) and k_pe per token, in the KV pages.
#pragma once

#include "core/tensor.h"
#include "model/config.h"
#include "model/layer_state.h"
#include "model/layers/attention.h"

namespace hyla::model {

struct LatentAttentionWeights {
  Tensor q_proj;     ///< [nh (nope + rope), hidden] (q_lora_rank = 0)
  Tensor q_a_proj;   ///< [q_lora_rank, hidden] (q_lora_rank > 0)
  Tensor q_a_norm;   ///< [q_lora_rank]
  Tensor q_b_proj;   ///< [nh (nope + rope), q_lora_rank]
  Tensor kv_a_proj;  ///< [kv_lora_rank + rope, hidden]
  Tensor kv_a_norm;  ///< [kv_lora_rank]
  Tensor kv_b_proj;  ///< [nh (nope + v), kv_lora_rank]
  Tensor o_proj;     ///< [hidden, nh v]
  Tensor g_proj;     ///< optional [nh v, hidden] sigmoid output gate (K3)
};

/// Latent cache: k_cache [capacity, 1, kv_lora_rank + rope] holds [c | k_pe] per token.
LayerState latent_attention_new_state(const ModelConfig& config, int64_t capacity);

/// x: [T, hidden] f32 (already normed), the batch's new tokens packed; their latent rows go to
/// pages.k, then each attends over its sequence's latent rows; out: [T, hidden] f32. `batch`: the
/// step's page indices (batch.h), built once per step by the forward.
Status latent_attention_forward(const LatentAttentionWeights& w, const ModelConfig& config,
                                const TensorView& x, const PagedBatch& batch,
                                const LayerPages& pages, const TensorView& out);

}  // namespace hyla::model
