// Entry point of the gated RMSNorm: argument checks, then dispatch to the CPU or CUDA body.
#include "kernels/gated_rmsnorm.h"

#include "core/check.h"
#include "kernels/dispatch.h"

namespace hyla::kernels {

namespace {

Status check_gated_rmsnorm(const GatedRmsNormParams& p) {
  constexpr const char* op = "gated_rmsnorm";
  HYLA_RETURN_IF_ERROR(check_shape(op, "x", p.x, {kAnyDim, kAnyDim, kAnyDim}, "T, HV, d_v"));
  const int64_t T = p.x.size(0), HV = p.x.size(1), d_v = p.x.size(2);
  HYLA_RETURN_IF_ERROR(check_shape(op, "gate", p.gate, {T, HV, d_v}, "T, HV, d_v"));
  HYLA_RETURN_IF_ERROR(check_shape(op, "weight", p.weight, {d_v}, "d_v"));
  HYLA_RETURN_IF_ERROR(check_shape(op, "y", p.y, {T, HV, d_v}, "T, HV, d_v"));
  const Device device = p.x.device();
  for (const auto& [name, t] :
       {std::pair{"x", &p.x}, {"gate", &p.gate}, {"weight", &p.weight}, {"y", &p.y}}) {
    HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {DType::kF32, DType::kBF16}));
    HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, name, *t));
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
  }
  HYLA_RETURN_IF_ERROR(check_in_place(op, "y", p.y, "x", p.x));
  HYLA_RETURN_IF_ERROR(check_positive_finite(op, "eps", p.eps, "keeps zero rows finite"));
  if (p.act != GateActivation::kSilu && p.act != GateActivation::kSigmoid)
    return invalid_argument(op, ": act is ", int(p.act), ", expected kSilu or kSigmoid");
  return ok_status();
}

}  // namespace

Status gated_rmsnorm(const GatedRmsNormParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_gated_rmsnorm(p));
  return dispatch(
      "gated_rmsnorm", p.x.device(), stream, [&] { cpu::gated_rmsnorm(p); },
      HYLA_CUDA_BODY(cuda::gated_rmsnorm(p, stream)));
}

}  // namespace hyla::kernels
