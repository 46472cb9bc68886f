// Entry points of the depthwise causal conv (prefill and decode update): argument checks, then
// dispatch to the CPU or CUDA body.
#include "kernels/causal_conv1d.h"

#include <string_view>

#include "core/check.h"
#include "kernels/dispatch.h"

namespace hyla::kernels {

namespace {

/// Checks x [rows, D], weight [D, K], optional bias [D], y [rows, D] and, when defined, the
/// conv_state pool [slots, D, K-1].
Status check_conv_tensors(std::string_view op, const TensorView& x, const TensorView& weight,
                          const TensorView& bias, const TensorView& conv_state, const TensorView& y,
                          std::string_view rows_name) {
  HYLA_RETURN_IF_ERROR(check_shape(op, "x", x, {kAnyDim, kAnyDim}, str_cat(rows_name, ", D")));
  const int64_t rows = x.size(0), D = x.size(1);
  HYLA_RETURN_IF_ERROR(check_shape(op, "weight", weight, {D, kAnyDim}, "D, K"));
  const int64_t K = weight.size(1);
  if (K < 1 || K > kMaxCausalConvKernel)
    return invalid_argument(op, ": weight has K = ", K, " taps, expected 1 to ",
                            kMaxCausalConvKernel);
  HYLA_RETURN_IF_ERROR(check_shape(op, "y", y, {rows, D}, str_cat(rows_name, ", D")));
  const Device device = x.device();
  for (const auto& [name, t] : {std::pair{"x", &x}, {"weight", &weight}, {"y", &y}}) {
    HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {DType::kF32, DType::kBF16}));
    HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, name, *t));
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
  }
  if (bias.defined()) {
    HYLA_RETURN_IF_ERROR(check_shape(op, "bias", bias, {D}, "D"));
    HYLA_RETURN_IF_ERROR(check_dtype(op, "bias", bias, {DType::kF32, DType::kBF16}));
    HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, "bias", bias));
    HYLA_RETURN_IF_ERROR(check_device(op, "bias", bias, device));
  }
  if (conv_state.defined()) {
    HYLA_RETURN_IF_ERROR(
        check_shape(op, "conv_state", conv_state, {kAnyDim, D, K - 1}, "slots, D, K-1"));
    HYLA_RETURN_IF_ERROR(check_dtype(op, "conv_state", conv_state, {DType::kF32, DType::kBF16}));
    HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, "conv_state", conv_state));
    HYLA_RETURN_IF_ERROR(check_device(op, "conv_state", conv_state, device));
  }
  return ok_status();
}

Status check_causal_conv1d(const CausalConv1dParams& p) {
  constexpr std::string_view op = "causal_conv1d";
  HYLA_RETURN_IF_ERROR(check_conv_tensors(op, p.x, p.weight, p.bias, p.conv_state, p.y, "T"));
  const Device device = p.x.device();
  HYLA_RETURN_IF_ERROR(check_cu_seqlens(op, p.cu_seqlens, p.x.size(0), device));
  const int64_t B = p.cu_seqlens.size(0) - 1;
  const bool uses_pool = p.initial_slots.defined() || p.final_slots.defined();
  if (!uses_pool) return ok_status();
  if (!p.conv_state.defined())
    return invalid_argument(op, ": conv_state is missing, expected the [slots, D, K-1] pool that ",
                            "initial_slots / final_slots index");
  const int64_t num_slots = p.conv_state.size(0);
  if (p.initial_slots.defined())
    HYLA_RETURN_IF_ERROR(check_slots(op, "initial_slots", p.initial_slots, B, num_slots, device));
  if (p.final_slots.defined())
    HYLA_RETURN_IF_ERROR(check_slots(op, "final_slots", p.final_slots, B, num_slots, device));
  return check_slot_ownership(op, p.initial_slots, "initial_slots", p.final_slots, "final_slots",
                              num_slots);
}

Status check_causal_conv1d_update(const CausalConv1dUpdateParams& p) {
  constexpr std::string_view op = "causal_conv1d_update";
  HYLA_RETURN_IF_ERROR(check_conv_tensors(op, p.x, p.weight, p.bias, p.conv_state, p.y, "B"));
  if (!p.conv_state.defined())
    return invalid_argument(op, ": conv_state is missing, expected the [slots, D, K-1] pool");
  const int64_t B = p.x.size(0), num_slots = p.conv_state.size(0);
  HYLA_RETURN_IF_ERROR(check_slots(op, "slots", p.slots, B, num_slots, p.x.device()));
  return check_slot_ownership(op, TensorView(), "slots", p.slots, "slots", num_slots);
}

}  // namespace

Status causal_conv1d(const CausalConv1dParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_causal_conv1d(p));
  return dispatch(
      "causal_conv1d", p.x.device(), stream, [&] { cpu::causal_conv1d(p); },
      HYLA_CUDA_BODY(cuda::causal_conv1d(p, stream)));
}

Status causal_conv1d_update(const CausalConv1dUpdateParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_causal_conv1d_update(p));
  return dispatch(
      "causal_conv1d_update", p.x.device(), stream, [&] { cpu::causal_conv1d_update(p); },
      HYLA_CUDA_BODY(cuda::causal_conv1d_update(p, stream)));
}

}  // namespace hyla::kernels
