// What the GDN and KDA layers share, over the sequences of a LinearMemory: the short conv over
// [q | k | v] and the delta rule, each in its decode form when every sequence has one new token
// (conv window slide, recurrent rule) and its prefill form otherwise (varlen conv, extend).
#pragma once

#include "core/tensor.h"
#include "model/config.h"
#include "model/layer_state.h"

namespace hyla::model {

/// Fresh state of a GDN or KDA layer: conv [1, conv_dim, K-1] and SSM [1, HV, d_v, d_k], zeros.
LayerState linear_new_state(const ModelConfig& config);

/// mixed = silu(causal_conv1d(qkv)) with each sequence's window in its slot; qkv, mixed:
/// [T, conv_dim].
Status short_conv_silu(const TensorView& qkv, const TensorView& conv_weight,
                       const LinearMemory& memory, const TensorView& mixed);

/// o = gated_delta_rule(q, k, v, g, beta) from and back to each sequence's slot (q/k l2norm in
/// the kernel, scale d_k^-1/2). g: [T, HV] (GDN) or [T, HV, d_k] (KDA).
Status delta_rule(const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& g, const TensorView& beta, const LinearMemory& memory,
                  const TensorView& o);

}  // namespace hyla::model
