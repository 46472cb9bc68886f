// Qwen gated full attention forward (see attention.h).
#include "model/layers/attention.h"

#include "kernels/kv_pages.h"
#include "kernels/linear.h"
#include "kernels/paged_attention.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"

namespace hyla::model {

LayerState attention_new_state(const ModelConfig& config, int64_t capacity) {
  const FullAttentionConfig& a = config.attention;
  LayerState s;
  s.k_cache = Tensor::zeros({capacity, a.num_kv_heads, a.head_dim}, DType::kF32);
  s.v_cache = Tensor::zeros({capacity, a.num_kv_heads, a.head_dim}, DType::kF32);
  return s;
}

Status attention_forward(const AttentionWeights& w, const ModelConfig& config, const TensorView& x,
                         const PagedBatch& batch, const LayerPages& pages, const TensorView& out) {
  const FullAttentionConfig& a = config.attention;
  const int64_t T = x.size(0), nh = a.num_heads, nkv = a.num_kv_heads, hd = a.head_dim;
  const int64_t q_width = nh * hd * (a.output_gate ? 2 : 1), kv_width = nkv * hd;
  const Device device = x.device();

  // [q_h | gate_h]_h, k, v = x W^T
  Tensor proj = Tensor::empty({T, q_width + 2 * kv_width}, DType::kF32, device);
  HYLA_RETURN_IF_ERROR(kernels::linear({.x = x, .weight = w.qkv_proj, .bias = {}, .y = proj}));
  const TensorView q_and_gate =
      proj.view().narrow(1, 0, q_width).unflatten_last(nh, a.output_gate ? 2 * hd : hd);
  const TensorView k_new = proj.view().narrow(1, q_width, kv_width).unflatten_last(nkv, hd);
  const TensorView v_new =
      proj.view().narrow(1, q_width + kv_width, kv_width).unflatten_last(nkv, hd);

  // q, k = per-head RMSNorm, then partial RoPE; k and v then go to the pages
  Tensor q = Tensor::empty({T, nh, hd}, DType::kF32, device);
  Tensor k = Tensor::empty({T, nkv, hd}, DType::kF32, device);
  HYLA_RETURN_IF_ERROR(kernels::rmsnorm({.x = q_and_gate.narrow(2, 0, hd),
                                         .weight = w.q_norm,
                                         .eps = config.rms_norm_eps,
                                         .form = config.norm_form,
                                         .y = q}));
  HYLA_RETURN_IF_ERROR(kernels::rmsnorm({.x = k_new,
                                         .weight = w.k_norm,
                                         .eps = config.rms_norm_eps,
                                         .form = config.norm_form,
                                         .y = k}));
  if (a.rotary_dim > 0) {
    HYLA_RETURN_IF_ERROR(kernels::rope(
        {.x = q, .positions = batch.positions, .rotary_dim = a.rotary_dim, .theta = a.rope_theta}));
    HYLA_RETURN_IF_ERROR(kernels::rope(
        {.x = k, .positions = batch.positions, .rotary_dim = a.rotary_dim, .theta = a.rope_theta}));
  }
  HYLA_RETURN_IF_ERROR(kernels::kv_page_write(
      {.k = k, .k_pages = pages.k, .v = v_new, .v_pages = pages.v, .index = batch.index()}));

  // o = softmax(q k^T / sqrt(hd), causal) v over each sequence's pages, times sigmoid(gate)
  Tensor o = Tensor::empty({T, nh, hd}, DType::kF32, device);
  kernels::PagedAttentionParams attn{
      .q = q,
      .k_pages = pages.k,
      .k_rope_pages = {},
      .v_pages = pages.v,
      .index = batch.index(),
      .scale = 0.0f,
      .gate = a.output_gate ? q_and_gate.narrow(2, hd, hd) : TensorView(),
      .o = o};
  // CUDA decode: the key splits' partial results (stream-ordered, freed with the call)
  Tensor workspace;
  if (const int64_t bytes = kernels::paged_attention_workspace_bytes(attn); bytes > 0) {
    workspace = Tensor::empty({bytes}, DType::kU8, device);
    attn.workspace = workspace;
  }
  HYLA_RETURN_IF_ERROR(kernels::paged_attention(attn));
  return kernels::linear(
      {.x = o.view().reshape({T, nh * hd}), .weight = w.o_proj, .bias = {}, .y = out});
}

}  // namespace hyla::model
