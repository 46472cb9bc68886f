// Entry point of the strided copy: argument checks, then dispatch to the CPU or CUDA body.
#include "kernels/copy.h"

#include "core/check.h"
#include "kernels/dispatch.h"

namespace hyla::kernels {

namespace {

Status check_copy(const CopyParams& p) {
  constexpr const char* op = "copy";
  if (!p.x.defined()) return invalid_argument(op, ": x is missing");
  if (!p.y.defined()) return invalid_argument(op, ": y is missing");
  if (p.x.ndim() < 1 || p.x.ndim() > kMaxCopyDims)
    return invalid_argument(op, ": x has shape ", p.x.shape_string(), ", expected 1 to ",
                            kMaxCopyDims, " dims");
  bool same_shape = p.y.ndim() == p.x.ndim();
  for (int d = 0; same_shape && d < p.x.ndim(); ++d) same_shape = p.y.size(d) == p.x.size(d);
  if (!same_shape)
    return invalid_argument(op, ": y has shape ", p.y.shape_string(), ", expected ",
                            p.x.shape_string(), " (the shape of x)");
  for (int d = 0; d < p.y.ndim(); ++d)
    if (p.y.size(d) > 1 && p.y.stride(d) == 0)
      return invalid_argument(op, ": y has stride 0 in dimension ", d, " of size ", p.y.size(d),
                              " (several elements would be written to one place)");
  const Device device = p.x.device();
  for (const auto& [name, t] : {std::pair{"x", &p.x}, {"y", &p.y}}) {
    HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {DType::kF32, DType::kBF16}));
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
  }
  return check_in_place(op, "y", p.y, "x", p.x);
}

}  // namespace

Status copy(const CopyParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_copy(p));
  return dispatch(
      "copy", p.x.device(), stream, [&] { cpu::copy(p); }, HYLA_CUDA_BODY(cuda::copy(p, stream)));
}

}  // namespace hyla::kernels
