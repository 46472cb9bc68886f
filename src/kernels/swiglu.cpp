// Entry point of SwiGLU (silu_and_mul): argument checks, then dispatch to the CPU or CUDA body.
#include "kernels/swiglu.h"

#include "core/check.h"

namespace hyla::kernels {

namespace {

Status check_silu_and_mul(const SiluAndMulParams& p) {
  constexpr const char* op = "silu_and_mul";
  HYLA_RETURN_IF_ERROR(check_shape(op, "x", p.x, {kAnyDim, kAnyDim}, "T, 2I"));
  const int64_t T = p.x.size(0), two_I = p.x.size(1);
  if (two_I % 2 != 0)
    return invalid_argument(op, ": x has shape ", p.x.shape_string(),
                            ", expected an even last dim (2I: gate then up)");
  HYLA_RETURN_IF_ERROR(check_shape(op, "y", p.y, {T, two_I / 2}, "T, I"));
  for (const auto& [name, t] : {std::pair{"x", &p.x}, {"y", &p.y}}) {
    HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {DType::kF32}));
    HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, name, *t));
  }
  HYLA_RETURN_IF_ERROR(check_device(op, "y", p.y, p.x.device()));
  if (p.y.raw() == p.x.raw() && T > 1 && p.y.stride(0) != p.x.stride(0))
    return invalid_argument(op, ": y aliases x with row stride ", p.y.stride(0), ", x has ",
                            p.x.stride(0), "; in place needs the same row stride");
  return ok_status();
}

}  // namespace

Status silu_and_mul(const SiluAndMulParams& p, Stream) {
  HYLA_RETURN_IF_ERROR(check_silu_and_mul(p));
  if (p.x.device().is_cuda()) return unsupported("silu_and_mul: no CUDA body yet");
  cpu::silu_and_mul(p);
  return ok_status();
}

}  // namespace hyla::kernels
