// Entry points of the elementwise activations and l2norm: argument checks, then dispatch to the CPU
// or CUDA body.
#include "kernels/activations.h"

#include <string>

#include "core/check.h"
#include "kernels/dispatch.h"

namespace hyla::kernels {

namespace {

std::string activation_op_name(Activation act) {
  switch (act) {
    case Activation::kSigmoid: return "activation(sigmoid)";
    case Activation::kSoftplus: return "activation(softplus)";
    case Activation::kSilu: return "activation(silu)";
  }
  return "activation";
}

/// Checks shared by every elementwise op: x is 1-4 dims, y has x's shape, both float with a
/// contiguous last dimension on one device, and y aliases x only exactly.
Status check_elementwise(std::string_view op, const TensorView& x, const TensorView& y) {
  if (!x.defined()) return invalid_argument(op, ": x is missing");
  if (x.ndim() < 1 || x.ndim() > 4)
    return invalid_argument(op, ": x has shape ", x.shape_string(), ", expected 1 to 4 dims");
  if (!y.defined()) return invalid_argument(op, ": y is missing");
  bool same_shape = y.ndim() == x.ndim();
  for (int d = 0; same_shape && d < x.ndim(); ++d) same_shape = y.size(d) == x.size(d);
  if (!same_shape)
    return invalid_argument(op, ": y has shape ", y.shape_string(), ", expected ", x.shape_string(),
                            " (the shape of x)");
  for (const auto& [name, t] : {std::pair{"x", &x}, {"y", &y}}) {
    HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {DType::kF32, DType::kBF16, DType::kF16}));
    HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, name, *t));
  }
  HYLA_RETURN_IF_ERROR(check_device(op, "y", y, x.device()));
  return check_in_place(op, "y", y, "x", x);
}

}  // namespace

Status l2norm(const TensorView& x, const TensorView& y, float eps, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_elementwise("l2norm", x, y));
  HYLA_RETURN_IF_ERROR(check_positive_finite("l2norm", "eps", eps, "keeps zero rows finite"));
  return dispatch(
      "l2norm", x.device(), stream, [&] { cpu::l2norm(x, y, eps); },
      HYLA_CUDA_BODY(cuda::l2norm(x, y, eps, stream)));
}

Status activation(Activation act, const TensorView& x, const TensorView& y, Stream stream) {
  if (act != Activation::kSigmoid && act != Activation::kSoftplus && act != Activation::kSilu)
    return invalid_argument("activation: act is ", int(act),
                            ", expected kSigmoid, kSoftplus or kSilu");
  const std::string op = activation_op_name(act);
  HYLA_RETURN_IF_ERROR(check_elementwise(op, x, y));
  return dispatch(
      "activation", op, x.device(), stream, [&] { cpu::activation(act, x, y); },
      HYLA_CUDA_BODY(cuda::activation(act, x, y, stream)));
}

}  // namespace hyla::kernels
