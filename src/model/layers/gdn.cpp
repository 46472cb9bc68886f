// Gated DeltaNet layer forward (see gdn.h).
#include "model/layers/gdn.h"

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

}  // namespace

Status gdn_forward(const GdnWeights& w, const ModelConfig& config, const TensorView& x,
                   const LinearMemory& memory, const TensorView& out) {
  const GdnLayout l = layout_of(config);
  const int64_t T = x.size(0);

  // [q | k | v | z | b | a] = x W_in^T
  Tensor proj = Tensor::empty({T, l.total()}, DType::kF32);
  HYLA_RETURN_IF_ERROR(kernels::linear({.x = x, .weight = w.in_proj, .bias = {}, .y = proj}));

  // q, k, v = silu(conv([q | k | v])): the decode step slides the window, prefill runs the conv
  Tensor mixed = Tensor::empty({T, l.conv_dim()}, DType::kF32);
  const TensorView qkv_in = proj.view().narrow(1, 0, l.conv_dim());
  HYLA_RETURN_IF_ERROR(short_conv_silu(qkv_in, w.conv, memory, mixed));
  const TensorView q = mixed.view().narrow(1, 0, l.qk()).unflatten_last(l.H, l.d_k);
  const TensorView k = mixed.view().narrow(1, l.qk(), l.qk()).unflatten_last(l.H, l.d_k);
  const TensorView v = mixed.view().narrow(1, 2 * l.qk(), l.value()).unflatten_last(l.HV, l.d_v);

  // g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b)
  Tensor g = Tensor::empty({T, l.HV}, DType::kF32);
  Tensor beta = Tensor::empty({T, l.HV}, DType::kF32);
  HYLA_RETURN_IF_ERROR(kernels::gdn_gate({.a = proj.view().narrow(1, l.a(), l.HV),
                                          .b = proj.view().narrow(1, l.b(), l.HV),
                                          .A_log = w.A_log,
                                          .dt_bias = w.dt_bias,
                                          .g = g,
                                          .beta = beta}));

  // o = gated_delta_rule(q, k, v, g, beta), state read from and written back to each slot
  Tensor o = Tensor::empty({T, l.HV, l.d_v}, DType::kF32);
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
