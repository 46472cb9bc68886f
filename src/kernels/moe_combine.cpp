// Entry point of the MoE combine: argument checks, then dispatch to the CPU or CUDA body.
#include "kernels/moe_combine.h"

#include "core/check.h"
#include "kernels/dispatch.h"

namespace hyla::kernels {

namespace {

Status check_moe_combine(const MoeCombineParams& p) {
  constexpr const char* op = "moe_combine";
  HYLA_RETURN_IF_ERROR(check_shape(op, "out", p.out, {kAnyDim, kAnyDim}, "T, width"));
  const int64_t T = p.out.size(0), width = p.out.size(1);
  const bool routed =
      p.expert_out.defined() || p.slot_positions.defined() || p.topk_weights.defined();
  if (routed) {
    HYLA_RETURN_IF_ERROR(
        check_shape(op, "slot_positions", p.slot_positions, {T, kAnyDim}, "T, top_k"));
    const int64_t K = p.slot_positions.size(1);
    HYLA_RETURN_IF_ERROR(check_shape(op, "topk_weights", p.topk_weights, {T, K}, "T, top_k"));
    HYLA_RETURN_IF_ERROR(check_shape(op, "expert_out", p.expert_out, {kAnyDim, width}, "N, width"));
    HYLA_RETURN_IF_ERROR(check_dtype(op, "slot_positions", p.slot_positions, {DType::kI32}));
  }
  if (p.shared.defined())
    HYLA_RETURN_IF_ERROR(check_shape(op, "shared", p.shared, {T, width}, "T, width"));
  if (p.shared_gate.defined()) {
    if (!p.shared.defined()) return invalid_argument(op, ": shared_gate is given without shared");
    HYLA_RETURN_IF_ERROR(check_shape(op, "shared_gate", p.shared_gate, {T, 1}, "T, 1"));
  }
  const Device device = p.out.device();
  for (const auto& [name, t] : {std::pair{"out", &p.out},
                                {"expert_out", &p.expert_out},
                                {"slot_positions", &p.slot_positions},
                                {"topk_weights", &p.topk_weights},
                                {"shared", &p.shared},
                                {"shared_gate", &p.shared_gate}}) {
    if (!t->defined()) continue;
    if (t != &p.slot_positions) HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {DType::kF32}));
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
    HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, name, *t));
    if (t != &p.out && spans_overlap(*t, p.out))
      return invalid_argument(op, ": out overlaps ", name, ", expected separate memory");
  }
  return ok_status();
}

}  // namespace

Status moe_combine(const MoeCombineParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_moe_combine(p));
  return dispatch(
      "moe_combine", p.out.device(), stream, [&] { cpu::moe_combine(p); },
      HYLA_CUDA_BODY(cuda::moe_combine(p, stream)));
}

}  // namespace hyla::kernels
