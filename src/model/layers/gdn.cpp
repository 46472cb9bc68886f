// Gated DeltaNet layer forward (see gdn.h).
#include "model/layers/gdn.h"

#include "kernels/gated_delta_rule_decode.h"
#include "kernels/gated_rmsnorm.h"
#include "kernels/gates.h"
#include "kernels/linear.h"
#include "model/layers/linear_attention.h"

namespace hyla::model {

namespace {

/// Column offsets of the fused projection [q | k | v | z | b | a].
struct GdnLayout {
  int64_t H, HV, d_k, d_v;
  int64_t qk() const { return H * d_k; }
  int64_t value() const { return HV * d_v; }
  int64_t conv_dim() const { return 2 * qk() + value(); }
  int64_t z() const { return conv_dim(); }
  int64_t b() const { return z() + value(); }
  int64_t a() const { return b() + HV; }
  int64_t total() const { return a() + HV; }
};

GdnLayout layout_of(const ModelConfig& c) {
  return {c.linear.num_k_heads, c.linear.num_v_heads, c.linear.head_k_dim, c.linear.head_v_dim};
}

/// A decode step through the fused CUDA kernel (conv, gates, l2norm, delta rule and the gated norm
/// in one call), then the output projection.
Status gdn_fused_decode(const GdnWeights& w, const ModelConfig& config, const GdnLayout& l,
                        const Tensor& proj, const LinearMemory& memory, const TensorView& out) {
  const int64_t T = proj.size(0);
  // qkv / a / b / gate are column ranges of proj, read in place where their rows are aligned.
  const TensorView all = proj.view();
  Tensor held[4];
  HYLA_ASSIGN_OR_RETURN(const TensorView qkv, decode_rows(all.narrow(1, 0, l.conv_dim()), held[0]));
  HYLA_ASSIGN_OR_RETURN(const TensorView a, decode_rows(all.narrow(1, l.a(), l.HV), held[1]));
  HYLA_ASSIGN_OR_RETURN(const TensorView b, decode_rows(all.narrow(1, l.b(), l.HV), held[2]));
  HYLA_ASSIGN_OR_RETURN(
      const TensorView z,
      decode_rows(all.narrow(1, l.z(), l.value()).unflatten_last(l.HV, l.d_v), held[3]));
  Tensor o = Tensor::empty({T, l.HV, l.d_v}, DType::kF32, proj.device());
  kernels::GatedDeltaRuleDecodeParams p;
  p.qkv = qkv;
  p.conv_weight = w.conv;
  p.conv_state = memory.conv_pool;
  p.a = a;
  p.b = b;
  p.A_log = w.A_log;
  p.dt_bias = w.dt_bias;
  p.state_pool = memory.ssm_pool;
  p.slots = memory.slots;
  p.o = o;
  p.norm_weight = w.norm;
  p.norm_gate = z;
  p.norm_eps = config.rms_norm_eps;
  p.norm_act = kernels::GateActivation::kSilu;
  HYLA_RETURN_IF_ERROR(fused_verify_outputs(memory, p));
  HYLA_RETURN_IF_ERROR(kernels::gated_delta_rule_decode(p));
  return kernels::linear(
      {.x = o.view().reshape({T, l.value()}), .weight = w.out_proj, .bias = {}, .y = out});
}

}  // namespace

Status gdn_forward(const GdnWeights& w, const ModelConfig& config, const TensorView& x,
                   const LinearMemory& memory, const TensorView& out) {
  const GdnLayout l = layout_of(config);
  const int64_t T = x.size(0);

  // [q | k | v | z | b | a] = x W_in^T
  const Device device = x.device();
  Tensor proj = Tensor::empty({T, l.total()}, DType::kF32, device);
  HYLA_RETURN_IF_ERROR(kernels::linear({.x = x, .weight = w.in_proj, .bias = {}, .y = proj}));
  HYLA_ASSIGN_OR_RETURN(
      const bool fused,
      use_fused_decode(config, memory, x, {&w.conv, &w.A_log, &w.dt_bias, &w.norm}));
  if (fused) return gdn_fused_decode(w, config, l, proj, memory, out);

  // q, k, v = silu(conv([q | k | v])): the decode step slides the window, prefill runs the conv
  Tensor mixed = Tensor::empty({T, l.conv_dim()}, DType::kF32, device);
  const TensorView qkv_in = proj.view().narrow(1, 0, l.conv_dim());
  HYLA_RETURN_IF_ERROR(short_conv_silu(qkv_in, w.conv, memory, mixed));
  const TensorView q = mixed.view().narrow(1, 0, l.qk()).unflatten_last(l.H, l.d_k);
  const TensorView k = mixed.view().narrow(1, l.qk(), l.qk()).unflatten_last(l.H, l.d_k);
  const TensorView v = mixed.view().narrow(1, 2 * l.qk(), l.value()).unflatten_last(l.HV, l.d_v);

  // g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b)
  Tensor g = Tensor::empty({T, l.HV}, DType::kF32, device);
  Tensor beta = Tensor::empty({T, l.HV}, DType::kF32, device);
  HYLA_RETURN_IF_ERROR(kernels::gdn_gate({.a = proj.view().narrow(1, l.a(), l.HV),
                                          .b = proj.view().narrow(1, l.b(), l.HV),
                                          .A_log = w.A_log,
                                          .dt_bias = w.dt_bias,
                                          .g = g,
                                          .beta = beta}));

  // o = gated_delta_rule(q, k, v, g, beta), state read from and written back to each slot
  Tensor o = Tensor::empty({T, l.HV, l.d_v}, DType::kF32, device);
  HYLA_RETURN_IF_ERROR(delta_rule(q, k, v, g, beta, memory, o));

  // out = (norm_w * rmsnorm(o) * silu(z)) W_out^T
  const TensorView z = proj.view().narrow(1, l.z(), l.value()).unflatten_last(l.HV, l.d_v);
  HYLA_RETURN_IF_ERROR(kernels::gated_rmsnorm({.x = o,
                                               .gate = z,
                                               .weight = w.norm,
                                               .eps = config.rms_norm_eps,
                                               .act = kernels::GateActivation::kSilu,
                                               .y = o}));
  return kernels::linear(
      {.x = o.view().reshape({T, l.value()}), .weight = w.out_proj, .bias = {}, .y = out});
}

}  // namespace hyla::model
