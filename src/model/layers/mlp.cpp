// SwiGLU MLP and mixture of experts forward (see mlp.h).
#include "model/layers/mlp.h"

#include <cstring>

#include "kernels/linear.h"
#include "kernels/moe_route.h"
#include "kernels/rmsnorm.h"
#include "kernels/scalar_math.h"
#include "kernels/situ_glu.h"
#include "kernels/swiglu.h"

namespace hyla::model {

Status dense_mlp_forward(const DenseMlpWeights& w, const GluActivation& act, const TensorView& x,
                         const TensorView& out) {
  const int64_t T = x.size(0), I = w.down.size(1);
  Tensor gate_up = Tensor::empty({T, 2 * I}, DType::kF32);
  HYLA_RETURN_IF_ERROR(kernels::linear({.x = x, .weight = w.gate_up, .bias = {}, .y = gate_up}));
  Tensor h = Tensor::empty({T, I}, DType::kF32);
  HYLA_RETURN_IF_ERROR(
      act.kind == GluKind::kSitu
          ? kernels::situ_and_mul(
                {.x = gate_up, .beta = act.beta, .linear_beta = act.linear_beta, .y = h})
          : kernels::silu_and_mul({.x = gate_up, .y = h}));
  return kernels::linear({.x = h, .weight = w.down, .bias = {}, .y = out});
}

Status moe_forward(const MoeWeights& w, const ModelConfig& model_config, const TensorView& x,
                   const TensorView& out, Tensor* topk_ids, Tensor* topk_weights) {
  const MoeConfig& config = model_config.moe;
  const GluActivation& act = model_config.mlp_activation;
  const int64_t T = x.size(0), hidden = x.size(1), E = config.num_experts, K = config.top_k;
  // Routing: router logits -> top-k experts and their weights per token.
  Tensor logits = Tensor::empty({T, E}, DType::kF32);
  HYLA_RETURN_IF_ERROR(kernels::linear({.x = x, .weight = w.router, .bias = {}, .y = logits}));
  Tensor ids = Tensor::empty({T, K}, DType::kI32);
  Tensor weights = Tensor::empty({T, K}, DType::kF32);
  HYLA_RETURN_IF_ERROR(kernels::moe_route({.logits = logits,
                                           .correction_bias = w.correction_bias,
                                           .scoring = config.scoring == MoeScoringKind::kSoftmax
                                                          ? kernels::MoeScoring::kSoftmax
                                                          : kernels::MoeScoring::kSigmoid,
                                           .top_k = K,
                                           .renormalize = config.renormalize,
                                           .routed_scaling = config.routed_scaling,
                                           .num_groups = config.num_groups,
                                           .topk_groups = config.topk_groups,
                                           .topk_ids = ids,
                                           .topk_weights = weights}));

  // Latent MoE: the routed experts read z = x W_down^T and write a latent sum, brought back to
  // the hidden width after the loop; otherwise they read x and write out directly.
  const bool latent = w.latent_down.defined();
  const int64_t width = latent ? w.latent_down.size(0) : hidden;
  Tensor z, routed;
  TensorView expert_in = x, expert_out = out;
  if (latent) {
    z = Tensor::empty({T, width}, DType::kF32);
    HYLA_RETURN_IF_ERROR(kernels::linear({.x = x, .weight = w.latent_down, .bias = {}, .y = z}));
    routed = Tensor::empty({T, width}, DType::kF32);
    expert_in = z;
    expert_out = routed;
  }

  // Experts: gather each expert's tokens, run its MLP, scatter-add the weighted result.
  for (int64_t t = 0; t < T; ++t)
    std::memset(expert_out.data<float>() + t * expert_out.stride(0), 0,
                size_t(width) * sizeof(float));
  std::vector<int64_t> rows;
  std::vector<float> row_weight;
  for (int64_t e = 0; e < E; ++e) {
    rows.clear();
    row_weight.clear();
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < K; ++j)
        if (ids.data<int32_t>()[t * K + j] == e) {
          rows.push_back(t);
          row_weight.push_back(weights.data<float>()[t * K + j]);
        }
    if (rows.empty()) continue;
    const int64_t n = int64_t(rows.size());
    Tensor xe = Tensor::empty({n, width}, DType::kF32);
    Tensor ye = Tensor::empty({n, width}, DType::kF32);
    for (int64_t r = 0; r < n; ++r)
      std::memcpy(xe.data<float>() + r * width,
                  expert_in.data<float>() + rows[size_t(r)] * expert_in.stride(0),
                  size_t(width) * sizeof(float));
    HYLA_RETURN_IF_ERROR(dense_mlp_forward(w.experts[size_t(e)], act, xe, ye));
    for (int64_t r = 0; r < n; ++r) {
      float* dst = expert_out.data<float>() + rows[size_t(r)] * expert_out.stride(0);
      const float* src = ye.data<float>() + r * width;
      for (int64_t i = 0; i < width; ++i) dst[i] += row_weight[size_t(r)] * src[i];
    }
  }

  // Latent MoE: out = rmsnorm(routed) W_up^T (the norm when latent_moe_use_norm)
  if (latent) {
    if (w.latent_norm.defined()) {
      HYLA_RETURN_IF_ERROR(kernels::rmsnorm({.x = routed,
                                             .weight = w.latent_norm,
                                             .eps = model_config.rms_norm_eps,
                                             .form = kernels::RmsNormForm::kWeight,
                                             .y = routed}));
    }
    HYLA_RETURN_IF_ERROR(
        kernels::linear({.x = routed, .weight = w.latent_up, .bias = {}, .y = out}));
  }

  // Shared expert(s): always on; Qwen scales them by sigmoid(x . shared_gate).
  if (w.shared.gate_up.defined()) {
    Tensor ys = Tensor::empty({T, hidden}, DType::kF32);
    HYLA_RETURN_IF_ERROR(dense_mlp_forward(w.shared, act, x, ys));
    Tensor gate;
    if (w.shared_gate.defined()) {
      gate = Tensor::empty({T, 1}, DType::kF32);
      HYLA_RETURN_IF_ERROR(
          kernels::linear({.x = x, .weight = w.shared_gate, .bias = {}, .y = gate}));
    }
    for (int64_t t = 0; t < T; ++t) {
      const float s = gate.defined() ? kernels::sigmoid(gate.data<float>()[t]) : 1.0f;
      float* dst = out.data<float>() + t * out.stride(0);
      const float* src = ys.data<float>() + t * hidden;
      for (int64_t i = 0; i < hidden; ++i) dst[i] += s * src[i];
    }
  }
  if (topk_ids) *topk_ids = ids;
  if (topk_weights) *topk_weights = weights;
  return ok_status();
}

}  // namespace hyla::model
