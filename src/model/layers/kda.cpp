// Kimi Delta Attention layer forward (see kda.h; HF KimiDeltaAttention, SGLang
// KimiK3DeltaAttention). Three GEMMs read x: [q | k | v (| g)] (the wide one), [f_a | b] (two
// narrow ones merged) and, for the low-rank output gate, g_a. Single tokens slide the conv window
// and run the recurrent rule; longer inputs run the prefill conv and the extend rule (chunked for
// long inputs).
#include "model/layers/kda.h"

#include "kernels/gated_delta_rule_decode.h"
#include "kernels/gated_rmsnorm.h"
#include "kernels/gates.h"
#include "kernels/linear.h"
#include "model/layers/linear_attention.h"

namespace hyla::model {

namespace {

/// Column offsets of the fused projection [q | k | v | g] (g only with the full-rank gate) and of
/// [f_a | b].
struct KdaLayout {
  int64_t H, d, rank;
  bool full_rank_gate;
  int64_t P() const { return H * d; }  // projection width of one of q, k, v, g
  int64_t conv_dim() const { return 3 * P(); }
  int64_t g() const { return conv_dim(); }
  int64_t proj() const { return conv_dim() + (full_rank_gate ? P() : 0); }
  int64_t b() const { return rank; }
  int64_t fa_b() const { return rank + H; }
};

KdaLayout layout_of(const ModelConfig& c) {
  return {c.linear.num_k_heads, c.linear.head_k_dim, c.linear.gate_rank,
          c.linear.full_rank_output_gate};
}

}  // namespace

Status kda_forward(const KdaWeights& w, const ModelConfig& config, const TensorView& x,
                   const LinearMemory& memory, const TensorView& out) {
  const KdaLayout l = layout_of(config);
  const int64_t T = x.size(0);
  const Device device = x.device();

  // [q | k | v (| g)] = x W_qkv(g)^T
  Tensor proj = Tensor::empty({T, l.proj()}, DType::kF32, device);
  HYLA_RETURN_IF_ERROR(kernels::linear({.x = x, .weight = w.qkv_proj, .bias = {}, .y = proj}));

  // [f_a x | b] = x [W_fa | W_b]^T;  f = (f_a x) W_fb^T
  Tensor fa_b = Tensor::empty({T, l.fa_b()}, DType::kF32, device);
  HYLA_RETURN_IF_ERROR(kernels::linear({.x = x, .weight = w.fa_b, .bias = {}, .y = fa_b}));
  Tensor f = Tensor::empty({T, l.P()}, DType::kF32, device);
  HYLA_RETURN_IF_ERROR(kernels::linear(
      {.x = fa_b.view().narrow(1, 0, l.rank), .weight = w.f_b, .bias = {}, .y = f}));

  // gate = x W_g^T (full rank, from the fused projection) or (x W_ga^T) W_gb^T (low rank)
  Tensor low_rank_gate;
  TensorView gate;
  if (l.full_rank_gate) {
    gate = proj.view().narrow(1, l.g(), l.P());
  } else {
    Tensor g_a = Tensor::empty({T, l.rank}, DType::kF32, device);
    HYLA_RETURN_IF_ERROR(kernels::linear({.x = x, .weight = w.g_a, .bias = {}, .y = g_a}));
    low_rank_gate = Tensor::empty({T, l.P()}, DType::kF32, device);
    HYLA_RETURN_IF_ERROR(
        kernels::linear({.x = g_a, .weight = w.g_b, .bias = {}, .y = low_rank_gate}));
    gate = low_rank_gate;
  }

  Tensor o = Tensor::empty({T, l.H, l.d}, DType::kF32, device);
  HYLA_ASSIGN_OR_RETURN(
      const bool fused,
      use_fused_decode(config, memory, x, {&w.conv, &w.A_log, &w.dt_bias, &w.o_norm}));
  if (fused) {
    // conv, gates, l2norm, delta rule and the gated norm in one call; qkv / b / gate are column
    // ranges, read in place where their rows are aligned.
    Tensor held[3];
    HYLA_ASSIGN_OR_RETURN(const TensorView qkv,
                          decode_rows(proj.view().narrow(1, 0, l.conv_dim()), held[0]));
    HYLA_ASSIGN_OR_RETURN(const TensorView b,
                          decode_rows(fa_b.view().narrow(1, l.b(), l.H), held[1]));
    HYLA_ASSIGN_OR_RETURN(const TensorView norm_gate,
                          decode_rows(gate.unflatten_last(l.H, l.d), held[2]));
    kernels::GatedDeltaRuleDecodeParams p;
    p.qkv = qkv;
    p.conv_weight = w.conv;
    p.conv_state = memory.conv_pool;
    p.a = f.view().unflatten_last(l.H, l.d);
    p.b = b;
    p.A_log = w.A_log;
    p.dt_bias = w.dt_bias;
    p.lower_bound = config.linear.gate_lower_bound;
    p.state_pool = memory.ssm_pool;
    p.slots = memory.slots;
    p.o = o;
    p.norm_weight = w.o_norm;
    p.norm_gate = norm_gate;
    p.norm_eps = config.rms_norm_eps;
    p.norm_act = kernels::GateActivation::kSigmoid;
    HYLA_RETURN_IF_ERROR(fused_verify_outputs(memory, p));
    HYLA_RETURN_IF_ERROR(kernels::gated_delta_rule_decode(p));
  } else {
    // q, k, v = silu(conv([q | k | v])): the decode step slides the window, prefill runs the conv
    Tensor mixed = Tensor::empty({T, l.conv_dim()}, DType::kF32, device);
    const TensorView qkv_in = proj.view().narrow(1, 0, l.conv_dim());
    HYLA_RETURN_IF_ERROR(short_conv_silu(qkv_in, w.conv, memory, mixed));
    const TensorView q = mixed.view().narrow(1, 0, l.P()).unflatten_last(l.H, l.d);
    const TensorView k = mixed.view().narrow(1, l.P(), l.P()).unflatten_last(l.H, l.d);
    const TensorView v = mixed.view().narrow(1, 2 * l.P(), l.P()).unflatten_last(l.H, l.d);

    // g = -exp(A_log[h]) softplus(f + dt_bias) per key channel (or the safe gate),
    // beta = sigmoid(b)
    Tensor g = Tensor::empty({T, l.H, l.d}, DType::kF32, device);
    Tensor beta = Tensor::empty({T, l.H}, DType::kF32, device);
    HYLA_RETURN_IF_ERROR(kernels::kda_gate({.f = f.view().unflatten_last(l.H, l.d),
                                            .A_log = w.A_log,
                                            .dt_bias = w.dt_bias,
                                            .lower_bound = config.linear.gate_lower_bound,
                                            .g = g,
                                            .b = fa_b.view().narrow(1, l.b(), l.H),
                                            .beta = beta}));

    // o = gated_delta_rule(q, k, v, g, beta), state read from and written back to each slot
    HYLA_RETURN_IF_ERROR(delta_rule(q, k, v, g, beta, memory, o));

    // o = o_norm_w * rmsnorm(o) * sigmoid(gate)
    HYLA_RETURN_IF_ERROR(kernels::gated_rmsnorm({.x = o,
                                                 .gate = gate.unflatten_last(l.H, l.d),
                                                 .weight = w.o_norm,
                                                 .eps = config.rms_norm_eps,
                                                 .act = kernels::GateActivation::kSigmoid,
                                                 .y = o}));
  }
  // out = o W_o^T
  return kernels::linear(
      {.x = o.view().reshape({T, l.P()}), .weight = w.o_proj, .bias = {}, .y = out});
}

}  // namespace hyla::model
