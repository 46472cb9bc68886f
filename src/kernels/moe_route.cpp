// Entry point of MoE top-k routing: argument checks, then dispatch to the CPU or CUDA body.
#include "kernels/moe_route.h"

#include "core/check.h"
#include "kernels/dispatch.h"

namespace hyla::kernels {

namespace {

Status check_moe_route(const MoeRouteParams& p) {
  constexpr const char* op = "moe_route";
  HYLA_RETURN_IF_ERROR(check_shape(op, "logits", p.logits, {kAnyDim, kAnyDim}, "T, E"));
  const int64_t T = p.logits.size(0), E = p.logits.size(1);
  if (p.correction_bias.defined())
    HYLA_RETURN_IF_ERROR(check_shape(op, "correction_bias", p.correction_bias, {E}, "E"));
  if (p.top_k < 1 || p.top_k > E)
    return invalid_argument(op, ": top_k is ", p.top_k, ", expected a value in [1, E = ", E, "]");
  HYLA_RETURN_IF_ERROR(check_shape(op, "topk_ids", p.topk_ids, {T, p.top_k}, "T, top_k"));
  HYLA_RETURN_IF_ERROR(check_shape(op, "topk_weights", p.topk_weights, {T, p.top_k}, "T, top_k"));
  HYLA_RETURN_IF_ERROR(check_dtype(op, "logits", p.logits, {DType::kF32}));
  if (p.correction_bias.defined())
    HYLA_RETURN_IF_ERROR(check_dtype(op, "correction_bias", p.correction_bias, {DType::kF32}));
  HYLA_RETURN_IF_ERROR(check_dtype(op, "topk_ids", p.topk_ids, {DType::kI32}));
  HYLA_RETURN_IF_ERROR(check_dtype(op, "topk_weights", p.topk_weights, {DType::kF32}));
  const Device device = p.logits.device();
  for (const auto& [name, t] : {std::pair{"logits", &p.logits},
                                {"correction_bias", &p.correction_bias},
                                {"topk_ids", &p.topk_ids},
                                {"topk_weights", &p.topk_weights}}) {
    if (!t->defined()) continue;
    HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, name, *t));
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
  }
  if (p.scoring != MoeScoring::kSoftmax && p.scoring != MoeScoring::kSigmoid)
    return invalid_argument(op, ": scoring is ", int(p.scoring), ", expected kSoftmax or kSigmoid");
  HYLA_RETURN_IF_ERROR(check_positive_finite(op, "routed_scaling", p.routed_scaling));
  if (p.num_groups < 1 || E % p.num_groups != 0)
    return invalid_argument(op, ": num_groups is ", p.num_groups,
                            ", expected a divisor of E = ", E);
  const int64_t group_size = E / p.num_groups;
  if (p.num_groups > 1 && group_size < 2)
    return invalid_argument(op, ": num_groups = ", p.num_groups, " leaves ", group_size,
                            " expert per group, expected >= 2 (a group scores its top-2 experts)");
  if (p.topk_groups < 1 || p.topk_groups > p.num_groups)
    return invalid_argument(op, ": topk_groups is ", p.topk_groups,
                            ", expected a value in [1, num_groups = ", p.num_groups, "]");
  if (p.top_k > p.topk_groups * group_size)
    return invalid_argument(op, ": top_k = ", p.top_k, " exceeds the ", p.topk_groups * group_size,
                            " experts in the kept groups (topk_groups = ", p.topk_groups,
                            " groups of ", group_size, " experts)");
  return ok_status();
}

}  // namespace

Status moe_route(const MoeRouteParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_moe_route(p));
  return dispatch(
      "moe_route", p.logits.device(), stream, [&] { cpu::moe_route(p); },
      HYLA_CUDA_BODY(cuda::moe_route(p, stream)));
}

}  // namespace hyla::kernels
