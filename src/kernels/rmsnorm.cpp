// Entry point of RMSNorm: argument checks, then dispatch to the CPU or CUDA body.
#include "kernels/rmsnorm.h"

#include "core/check.h"
#include "kernels/dispatch.h"

namespace hyla::kernels {

namespace {

Status check_rmsnorm(const RmsNormParams& p) {
  constexpr const char* op = "rmsnorm";
  if (!p.x.defined()) return invalid_argument(op, ": x is missing");
  if (p.x.ndim() < 1 || p.x.ndim() > 4)
    return invalid_argument(op, ": x has shape ", p.x.shape_string(), ", expected 1 to 4 dims");
  const int64_t d = p.x.size(-1);
  HYLA_RETURN_IF_ERROR(check_shape(op, "weight", p.weight, {d}, "d"));
  if (!p.y.defined()) return invalid_argument(op, ": y is missing");
  bool same_shape = p.y.ndim() == p.x.ndim();
  for (int i = 0; same_shape && i < p.x.ndim(); ++i) same_shape = p.y.size(i) == p.x.size(i);
  if (!same_shape)
    return invalid_argument(op, ": y has shape ", p.y.shape_string(), ", expected ",
                            p.x.shape_string(), " (the shape of x)");
  const Device device = p.x.device();
  for (const auto& [name, t] : {std::pair{"x", &p.x}, {"weight", &p.weight}, {"y", &p.y}}) {
    HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {DType::kF32, DType::kBF16}));
    HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, name, *t));
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
  }
  HYLA_RETURN_IF_ERROR(check_in_place(op, "y", p.y, "x", p.x));
  if (p.residual.defined()) {
    bool residual_shape = p.residual.ndim() == p.x.ndim();
    for (int i = 0; residual_shape && i < p.x.ndim(); ++i)
      residual_shape = p.residual.size(i) == p.x.size(i);
    if (!residual_shape)
      return invalid_argument(op, ": residual has shape ", p.residual.shape_string(), ", expected ",
                              p.x.shape_string(), " (the shape of x)");
    HYLA_RETURN_IF_ERROR(check_dtype(op, "residual", p.residual, {DType::kF32}));
    HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, "residual", p.residual));
    HYLA_RETURN_IF_ERROR(check_device(op, "residual", p.residual, device));
    for (const auto& [name, t] : {std::pair{"x", &p.x}, {"y", &p.y}})
      if (spans_overlap(p.residual, *t))
        return invalid_argument(op, ": residual overlaps ", name,
                                "; the residual sum is kept in its own buffer");
  }
  HYLA_RETURN_IF_ERROR(check_positive_finite(op, "eps", p.eps, "keeps zero rows finite"));
  if (p.form != RmsNormForm::kWeight && p.form != RmsNormForm::kOffset)
    return invalid_argument(op, ": form is ", int(p.form), ", expected kWeight or kOffset");
  return ok_status();
}

}  // namespace

Status rmsnorm(const RmsNormParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_rmsnorm(p));
  return dispatch(
      "rmsnorm", p.x.device(), stream, [&] { cpu::rmsnorm(p); },
      HYLA_CUDA_BODY(cuda::rmsnorm(p, stream)));
}

}  // namespace hyla::kernels
