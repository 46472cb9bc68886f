// Qwen gated full attention forward (see attention.h).
#include "model/layers/attention.h"

#include <cstring>

#include "kernels/attention.h"
#include "kernels/linear.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/scalar_math.h"

namespace hyla::model {

LayerState attention_new_state(const ModelConfig& config, int64_t capacity) {
  const FullAttentionConfig& a = config.attention;
  LayerState s;
  s.k_cache = Tensor::zeros({capacity, a.num_kv_heads, a.head_dim}, DType::kF32);
  s.v_cache = Tensor::zeros({capacity, a.num_kv_heads, a.head_dim}, DType::kF32);
  return s;
}

Status attention_forward(const AttentionWeights& w, const ModelConfig& config, const TensorView& x,
                         int64_t past, LayerState& state, const TensorView& out) {
  const FullAttentionConfig& a = config.attention;
  const int64_t T = x.size(0), nh = a.num_heads, nkv = a.num_kv_heads, hd = a.head_dim;
  const int64_t q_width = nh * hd * (a.output_gate ? 2 : 1), kv_width = nkv * hd;
  if (past + T > state.k_cache.size(0))
    return out_of_range("attention: ", past + T, " tokens exceed the KV cache capacity ",
                        state.k_cache.size(0));

  // [q_h | gate_h]_h, k, v = x W^T
  Tensor proj = Tensor::empty({T, q_width + 2 * kv_width}, DType::kF32);
  HYLA_RETURN_IF_ERROR(kernels::linear({.x = x, .weight = w.qkv_proj, .bias = {}, .y = proj}));
  const TensorView q_and_gate =
      proj.view().narrow(1, 0, q_width).unflatten_last(nh, a.output_gate ? 2 * hd : hd);
  const TensorView k_new = proj.view().narrow(1, q_width, kv_width).unflatten_last(nkv, hd);
  const TensorView v_new = proj.view().narrow(1, q_width + kv_width, kv_width);

  // q, k = per-head RMSNorm, then partial RoPE; k and v go straight into the cache rows
  Tensor q = Tensor::empty({T, nh, hd}, DType::kF32);
  const TensorView k = state.k_cache.view().slice(past, past + T);
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
  for (int64_t t = 0; t < T; ++t)
    std::memcpy(state.v_cache.data<float>() + (past + t) * kv_width,
                v_new.data<float>() + t * v_new.stride(0), size_t(kv_width) * sizeof(float));
  Tensor positions = Tensor::empty({T}, DType::kI32);
  for (int64_t t = 0; t < T; ++t) positions.data<int32_t>()[t] = int32_t(past + t);
  if (a.rotary_dim > 0) {
    HYLA_RETURN_IF_ERROR(kernels::rope(
        {.x = q, .positions = positions, .rotary_dim = a.rotary_dim, .theta = a.rope_theta}));
    HYLA_RETURN_IF_ERROR(kernels::rope(
        {.x = k, .positions = positions, .rotary_dim = a.rotary_dim, .theta = a.rope_theta}));
  }

  // o = softmax(q k^T / sqrt(hd), causal) v, then o *= sigmoid(gate)
  Tensor o = Tensor::empty({T, nh, hd}, DType::kF32);
  HYLA_RETURN_IF_ERROR(kernels::attention({.q = q,
                                           .k_cache = state.k_cache,
                                           .v_cache = state.v_cache,
                                           .past = past,
                                           .scale = 0.0f,
                                           .o = o}));
  if (a.output_gate) {
    const TensorView gate = q_and_gate.narrow(2, hd, hd);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < nh; ++h) {
        const float* gt = gate.data<float>() + t * gate.stride(0) + h * gate.stride(1);
        float* ot = o.data<float>() + (t * nh + h) * hd;
        for (int64_t i = 0; i < hd; ++i) ot[i] *= kernels::sigmoid(gt[i]);
      }
  }
  return kernels::linear(
      {.x = o.view().reshape({T, nh * hd}), .weight = w.o_proj, .bias = {}, .y = out});
}

}  // namespace hyla::model
