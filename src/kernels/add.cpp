// Entry point of the scaled residual add: argument checks, then dispatch to the CPU or CUDA body.
#include "kernels/add.h"

#include <cmath>

#include "core/check.h"
#include "kernels/dispatch.h"

namespace hyla::kernels {

namespace {

Status check_add(const AddParams& p) {
  constexpr const char* op = "add";
  HYLA_RETURN_IF_ERROR(check_shape(op, "y", p.y, {kAnyDim, kAnyDim}, "T, W"));
  const int64_t T = p.y.size(0), W = p.y.size(1);
  HYLA_RETURN_IF_ERROR(check_shape(op, "x", p.x, {T, W}, "T, W (as y)"));
  const Device device = p.y.device();
  for (const auto& [name, t] : {std::pair{"x", &p.x}, {"y", &p.y}}) {
    HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {DType::kF32}));
    HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, name, *t));
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
  }
  HYLA_RETURN_IF_ERROR(check_in_place(op, "y", p.y, "x", p.x));
  if (p.gate.defined()) {
    HYLA_RETURN_IF_ERROR(check_shape(op, "gate", p.gate, {T}, "T"));
    HYLA_RETURN_IF_ERROR(check_dtype(op, "gate", p.gate, {DType::kF32}));
    HYLA_RETURN_IF_ERROR(check_device(op, "gate", p.gate, device));
  }
  if (!std::isfinite(p.scale))
    return invalid_argument(op, ": scale is ", p.scale, ", expected a finite value");
  return ok_status();
}

}  // namespace

Status add(const AddParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_add(p));
  return dispatch(
      "add", p.y.device(), stream, [&] { cpu::add(p); }, HYLA_CUDA_BODY(cuda::add(p, stream)));
}

}  // namespace hyla::kernels
