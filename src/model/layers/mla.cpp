// Multi-head latent attention forward without RoPE (see mla.h; HF KimiLinearAttention).
// The cache keeps the normed latent c and k_pe per token; every call expands the latents of all
// cached rows through kv_b_proj (the plain, non-absorbed form: simple, O(past) work per call).
#include "model/layers/mla.h"

#include <cmath>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/linear.h"
#include "kernels/rmsnorm.h"
#include "kernels/scalar_math.h"

namespace hyla::model {

LayerState latent_attention_new_state(const ModelConfig& config, int64_t capacity) {
  const LatentAttentionConfig& m = config.latent;
  LayerState s;
  s.k_cache = Tensor::zeros({capacity, 1, m.kv_lora_rank + m.qk_rope_head_dim}, DType::kF32);
  return s;
}

Status latent_attention_forward(const LatentAttentionWeights& w, const ModelConfig& config,
                                const TensorView& x, int64_t past, LayerState& state,
                                const TensorView& out) {
  const LatentAttentionConfig& m = config.latent;
  const int64_t T = x.size(0), nh = m.num_heads, nope = m.qk_nope_head_dim,
                rope = m.qk_rope_head_dim, d_qk = nope + rope, d_v = m.v_head_dim,
                rank = m.kv_lora_rank, row = rank + rope, capacity = state.k_cache.size(0);
  const int64_t S = past + T;  // cached rows after this call
  if (S > capacity)
    return out_of_range("latent_attention: ", S, " tokens exceed the latent cache capacity ",
                        capacity);

  // q = x W_q^T, or rmsnorm(x W_qa^T) W_qb^T with a q LoRA; viewed [T, nh, nope + rope]
  Tensor q = Tensor::empty({T, nh * d_qk}, DType::kF32);
  if (m.q_lora_rank == 0) {
    HYLA_RETURN_IF_ERROR(kernels::linear({.x = x, .weight = w.q_proj, .bias = {}, .y = q}));
  } else {
    Tensor cq = Tensor::empty({T, m.q_lora_rank}, DType::kF32);
    HYLA_RETURN_IF_ERROR(kernels::linear({.x = x, .weight = w.q_a_proj, .bias = {}, .y = cq}));
    HYLA_RETURN_IF_ERROR(kernels::rmsnorm({.x = cq,
                                           .weight = w.q_a_norm,
                                           .eps = m.kv_a_norm_eps,
                                           .form = kernels::RmsNormForm::kWeight,
                                           .y = cq}));
    HYLA_RETURN_IF_ERROR(kernels::linear({.x = cq, .weight = w.q_b_proj, .bias = {}, .y = q}));
  }

  // [c | k_pe] = x W_kva^T; the cache rows past .. S-1 get [rmsnorm(c) | k_pe] (k_pe never rotated)
  Tensor ckv = Tensor::empty({T, row}, DType::kF32);
  HYLA_RETURN_IF_ERROR(kernels::linear({.x = x, .weight = w.kv_a_proj, .bias = {}, .y = ckv}));
  const TensorView cache = state.k_cache.view().reshape({capacity, row});
  HYLA_RETURN_IF_ERROR(kernels::rmsnorm({.x = ckv.view().narrow(1, 0, rank),
                                         .weight = w.kv_a_norm,
                                         .eps = m.kv_a_norm_eps,
                                         .form = kernels::RmsNormForm::kWeight,
                                         .y = cache.slice(past, S).narrow(1, 0, rank)}));
  for (int64_t t = 0; t < T; ++t)
    std::memcpy(cache.data<float>() + (past + t) * row + rank, ckv.data<float>() + t * row + rank,
                size_t(rope) * sizeof(float));

  // [k_nope | v]_h = c W_kvb^T for every cached row; k_h = [k_nope_h | k_pe]
  Tensor kv = Tensor::empty({S, nh * (nope + d_v)}, DType::kF32);
  HYLA_RETURN_IF_ERROR(kernels::linear(
      {.x = cache.slice(0, S).narrow(1, 0, rank), .weight = w.kv_b_proj, .bias = {}, .y = kv}));
  Tensor k = Tensor::empty({S, nh, d_qk}, DType::kF32);
  for (int64_t s = 0; s < S; ++s) {
    const float* k_pe = cache.data<float>() + s * row + rank;
    for (int64_t h = 0; h < nh; ++h) {
      float* dst = k.data<float>() + (s * nh + h) * d_qk;
      std::memcpy(dst, kv.data<float>() + (s * nh + h) * (nope + d_v),
                  size_t(nope) * sizeof(float));
      std::memcpy(dst + nope, k_pe, size_t(rope) * sizeof(float));
    }
  }
  const TensorView v = kv.view().unflatten_last(nh, nope + d_v).narrow(2, nope, d_v);

  // o = softmax(q k^T (nope + rope)^-1/2, causal) v
  Tensor o = Tensor::empty({T, nh, d_v}, DType::kF32);
  HYLA_RETURN_IF_ERROR(kernels::attention({.q = q.view().unflatten_last(nh, d_qk),
                                           .k_cache = k,
                                           .v_cache = v,
                                           .past = past,
                                           .scale = 1.0f / std::sqrt(float(d_qk)),
                                           .o = o}));

  // K3: o *= sigmoid(x W_g^T) (the gate reads x, not o)
  if (m.output_gate) {
    Tensor gate = Tensor::empty({T, nh * d_v}, DType::kF32);
    HYLA_RETURN_IF_ERROR(kernels::linear({.x = x, .weight = w.g_proj, .bias = {}, .y = gate}));
    float* o_data = o.data<float>();
    const float* gate_data = gate.data<float>();
    for (int64_t i = 0; i < T * nh * d_v; ++i) o_data[i] *= kernels::sigmoid(gate_data[i]);
  }

  // out = o W_o^T
  return kernels::linear(
      {.x = o.view().reshape({T, nh * d_v}), .weight = w.o_proj, .bias = {}, .y = out});
}

}  // namespace hyla::model
