// Multi-head latent attention forward without RoPE (latent_attention.h; HF KimiLinearAttention).
// The pages keep the normed latent c and k_pe per token; every call gathers each sequence's latent
// rows and expands them through kv_b_proj (the plain, non-absorbed form: simple, O(past) work per
// call), then attends with the expanded rows as one page per sequence.
#include "model/layers/latent_attention.h"

#include <cmath>

#include "kernels/kv_pages.h"
#include "kernels/linear.h"
#include "kernels/paged_attention.h"
#include "kernels/rmsnorm.h"

namespace hyla::model {

LayerState latent_attention_new_state(const ModelConfig& config, int64_t capacity) {
  const LatentAttentionConfig& m = config.latent;
  LayerState s;
  s.k_cache = Tensor::zeros({capacity, 1, m.kv_lora_rank + m.qk_rope_head_dim}, DType::kF32);
  return s;
}

Status latent_attention_forward(const LatentAttentionWeights& w, const ModelConfig& config,
                                const TensorView& x, const PagedBatch& batch,
                                const LayerPages& pages, const TensorView& out) {
  const LatentAttentionConfig& m = config.latent;
  const int64_t T = x.size(0), nh = m.num_heads, nope = m.qk_nope_head_dim,
                rope = m.qk_rope_head_dim, d_qk = nope + rope, d_v = m.v_head_dim,
                rank = m.kv_lora_rank, row = rank + rope;
  const int64_t B = batch.past.size(0), R = batch.max_length;
  const Device device = x.device();

  // q = x W_q^T, or rmsnorm(x W_qa^T) W_qb^T with a q LoRA; viewed [T, nh, nope + rope]
  Tensor q = Tensor::empty({T, nh * d_qk}, DType::kF32, device);
  if (m.q_lora_rank == 0) {
    HYLA_RETURN_IF_ERROR(kernels::linear({.x = x, .weight = w.q_proj, .bias = {}, .y = q}));
  } else {
    Tensor cq = Tensor::empty({T, m.q_lora_rank}, DType::kF32, device);
    HYLA_RETURN_IF_ERROR(kernels::linear({.x = x, .weight = w.q_a_proj, .bias = {}, .y = cq}));
    HYLA_RETURN_IF_ERROR(kernels::rmsnorm({.x = cq,
                                           .weight = w.q_a_norm,
                                           .eps = m.kv_a_norm_eps,
                                           .form = kernels::RmsNormForm::kWeight,
                                           .y = cq}));
    HYLA_RETURN_IF_ERROR(kernels::linear({.x = cq, .weight = w.q_b_proj, .bias = {}, .y = q}));
  }

  // [c | k_pe] = x W_kva^T; c = rmsnorm(c) in place; the rows [c | k_pe] go to the latent pages
  // (k_pe never rotated)
  Tensor ckv = Tensor::empty({T, row}, DType::kF32, device);
  HYLA_RETURN_IF_ERROR(kernels::linear({.x = x, .weight = w.kv_a_proj, .bias = {}, .y = ckv}));
  const TensorView c_new = ckv.view().narrow(1, 0, rank);
  HYLA_RETURN_IF_ERROR(kernels::rmsnorm({.x = c_new,
                                         .weight = w.kv_a_norm,
                                         .eps = m.kv_a_norm_eps,
                                         .form = kernels::RmsNormForm::kWeight,
                                         .y = c_new}));
  HYLA_RETURN_IF_ERROR(kernels::kv_page_write({.k = ckv.view().reshape({T, 1, row}),
                                               .k_pages = pages.k,
                                               .v = {},
                                               .v_pages = {},
                                               .index = batch.index()}));

  // Every sequence's latent rows, one padded block of R rows each: latent [B, R, 1, row]
  // (zeros after a sequence's past + n rows), then [k_nope | v]_h = c W_kvb^T for all of them.
  Tensor latent = Tensor::empty({B, R, 1, row}, DType::kF32, device);
  HYLA_RETURN_IF_ERROR(
      kernels::kv_page_gather({.pages = pages.k, .index = batch.index(), .out = latent}));
  Tensor kv = Tensor::empty({B * R, nh * (nope + d_v)}, DType::kF32, device);
  HYLA_RETURN_IF_ERROR(kernels::linear({.x = latent.view().reshape({B * R, row}).narrow(1, 0, rank),
                                        .weight = w.kv_b_proj,
                                        .bias = {},
                                        .y = kv}));

  // The padded blocks act as pages of R rows, sequence b's being page b: keys [k_nope_h | k_pe]
  // (k_pe shared by every head), values v_h.
  const TensorView kv_pages = kv.view().reshape({B, R, nh, nope + d_v});
  const kernels::PageIndex blocks{batch.cu_seqlens, batch.past, batch.own_page};

  // K3: o *= sigmoid(x W_g^T) (the gate reads x, not o)
  Tensor gate;
  if (m.output_gate) {
    gate = Tensor::empty({T, nh * d_v}, DType::kF32, device);
    HYLA_RETURN_IF_ERROR(kernels::linear({.x = x, .weight = w.g_proj, .bias = {}, .y = gate}));
  }

  // o = softmax(q k^T (nope + rope)^-1/2, causal) v, times the gate
  Tensor o = Tensor::empty({T, nh, d_v}, DType::kF32, device);
  kernels::PagedAttentionParams attn{
      .q = q.view().unflatten_last(nh, d_qk),
      .k_pages = kv_pages.narrow(3, 0, nope),
      .k_rope_pages = latent.view().narrow(3, rank, rope),
      .v_pages = kv_pages.narrow(3, nope, d_v),
      .index = blocks,
      .scale = 1.0f / std::sqrt(float(d_qk)),
      .gate = gate.defined() ? gate.view().unflatten_last(nh, d_v) : TensorView(),
      .o = o};
  // CUDA decode: the key splits' partial results (stream-ordered, freed with the call)
  Tensor workspace;
  if (const int64_t bytes = kernels::paged_attention_workspace_bytes(attn); bytes > 0) {
    workspace = Tensor::empty({bytes}, DType::kU8, device);
    attn.workspace = workspace;
  }
  HYLA_RETURN_IF_ERROR(kernels::paged_attention(attn));

  // out = o W_o^T
  return kernels::linear(
      {.x = o.view().reshape({T, nh * d_v}), .weight = w.o_proj, .bias = {}, .y = out});
}

}  // namespace hyla::model
