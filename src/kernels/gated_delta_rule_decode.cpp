// Entry points of the fused decode / verify step and the commit: argument checks, then dispatch
// to the CPU or CUDA body.
#include "kernels/gated_delta_rule_decode.h"

#include <cmath>
#include <vector>

#include "core/check.h"
#include "kernels/dispatch.h"

namespace hyla::kernels {

namespace {

/// Index tensors are read on the host only for CPU calls (no synchronisation on CUDA).
Status check_index(std::string_view op, std::string_view name, const TensorView& t, int64_t batch,
                   Device device) {
  HYLA_RETURN_IF_ERROR(check_shape(op, name, t, {batch}, "B"));
  HYLA_RETURN_IF_ERROR(check_dtype(op, name, t, {DType::kI32}));
  HYLA_RETURN_IF_ERROR(check_device(op, name, t, device));
  return check_contiguous(op, name, t);
}

/// qkv, a, b, norm_gate: contiguous, or a row-strided view (the model's narrow views of one fused
/// projection [T, total]): rows (dim 0) any distance apart, contiguous within a row, and every row
/// starting 16-byte aligned (the vector loads of the CUDA kernels; a stride multiply per row).
Status check_rows(std::string_view op, std::string_view name, const TensorView& t) {
  if (t.is_contiguous()) return ok_status();
  int64_t row_elems = 1;
  for (int d = t.ndim() - 1; d >= 1; --d) {
    if (t.size(d) != 1 && t.stride(d) != row_elems)
      return invalid_argument(op, ": ", name, " ", t.shape_string(),
                              " must be contiguous within a row (only its rows may be strided): ",
                              "dim ", d, " has stride ", t.stride(d), ", expected ", row_elems);
    row_elems *= t.size(d);
  }
  if (t.stride(0) < row_elems)
    return invalid_argument(op, ": ", name, " ", t.shape_string(), " has row stride ", t.stride(0),
                            ", expected at least the row's ", row_elems,
                            " elements (rows may not overlap)");
  const int64_t row_bytes = t.stride(0) * dtype_size(t.dtype());
  const auto start = reinterpret_cast<uintptr_t>(t.raw());
  if (start % 16 != 0 || row_bytes % 16 != 0)
    return invalid_argument(op, ": ", name, " is a row-strided view whose rows do not start ",
                            "16-byte aligned (first row at address % 16 = ", start % 16, ", rows ",
                            row_bytes, " bytes apart); expected 16-byte aligned rows ",
                            "or a contiguous tensor");
  return ok_status();
}

/// Geometry shared by decode and commit, read off state_pool [slots, HV, d_v, d_k] and
/// qkv [B T, conv_dim].
struct StepGeometry {
  int64_t T, B, num_slots, HV, d_v, d_k, conv_dim;
};

Status check_step_geometry(std::string_view op, int64_t T, const TensorView& state_pool,
                           const TensorView& qkv, StepGeometry* g) {
  if (T < 1 || T > kMaxDecodeTokens)
    return invalid_argument(op, ": tokens_per_seq is ", T, ", expected 1 to ", kMaxDecodeTokens);
  HYLA_RETURN_IF_ERROR(check_shape(op, "state_pool", state_pool,
                                   {kAnyDim, kAnyDim, kAnyDim, kAnyDim}, "slots, HV, d_v, d_k"));
  HYLA_RETURN_IF_ERROR(check_shape(op, "qkv", qkv, {kAnyDim, kAnyDim}, "B T, conv_dim"));
  if (qkv.size(0) % T != 0)
    return invalid_argument(op, ": qkv has ", qkv.size(0), " rows, not a multiple of T = ", T);
  *g = {T,
        qkv.size(0) / T,
        state_pool.size(0),
        state_pool.size(1),
        state_pool.size(2),
        state_pool.size(3),
        qkv.size(1)};
  return ok_status();
}

}  // namespace

DecodeShape decode_shape(const GatedDeltaRuleDecodeParams& p) {
  DecodeShape s{};
  s.T = p.tokens_per_seq;
  s.B = p.qkv.size(0) / s.T;
  s.HV = p.state_pool.size(1);
  s.d_v = p.state_pool.size(2);
  s.d_k = p.state_pool.size(3);
  s.conv_dim = p.qkv.size(1);
  s.H = (s.conv_dim - s.HV * s.d_v) / (2 * s.d_k);
  s.kda = p.a.ndim() == 3;
  return s;
}

DecodeWorkspaceLayout decode_workspace_layout(const DecodeShape& s) {
  DecodeWorkspaceLayout l;
  l.qk = 0;
  l.v = s.H * 2 * s.d_k;
  l.decay = l.v + s.HV * s.d_v;
  l.beta = l.decay + s.HV * (s.kda ? s.d_k : 1);
  l.floats = (l.beta + s.HV + 3) / 4 * 4;
  return l;
}

int64_t gated_delta_rule_decode_workspace_bytes(const DecodeShape& s) {
  return s.B * decode_workspace_layout(s).floats * int64_t(sizeof(float));
}

Status check_gated_delta_rule_decode(const GatedDeltaRuleDecodeParams& p) {
  constexpr std::string_view op = "gated_delta_rule_decode";
  StepGeometry geo;
  HYLA_RETURN_IF_ERROR(check_step_geometry(op, p.tokens_per_seq, p.state_pool, p.qkv, &geo));
  const auto [T, B, num_slots, HV, d_v, d_k, conv_dim] = geo;
  const int64_t qk_dims = conv_dim - HV * d_v;
  if (d_k <= 0 || qk_dims <= 0 || qk_dims % (2 * d_k) != 0 || HV % (qk_dims / (2 * d_k)) != 0)
    return invalid_argument(op, ": qkv has ", conv_dim, " channels; with HV = ", HV,
                            ", d_v = ", d_v, ", d_k = ", d_k,
                            " it must be 2 H d_k + HV d_v for some H dividing HV");
  HYLA_RETURN_IF_ERROR(
      check_shape(op, "conv_weight", p.conv_weight, {conv_dim, kAnyDim}, "conv_dim, K"));
  const int64_t K = p.conv_weight.size(1);
  if (K < 2 || K > 4) return unsupported(op, ": conv kernel K = ", K, ", supported: 2 to 4");
  HYLA_RETURN_IF_ERROR(check_shape(op, "conv_state", p.conv_state, {num_slots, conv_dim, K - 1},
                                   "slots (as state_pool), conv_dim, K-1"));
  const bool kda = p.a.defined() && p.a.ndim() == 3;
  if (kda) {
    HYLA_RETURN_IF_ERROR(check_shape(op, "a", p.a, {B * T, HV, d_k}, "B T, HV, d_k (KDA f)"));
    HYLA_RETURN_IF_ERROR(check_shape(op, "dt_bias", p.dt_bias, {HV, d_k}, "HV, d_k"));
  } else {
    HYLA_RETURN_IF_ERROR(check_shape(op, "a", p.a, {B * T, HV}, "B T, HV (GDN a)"));
    HYLA_RETURN_IF_ERROR(check_shape(op, "dt_bias", p.dt_bias, {HV}, "HV"));
    if (p.lower_bound) return invalid_argument(op, ": lower_bound (safe gate) is KDA only");
  }
  if (p.lower_bound && !(std::isfinite(*p.lower_bound) && *p.lower_bound <= 0.0f))
    return invalid_argument(op, ": lower_bound is ", *p.lower_bound,
                            ", expected a finite value <= 0");
  HYLA_RETURN_IF_ERROR(check_shape(op, "b", p.b, {B * T, HV}, "B T, HV"));
  HYLA_RETURN_IF_ERROR(check_shape(op, "A_log", p.A_log, {HV}, "HV"));
  HYLA_RETURN_IF_ERROR(check_shape(op, "o", p.o, {B * T, HV, d_v}, "B T, HV, d_v"));
  const Device device = p.qkv.device();
  for (const auto& [name, t] : {std::pair{"qkv", &p.qkv}, {"a", &p.a}, {"b", &p.b}, {"o", &p.o}}) {
    HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {DType::kF32, DType::kBF16}));
    HYLA_RETURN_IF_ERROR(t == &p.o ? check_contiguous(op, name, *t) : check_rows(op, name, *t));
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
  }
  for (const auto& [name, t] :
       {std::pair{"conv_weight", &p.conv_weight}, {"A_log", &p.A_log}, {"dt_bias", &p.dt_bias}}) {
    HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {DType::kF32}));
    HYLA_RETURN_IF_ERROR(check_contiguous(op, name, *t));
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
  }
  for (const auto& [name, t] :
       {std::pair{"conv_state", &p.conv_state}, {"state_pool", &p.state_pool}}) {
    HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {DType::kF32, DType::kBF16}));
    HYLA_RETURN_IF_ERROR(check_contiguous(op, name, *t));
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
  }
  HYLA_RETURN_IF_ERROR(check_index(op, "slots", p.slots, B, device));
  if (p.commit && p.step_states.defined())
    return invalid_argument(op, ": step_states is the verify output (commit = false)");
  if (!p.commit) {
    HYLA_RETURN_IF_ERROR(
        check_shape(op, "step_states", p.step_states, {B, T, HV, d_v, d_k}, "B, T, HV, d_v, d_k"));
    HYLA_RETURN_IF_ERROR(check_dtype(op, "step_states", p.step_states, {p.state_pool.dtype()}));
    HYLA_RETURN_IF_ERROR(check_contiguous(op, "step_states", p.step_states));
    HYLA_RETURN_IF_ERROR(check_device(op, "step_states", p.step_states, device));
  }
  if (p.norm_weight.defined()) {
    HYLA_RETURN_IF_ERROR(check_shape(op, "norm_weight", p.norm_weight, {d_v}, "d_v"));
    HYLA_RETURN_IF_ERROR(check_dtype(op, "norm_weight", p.norm_weight, {DType::kF32}));
    HYLA_RETURN_IF_ERROR(check_contiguous(op, "norm_weight", p.norm_weight));
    HYLA_RETURN_IF_ERROR(check_device(op, "norm_weight", p.norm_weight, device));
    HYLA_RETURN_IF_ERROR(
        check_shape(op, "norm_gate", p.norm_gate, {B * T, HV, d_v}, "B T, HV, d_v"));
    HYLA_RETURN_IF_ERROR(check_dtype(op, "norm_gate", p.norm_gate, {DType::kF32, DType::kBF16}));
    HYLA_RETURN_IF_ERROR(check_rows(op, "norm_gate", p.norm_gate));
    HYLA_RETURN_IF_ERROR(check_device(op, "norm_gate", p.norm_gate, device));
    if (!(p.norm_eps > 0.0f)) return invalid_argument(op, ": norm_eps must be > 0");
  }
  if (!(p.scale >= 0.0f)) return invalid_argument(op, ": scale is ", p.scale, ", expected >= 0");
  if (p.arrivals.defined()) {
    const int64_t H = qk_dims / (2 * d_k);
    HYLA_RETURN_IF_ERROR(check_shape(op, "arrivals", p.arrivals, {B, H}, "B, H"));
    HYLA_RETURN_IF_ERROR(check_dtype(op, "arrivals", p.arrivals, {DType::kI32}));
    HYLA_RETURN_IF_ERROR(check_contiguous(op, "arrivals", p.arrivals));
    HYLA_RETURN_IF_ERROR(check_device(op, "arrivals", p.arrivals, device));
  }
  if (p.workspace.defined()) {
    HYLA_RETURN_IF_ERROR(check_dtype(op, "workspace", p.workspace, {DType::kF32}));
    HYLA_RETURN_IF_ERROR(check_contiguous(op, "workspace", p.workspace));
    HYLA_RETURN_IF_ERROR(check_device(op, "workspace", p.workspace, device));
    const int64_t need = gated_delta_rule_decode_workspace_bytes(decode_shape(p));
    const int64_t have = p.workspace.numel() * int64_t(sizeof(float));
    if (have < need)
      return invalid_argument(op, ": workspace holds ", have, " bytes, expected at least ", need,
                              " (gated_delta_rule_decode_workspace_bytes)");
    if (reinterpret_cast<uintptr_t>(p.workspace.raw()) % 16 != 0)
      return invalid_argument(op, ": workspace is not 16-byte aligned");
  }
  if (device.is_cpu()) {
    HYLA_RETURN_IF_ERROR(check_slots(op, "slots", p.slots, B, num_slots));
    if (p.commit)
      HYLA_RETURN_IF_ERROR(check_slot_ownership(op, p.slots, "slots", p.slots, "slots", num_slots));
  }
  return ok_status();
}

Status check_gated_delta_rule_commit(const GatedDeltaRuleCommitParams& p) {
  constexpr std::string_view op = "gated_delta_rule_commit";
  StepGeometry geo;
  HYLA_RETURN_IF_ERROR(check_step_geometry(op, p.tokens_per_seq, p.state_pool, p.qkv, &geo));
  const auto [T, B, num_slots, HV, d_v, d_k, conv_dim] = geo;
  HYLA_RETURN_IF_ERROR(check_shape(op, "conv_state", p.conv_state, {num_slots, conv_dim, kAnyDim},
                                   "slots, conv_dim, K-1"));
  HYLA_RETURN_IF_ERROR(
      check_shape(op, "step_states", p.step_states, {B, T, HV, d_v, d_k}, "B, T, HV, d_v, d_k"));
  HYLA_RETURN_IF_ERROR(check_dtype(op, "step_states", p.step_states, {p.state_pool.dtype()}));
  const Device device = p.qkv.device();
  for (const auto& [name, t] : {std::pair{"qkv", &p.qkv},
                                {"conv_state", &p.conv_state},
                                {"state_pool", &p.state_pool},
                                {"step_states", &p.step_states}}) {
    HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {DType::kF32, DType::kBF16}));
    HYLA_RETURN_IF_ERROR(t == &p.qkv ? check_rows(op, name, *t) : check_contiguous(op, name, *t));
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
  }
  HYLA_RETURN_IF_ERROR(check_index(op, "slots", p.slots, B, device));
  HYLA_RETURN_IF_ERROR(check_index(op, "accepted", p.accepted, B, device));
  if (device.is_cpu()) {
    HYLA_RETURN_IF_ERROR(check_slots(op, "slots", p.slots, B, num_slots));
    for (int64_t b = 0; b < B; ++b) {
      const int32_t n = p.accepted.data<int32_t>()[b];
      if (n < 0 || n > T)
        return out_of_range(op, ": accepted[", b, "] = ", n, " is outside [0, ", T, "]");
    }
    // a slot is written by at most one sequence: the ones that accept tokens
    std::vector<int32_t> writers(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b)
      writers[size_t(b)] = p.accepted.data<int32_t>()[b] > 0 ? p.slots.data<int32_t>()[b] : -1;
    HYLA_RETURN_IF_ERROR(check_slot_ownership(op, TensorView(), "slots",
                                              TensorView(writers.data(), DType::kI32, {B}), "slots",
                                              num_slots));
  }
  return ok_status();
}

Status gated_delta_rule_decode(const GatedDeltaRuleDecodeParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_gated_delta_rule_decode(p));
  return dispatch(
      "gated_delta_rule_decode", p.qkv.device(), stream, [&] { cpu::gated_delta_rule_decode(p); },
      HYLA_CUDA_BODY(cuda::gated_delta_rule_decode(p, stream)));
}

Status gated_delta_rule_commit(const GatedDeltaRuleCommitParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_gated_delta_rule_commit(p));
  return dispatch(
      "gated_delta_rule_commit", p.qkv.device(), stream, [&] { cpu::gated_delta_rule_commit(p); },
      HYLA_CUDA_BODY(cuda::gated_delta_rule_commit(p, stream)));
}

}  // namespace hyla::kernels
