// Entry point of SwiGLU: argument checks, then dispatch to the CPU or CUDA body.
#include "kernels/swiglu.h"

#include "core/check.h"
#include "kernels/dispatch.h"

namespace hyla::kernels {

Status check_glu_layout(std::string_view op, const TensorView& x, const TensorView& y) {
  HYLA_RETURN_IF_ERROR(check_shape(op, "x", x, {kAnyDim, kAnyDim}, "T, 2I"));
  const int64_t T = x.size(0), two_I = x.size(1);
  if (two_I % 2 != 0)
    return invalid_argument(op, ": x has shape ", x.shape_string(),
                            ", expected an even last dim (2I: gate then up)");
  HYLA_RETURN_IF_ERROR(check_shape(op, "y", y, {T, two_I / 2}, "T, I"));
  HYLA_RETURN_IF_ERROR(check_dtype(op, "x", x, {DType::kF32}));
  HYLA_RETURN_IF_ERROR(check_dtype(op, "y", y, {DType::kF32, DType::kBF16}));
  for (const auto& [name, t] : {std::pair{"x", &x}, {"y", &y}})
    HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, name, *t));
  HYLA_RETURN_IF_ERROR(check_device(op, "y", y, x.device()));
  if (y.raw() == x.raw() && y.dtype() != x.dtype())
    return invalid_argument(op, ": y aliases x with dtype ", dtype_name(y.dtype()), ", x has ",
                            dtype_name(x.dtype()), "; in place needs x's dtype");
  if (y.raw() == x.raw() && T > 1 && y.stride(0) != x.stride(0))
    return invalid_argument(op, ": y aliases x with row stride ", y.stride(0), ", x has ",
                            x.stride(0), "; in place needs the same row stride");
  return ok_status();
}

Status swiglu(const SwigluParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_glu_layout("swiglu", p.x, p.y));
  return dispatch(
      "swiglu", p.x.device(), stream, [&] { cpu::swiglu(p); },
      HYLA_CUDA_BODY(cuda::swiglu(p, stream)));
}

}  // namespace hyla::kernels
