// Entry point of the rotary embedding: argument checks, then dispatch to the CPU or CUDA body.
#include "kernels/rope.h"

#include <cmath>

#include "core/check.h"
#include "kernels/dispatch.h"

namespace hyla::kernels {

float rope_inv_freq(float theta, int64_t rotary_dim, int64_t i) {
  return 1.0f / std::pow(theta, float(2 * i) / float(rotary_dim));
}

namespace {

Status check_rope(const RopeParams& p) {
  constexpr const char* op = "rope";
  HYLA_RETURN_IF_ERROR(
      check_shape(op, "x", p.x, {kAnyDim, kAnyDim, kAnyDim}, "T, heads, head_dim"));
  const int64_t T = p.x.size(0), head_dim = p.x.size(2);
  HYLA_RETURN_IF_ERROR(check_dtype(op, "x", p.x, {DType::kF32}));
  HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, "x", p.x));
  HYLA_RETURN_IF_ERROR(check_shape(op, "positions", p.positions, {T}, "T"));
  HYLA_RETURN_IF_ERROR(check_dtype(op, "positions", p.positions, {DType::kI32}));
  HYLA_RETURN_IF_ERROR(check_device(op, "positions", p.positions, p.x.device()));
  if (p.rotary_dim < 2 || p.rotary_dim > head_dim || p.rotary_dim % 2 != 0)
    return invalid_argument(op, ": rotary_dim is ", p.rotary_dim,
                            ", expected an even value in [2, head_dim = ", head_dim, "]");
  HYLA_RETURN_IF_ERROR(check_positive_finite(op, "theta", p.theta));
  if (!p.x.device().is_cpu()) return ok_status();
  const int32_t* positions = p.positions.host<int32_t>();
  for (int64_t t = 0; t < T; ++t) {
    const int32_t pos = positions[t * p.positions.stride(0)];
    if (pos < 0) return out_of_range(op, ": positions[", t, "] is ", pos, ", expected >= 0");
  }
  return ok_status();
}

}  // namespace

Status rope(const RopeParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_rope(p));
  return dispatch(
      "rope", p.x.device(), stream, [&] { cpu::rope(p); }, HYLA_CUDA_BODY(cuda::rope(p, stream)));
}

}  // namespace hyla::kernels
