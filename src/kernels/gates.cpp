// Entry points of the GDN and KDA gates: argument checks, then dispatch to the CPU or CUDA body.
#include "kernels/gates.h"

#include <cmath>

#include "core/check.h"
#include "kernels/dispatch.h"

namespace hyla::kernels {

namespace {

Status check_gdn_gate(const GdnGateParams& p) {
  constexpr const char* op = "gdn_gate";
  HYLA_RETURN_IF_ERROR(check_shape(op, "a", p.a, {kAnyDim, kAnyDim}, "T, HV"));
  const int64_t T = p.a.size(0), HV = p.a.size(1);
  HYLA_RETURN_IF_ERROR(check_shape(op, "b", p.b, {T, HV}, "T, HV"));
  HYLA_RETURN_IF_ERROR(check_shape(op, "A_log", p.A_log, {HV}, "HV"));
  HYLA_RETURN_IF_ERROR(check_shape(op, "dt_bias", p.dt_bias, {HV}, "HV"));
  HYLA_RETURN_IF_ERROR(check_shape(op, "g", p.g, {T, HV}, "T, HV"));
  HYLA_RETURN_IF_ERROR(check_shape(op, "beta", p.beta, {T, HV}, "T, HV"));
  for (const auto& [name, t] : {std::pair{"a", &p.a}, {"b", &p.b}}) {
    HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {DType::kF32, DType::kBF16}));
  }
  for (const auto& [name, t] :
       {std::pair{"A_log", &p.A_log}, {"dt_bias", &p.dt_bias}, {"g", &p.g}, {"beta", &p.beta}}) {
    HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {DType::kF32}));
  }
  const Device device = p.a.device();
  for (const auto& [name, t] : {std::pair{"a", &p.a},
                                {"b", &p.b},
                                {"A_log", &p.A_log},
                                {"dt_bias", &p.dt_bias},
                                {"g", &p.g},
                                {"beta", &p.beta}}) {
    HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, name, *t));
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
  }
  return ok_status();
}

Status check_kda_gate(const KdaGateParams& p) {
  constexpr const char* op = "kda_gate";
  HYLA_RETURN_IF_ERROR(check_shape(op, "f", p.f, {kAnyDim, kAnyDim, kAnyDim}, "T, H, d_k"));
  const int64_t T = p.f.size(0), H = p.f.size(1), d_k = p.f.size(2);
  HYLA_RETURN_IF_ERROR(check_shape(op, "A_log", p.A_log, {H}, "H"));
  HYLA_RETURN_IF_ERROR(check_shape(op, "dt_bias", p.dt_bias, {H, d_k}, "H, d_k"));
  HYLA_RETURN_IF_ERROR(check_shape(op, "g", p.g, {T, H, d_k}, "T, H, d_k"));
  HYLA_RETURN_IF_ERROR(check_dtype(op, "f", p.f, {DType::kF32, DType::kBF16}));
  for (const auto& [name, t] :
       {std::pair{"A_log", &p.A_log}, {"dt_bias", &p.dt_bias}, {"g", &p.g}}) {
    HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {DType::kF32}));
  }
  const Device device = p.f.device();
  for (const auto& [name, t] :
       {std::pair{"f", &p.f}, {"A_log", &p.A_log}, {"dt_bias", &p.dt_bias}, {"g", &p.g}}) {
    HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, name, *t));
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
  }
  if (p.b.defined() != p.beta.defined())
    return invalid_argument(op, ": b is ", p.b.defined() ? "given" : "missing", " but beta is ",
                            p.beta.defined() ? "given" : "missing",
                            "; pass both (beta = sigmoid(b)) or neither");
  if (p.b.defined()) {
    HYLA_RETURN_IF_ERROR(check_shape(op, "b", p.b, {T, H}, "T, H"));
    HYLA_RETURN_IF_ERROR(check_shape(op, "beta", p.beta, {T, H}, "T, H"));
    HYLA_RETURN_IF_ERROR(check_dtype(op, "b", p.b, {DType::kF32, DType::kBF16}));
    HYLA_RETURN_IF_ERROR(check_dtype(op, "beta", p.beta, {DType::kF32}));
    for (const auto& [name, t] : {std::pair{"b", &p.b}, {"beta", &p.beta}}) {
      HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, name, *t));
      HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
    }
  }
  if (p.lower_bound && !(std::isfinite(*p.lower_bound) && *p.lower_bound <= 0.0f))
    return invalid_argument(op, ": lower_bound is ", *p.lower_bound,
                            ", expected a finite value <= 0 (g is a log-space decay; K3 uses -5)");
  return ok_status();
}

}  // namespace

Status gdn_gate(const GdnGateParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_gdn_gate(p));
  return dispatch(
      "gdn_gate", p.a.device(), stream, [&] { cpu::gdn_gate(p); },
      HYLA_CUDA_BODY(cuda::gdn_gate(p, stream)));
}

Status kda_gate(const KdaGateParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_kda_gate(p));
  return dispatch(
      "kda_gate", p.f.device(), stream, [&] { cpu::kda_gate(p); },
      HYLA_CUDA_BODY(cuda::kda_gate(p, stream)));
}

}  // namespace hyla::kernels
