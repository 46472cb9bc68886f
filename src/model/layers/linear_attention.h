// What the GDN and KDA layers share, for one sequence whose per-layer pools hold one slot (slot 0):
// the short conv over [q | k | v] and the delta rule, each choosing its decode form for a single
// token (conv window slide, recurrent rule) and its prefill form otherwise (conv, extend).
#pragma once

#include "core/tensor.h"
#include "model/layer_state.h"

namespace hyla::model {

/// mixed = silu(causal_conv1d(qkv)) with the window in state.conv_state; qkv, mixed: [T, conv_dim].
Status short_conv_silu(const TensorView& qkv, const TensorView& conv_weight, LayerState& state,
                       const TensorView& mixed);

/// o = gated_delta_rule(q, k, v, g, beta) from and back to state.ssm_state (q/k l2norm in the
/// kernel, scale d_k^-1/2). g: [T, HV] (GDN) or [T, HV, d_k] (KDA).
Status delta_rule(const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& g, const TensorView& beta, LayerState& state,
                  const TensorView& o);

}  // namespace hyla::model
