// SwiGLU MLP and mixture of experts forward (see mlp.h).
#include "model/layers/mlp.h"

#include "kernels/linear.h"
#include "kernels/moe_align.h"
#include "kernels/moe_combine.h"
#include "kernels/moe_grouped_linear.h"
#include "kernels/moe_route.h"
#include "kernels/rmsnorm.h"
#include "kernels/situ_glu.h"
#include "kernels/swiglu.h"
#include "model/all_reduce.h"

namespace hyla::model {

Status dense_mlp_forward(const DenseMlpWeights& w, const GluActivation& act, const TensorView& x,
                         const TensorView& out) {
  const int64_t T = x.size(0), I = w.down.size(1);
  Tensor gate_up = Tensor::empty({T, 2 * I}, DType::kF32, x.device());
  HYLA_RETURN_IF_ERROR(kernels::linear({.x = x, .weight = w.gate_up, .bias = {}, .y = gate_up}));
  Tensor h = Tensor::empty({T, I}, DType::kF32, x.device());
  HYLA_RETURN_IF_ERROR(
      act.kind == GluKind::kSitu
          ? kernels::situ_glu(
                {.x = gate_up, .beta = act.beta, .linear_beta = act.linear_beta, .y = h})
          : kernels::swiglu({.x = gate_up, .y = h}));
  return kernels::linear({.x = h, .weight = w.down, .bias = {}, .y = out});
}

Status moe_forward(const MoeWeights& w, const ModelConfig& model_config, const TensorView& x,
                   const TensorView& out, Tensor* topk_ids, Tensor* topk_weights,
                   AllReduce* all_reduce) {
  const MoeConfig& config = model_config.moe;
  const GluActivation& act = model_config.mlp_activation;
  const int64_t T = x.size(0), hidden = x.size(1), E = config.num_experts, K = config.top_k;
  // Routing: router logits -> top-k experts and their weights per token.
  const Device device = x.device();
  Tensor logits = Tensor::empty({T, E}, DType::kF32, device);
  HYLA_RETURN_IF_ERROR(kernels::linear({.x = x, .weight = w.router, .bias = {}, .y = logits}));
  Tensor ids = Tensor::empty({T, K}, DType::kI32, device);
  Tensor weights = Tensor::empty({T, K}, DType::kF32, device);
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
  // the hidden width after the combine; otherwise they read x and the combine writes out.
  const bool latent = w.latent_down.defined();
  const int64_t width = latent ? w.latent_down.size(0) : hidden;
  Tensor z, routed;
  TensorView expert_in = x, routed_out = out;
  if (latent) {
    z = Tensor::empty({T, width}, DType::kF32, device);
    HYLA_RETURN_IF_ERROR(kernels::linear({.x = x, .weight = w.latent_down, .bias = {}, .y = z}));
    routed = Tensor::empty({T, width}, DType::kF32, device);
    expert_in = z;
    routed_out = routed;
  }

  // Experts: sort the T * K (token, k) slots by expert (stable by slot), gather their rows into
  // that order, run every expert's MLP on its contiguous block of rows (two grouped projections
  // that read the blocks from the device, the GLU on all rows), then sum the weighted rows back
  // per token (in ascending expert order, fixed on every device).
  const int64_t N = T * K, I = w.experts_down.size(2);
  Tensor offsets = Tensor::empty({E + 1}, DType::kI32, device);
  Tensor sorted_slots = Tensor::empty({N}, DType::kI32, device);
  Tensor slot_positions = Tensor::empty({T, K}, DType::kI32, device);
  HYLA_RETURN_IF_ERROR(kernels::moe_align({.topk_ids = ids,
                                           .num_experts = E,
                                           .expert_offsets = offsets,
                                           .sorted_slots = sorted_slots,
                                           .slot_positions = slot_positions}));
  Tensor expert_x = Tensor::empty({N, width}, DType::kF32, device);
  HYLA_RETURN_IF_ERROR(kernels::moe_permute(
      {.x = expert_in, .sorted_slots = sorted_slots, .top_k = K, .y = expert_x}));
  // the tile table of the CUDA body (both projections have the same rows, one after the other)
  Tensor workspace;
  if (device.is_cuda())
    workspace =
        Tensor::empty({kernels::moe_grouped_linear_workspace_bytes(E, N) / 4}, DType::kI32, device);
  Tensor gate_up = Tensor::empty({N, 2 * I}, DType::kF32, device);
  HYLA_RETURN_IF_ERROR(kernels::moe_grouped_linear({.x = expert_x,
                                                    .weight = w.experts_gate_up,
                                                    .expert_offsets = offsets,
                                                    .workspace = workspace,
                                                    .y = gate_up}));
  Tensor h = Tensor::empty({N, I}, DType::kF32, device);
  HYLA_RETURN_IF_ERROR(
      act.kind == GluKind::kSitu
          ? kernels::situ_glu(
                {.x = gate_up, .beta = act.beta, .linear_beta = act.linear_beta, .y = h})
          : kernels::swiglu({.x = gate_up, .y = h}));
  Tensor expert_y = Tensor::empty({N, width}, DType::kF32, device);
  HYLA_RETURN_IF_ERROR(kernels::moe_grouped_linear({.x = h,
                                                    .weight = w.experts_down,
                                                    .expert_offsets = offsets,
                                                    .workspace = workspace,
                                                    .y = expert_y}));

  // Shared expert(s): always on; Qwen scales them by sigmoid(x . shared_gate).
  Tensor shared, shared_gate;
  if (w.shared.gate_up.defined()) {
    shared = Tensor::empty({T, hidden}, DType::kF32, device);
    HYLA_RETURN_IF_ERROR(dense_mlp_forward(w.shared, act, x, shared));
    if (w.shared_gate.defined()) {
      shared_gate = Tensor::empty({T, 1}, DType::kF32, device);
      HYLA_RETURN_IF_ERROR(
          kernels::linear({.x = x, .weight = w.shared_gate, .bias = {}, .y = shared_gate}));
    }
  }
  const kernels::MoeCombineParams routed_sum = {.expert_out = expert_y,
                                                .slot_positions = slot_positions,
                                                .topk_weights = weights,
                                                .out = routed_out};
  if (!latent) {
    // out = routed sum + shared, in one pass
    kernels::MoeCombineParams combine = routed_sum;
    combine.shared = shared;
    combine.shared_gate = shared_gate;
    HYLA_RETURN_IF_ERROR(kernels::moe_combine(combine));
  } else {
    // Latent MoE: out = rmsnorm(routed) W_up^T (the norm when latent_moe_use_norm), + shared
    HYLA_RETURN_IF_ERROR(kernels::moe_combine(routed_sum));
    const int64_t columns = w.latent_up.size(1);
    const bool sharded = columns != width;
    if (sharded) {  // a rank's experts gave a partial latent: the norm needs the whole sum
      if (all_reduce == nullptr)
        return invalid_argument("moe_forward: a latent MoE sharded to ", columns, " of ", width,
                                " latent columns needs the ranks' all-reduce");
      HYLA_RETURN_IF_ERROR(all_reduce->sum(routed));
    }
    if (w.latent_norm.defined()) {
      HYLA_RETURN_IF_ERROR(kernels::rmsnorm({.x = routed,
                                             .weight = w.latent_norm,
                                             .eps = model_config.rms_norm_eps,
                                             .form = kernels::RmsNormForm::kWeight,
                                             .y = routed}));
    }
    // a rank: its latent columns (its partial of the up projection)
    const TensorView up_in =
        sharded ? routed.view().narrow(1, w.latent_columns_begin, columns) : routed.view();
    HYLA_RETURN_IF_ERROR(
        kernels::linear({.x = up_in, .weight = w.latent_up, .bias = {}, .y = out}));
    if (shared.defined()) {
      HYLA_RETURN_IF_ERROR(kernels::moe_combine(
          {.shared = shared, .shared_gate = shared_gate, .accumulate = true, .out = out}));
    }
  }
  if (topk_ids) *topk_ids = ids;
  if (topk_weights) *topk_weights = weights;
  return ok_status();
}

}  // namespace hyla::model
