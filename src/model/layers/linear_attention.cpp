// Short conv and delta rule shared by the GDN and KDA layers (see linear_attention.h).
#include "model/layers/linear_attention.h"

#include "kernels/causal_conv1d.h"
#include "kernels/gated_delta_rule.h"

namespace hyla::model {

namespace {

/// The sequence's slot in the layer's pools, and cu_seqlens of one sequence of T tokens.
struct OneSequence {
  Tensor slot = Tensor::zeros({1}, DType::kI32);
  Tensor cu = Tensor::zeros({2}, DType::kI32);
  explicit OneSequence(int64_t T) { cu.data<int32_t>()[1] = int32_t(T); }
};

}  // namespace

Status short_conv_silu(const TensorView& qkv, const TensorView& conv_weight, LayerState& state,
                       const TensorView& mixed) {
  const OneSequence seq(qkv.size(0));
  if (qkv.size(0) == 1) {  // decode: slide the window
    return kernels::causal_conv1d_update({.x = qkv,
                                          .weight = conv_weight,
                                          .bias = {},
                                          .conv_state = state.conv_state,
                                          .slots = seq.slot,
                                          .silu = true,
                                          .y = mixed});
  }
  return kernels::causal_conv1d({.x = qkv,
                                 .weight = conv_weight,
                                 .bias = {},
                                 .cu_seqlens = seq.cu,
                                 .conv_state = state.conv_state,
                                 .initial_slots = seq.slot,
                                 .final_slots = seq.slot,
                                 .silu = true,
                                 .y = mixed});
}

Status delta_rule(const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& g, const TensorView& beta, LayerState& state,
                  const TensorView& o) {
  const int64_t T = q.size(0);
  const OneSequence seq(T);
  kernels::GatedDeltaRuleParams p;
  p.q = q;
  p.k = k;
  p.v = v;
  p.g = g;
  p.beta = beta;
  p.cu_seqlens = seq.cu;
  p.state_pool = state.ssm_state;
  p.initial_slots = seq.slot;
  p.final_slots = seq.slot;
  p.use_qk_l2norm = true;
  p.o = o;
  return T == 1 ? kernels::gated_delta_rule_recurrent(p) : kernels::gated_delta_rule_extend(p);
}

}  // namespace hyla::model
