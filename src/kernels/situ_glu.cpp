// Entry point of SiTU-GLU (situ_and_mul): argument checks, then dispatch to the CPU body.
#include "kernels/situ_glu.h"

#include <cmath>

#include "core/check.h"

namespace hyla::kernels {

namespace {

Status check_situ_and_mul(const SituAndMulParams& p) {
  constexpr const char* op = "situ_and_mul";
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
  for (const auto& [name, value] : {std::pair{"beta", p.beta}, {"linear_beta", p.linear_beta}})
    if (!(value > 0.0f) || !std::isfinite(value))
      return invalid_argument(op, ": ", name, " is ", value, ", expected a finite value > 0");
  return ok_status();
}

}  // namespace

Status situ_and_mul(const SituAndMulParams& p, Stream) {
  HYLA_RETURN_IF_ERROR(check_situ_and_mul(p));
  if (p.x.device().is_cuda()) return unsupported("situ_and_mul: no CUDA body yet");
  cpu::situ_and_mul(p);
  return ok_status();
}

}  // namespace hyla::kernels
