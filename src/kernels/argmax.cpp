// Entry point of the greedy pick: argument checks, then dispatch to the CPU or CUDA body.
#include "kernels/argmax.h"

#include <cstdint>
#include <limits>

#include "core/check.h"
#include "kernels/dispatch.h"

namespace hyla::kernels {

namespace {

Status check_argmax(const ArgmaxParams& p) {
  constexpr const char* op = "argmax";
  HYLA_RETURN_IF_ERROR(check_shape(op, "logits", p.logits, {kAnyDim, kAnyDim}, "B, V"));
  const int64_t B = p.logits.size(0), V = p.logits.size(1);
  if (V < 1) return invalid_argument(op, ": logits has ", V, " columns, expected >= 1");
  if (V > std::numeric_limits<int32_t>::max())
    return invalid_argument(op, ": logits has ", V, " columns, more than int32 token ids hold");
  HYLA_RETURN_IF_ERROR(check_dtype(op, "logits", p.logits, {DType::kF32}));
  HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, "logits", p.logits));
  const Device device = p.logits.device();
  for (const auto& [name, t] :
       {std::pair{"ids", &p.ids}, {"non_finite", &p.non_finite}, {"first_bad", &p.first_bad}}) {
    HYLA_RETURN_IF_ERROR(check_shape(op, name, *t, {B}, "B"));
    HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {DType::kI32}));
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
  }
  if (p.first_bad_value.defined()) {
    HYLA_RETURN_IF_ERROR(check_shape(op, "first_bad_value", p.first_bad_value, {B}, "B"));
    HYLA_RETURN_IF_ERROR(check_dtype(op, "first_bad_value", p.first_bad_value, {DType::kF32}));
    HYLA_RETURN_IF_ERROR(check_device(op, "first_bad_value", p.first_bad_value, device));
  }
  return ok_status();
}

}  // namespace

Status argmax(const ArgmaxParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_argmax(p));
  return dispatch(
      "argmax", p.logits.device(), stream, [&] { cpu::argmax(p); },
      HYLA_CUDA_BODY(cuda::argmax(p, stream)));
}

}  // namespace hyla::kernels
