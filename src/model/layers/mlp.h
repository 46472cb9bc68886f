// Feed-forward blocks: the gated MLP, down(act(gate(x), up(x))) with act = SwiGLU or K3's
// SiTU-GLU, and the mixture of experts (Qwen: softmax top-k, optional renormalisation,
// sigmoid-gated shared expert; Kimi: sigmoid scores, correction bias for selection only,
// renormalisation, routed scaling, ungated shared experts; K3's latent MoE: routed experts at a
// latent width, see moe_forward).
#pragma once

#include "core/tensor.h"
#include "model/config.h"

namespace hyla::model {

class AllReduce;  // model/all_reduce.h

struct DenseMlpWeights {
  Tensor gate_up;  ///< [2 I, width]: rows [gate | up]
  Tensor down;     ///< [width, I]
};

struct MoeWeights {
  Tensor router;           ///< [E, hidden]
  Tensor correction_bias;  ///< [E], selection only (Kimi); undefined otherwise
  /// Routed experts stacked, width = latent when latent_down is defined, else hidden:
  Tensor experts_gate_up;  ///< [E, 2 I, width]: expert e's rows [gate | up]
  Tensor experts_down;     ///< [E, width, I]
  DenseMlpWeights shared;  ///< shared expert(s) fused; undefined when there are none
  Tensor shared_gate;      ///< [1, hidden] (Qwen); undefined otherwise
  Tensor latent_down;      ///< [latent, hidden] routed_expert_down_proj (K3); undefined otherwise
  Tensor latent_norm;      ///< [latent] routed_expert_norm (latent_moe_use_norm); may be undefined
  Tensor latent_up;        ///< [hidden, latent] routed_expert_up_proj
  /// Tensor parallelism (model/tensor_parallel.h): this rank's latent columns
  /// [latent_columns_begin, + latent_up.size(1)) of the normed routed sum; latent_up holds only
  /// those. 0 with the whole latent_up.
  int64_t latent_columns_begin = 0;
};

/// x: [T, width] f32; out: [T, width] f32.
Status dense_mlp_forward(const DenseMlpWeights& w, const GluActivation& act, const TensorView& x,
                         const TensorView& out);

/// x: [T, hidden] f32; out: [T, hidden] f32. The router reads x; routed experts read x, or with a
/// latent MoE z = x W_down^T and then out = rmsnorm(sum_k w_k expert_k(z)) W_up^T; shared experts
/// read x. topk_ids / topk_weights, when given, receive the routing ([T, top_k] i32 / f32).
/// Runs on x's device (weights there too): route, moe_align, moe_permute, moe_grouped_linear
/// (gate_up) over all experts' row blocks at once, the GLU on all T * top_k rows,
/// moe_grouped_linear (down), moe_combine. The expert offsets stay on the device: no host sync
/// and a fixed number of launches per call, whatever the routing.
/// all_reduce: a tensor-parallel rank's communicator. A latent MoE sharded by expert intermediate
/// (latent_up narrower than the latent) sums its routed latent across the ranks there before the
/// norm, then brings its own latent columns back (a partial output, summed by the caller with the
/// shared expert's); required for such weights, unused otherwise.
Status moe_forward(const MoeWeights& w, const ModelConfig& config, const TensorView& x,
                   const TensorView& out, Tensor* topk_ids = nullptr,
                   Tensor* topk_weights = nullptr, AllReduce* all_reduce = nullptr);

}  // namespace hyla::model
