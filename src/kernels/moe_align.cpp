// Entry points of the MoE slot sort (moe_align) and row gather (moe_permute): argument checks,
// then dispatch to the CPU or CUDA body.
#include "kernels/moe_align.h"

#include "core/check.h"
#include "kernels/dispatch.h"

namespace hyla::kernels {

namespace {

Status check_moe_align(const MoeAlignParams& p) {
  constexpr const char* op = "moe_align";
  HYLA_RETURN_IF_ERROR(check_shape(op, "topk_ids", p.topk_ids, {kAnyDim, kAnyDim}, "T, top_k"));
  const int64_t T = p.topk_ids.size(0), K = p.topk_ids.size(1), E = p.num_experts;
  if (E < 1) return invalid_argument(op, ": num_experts is ", E, ", expected >= 1");
  if (T * K > INT32_MAX)
    return invalid_argument(op, ": T * top_k = ", T * K, " slots, expected at most ", INT32_MAX,
                            " (i32 positions)");
  HYLA_RETURN_IF_ERROR(check_shape(op, "expert_offsets", p.expert_offsets, {E + 1}, "E + 1"));
  HYLA_RETURN_IF_ERROR(check_shape(op, "sorted_slots", p.sorted_slots, {T * K}, "T * top_k"));
  HYLA_RETURN_IF_ERROR(check_shape(op, "slot_positions", p.slot_positions, {T, K}, "T, top_k"));
  const Device device = p.topk_ids.device();
  for (const auto& [name, t] : {std::pair{"topk_ids", &p.topk_ids},
                                {"expert_offsets", &p.expert_offsets},
                                {"sorted_slots", &p.sorted_slots},
                                {"slot_positions", &p.slot_positions}}) {
    HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {DType::kI32}));
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
    if (t == &p.topk_ids)
      HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, name, *t));
    else
      HYLA_RETURN_IF_ERROR(check_contiguous(op, name, *t));
  }
  // Values are read on the host only for CPU calls (no device sync on CUDA).
  if (device.is_cpu()) {
    for (int64_t t = 0; t < T; ++t) {
      const int32_t* ids = p.topk_ids.host<int32_t>() + t * p.topk_ids.stride(0);
      for (int64_t k = 0; k < K; ++k)
        if (ids[k] < 0 || ids[k] >= E)
          return invalid_argument(op, ": topk_ids[", t, ", ", k, "] is ", ids[k],
                                  ", expected an expert in [0, E = ", E, ")");
    }
  }
  return ok_status();
}

Status check_moe_permute(const MoePermuteParams& p) {
  constexpr const char* op = "moe_permute";
  HYLA_RETURN_IF_ERROR(check_shape(op, "x", p.x, {kAnyDim, kAnyDim}, "T, width"));
  const int64_t T = p.x.size(0), width = p.x.size(1);
  if (p.top_k < 1) return invalid_argument(op, ": top_k is ", p.top_k, ", expected >= 1");
  HYLA_RETURN_IF_ERROR(check_shape(op, "sorted_slots", p.sorted_slots, {kAnyDim}, "N"));
  const int64_t N = p.sorted_slots.size(0);
  if (N > INT32_MAX)
    return invalid_argument(op, ": sorted_slots has ", N, " rows, expected at most ", INT32_MAX);
  HYLA_RETURN_IF_ERROR(check_shape(op, "y", p.y, {N, width}, "N, width"));
  HYLA_RETURN_IF_ERROR(check_dtype(op, "x", p.x, {DType::kF32, DType::kBF16}));
  HYLA_RETURN_IF_ERROR(check_dtype(op, "y", p.y, {p.x.dtype()}));
  HYLA_RETURN_IF_ERROR(check_dtype(op, "sorted_slots", p.sorted_slots, {DType::kI32}));
  if (T * p.top_k > INT32_MAX)
    return invalid_argument(op, ": T * top_k = ", T * p.top_k, " slots, expected at most ",
                            INT32_MAX, " (i32 slots)");
  const Device device = p.x.device();
  HYLA_RETURN_IF_ERROR(check_device(op, "sorted_slots", p.sorted_slots, device));
  HYLA_RETURN_IF_ERROR(check_device(op, "y", p.y, device));
  HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, "x", p.x));
  HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, "y", p.y));
  return check_contiguous(op, "sorted_slots", p.sorted_slots);
}

}  // namespace

Status moe_align(const MoeAlignParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_moe_align(p));
  return dispatch(
      "moe_align", p.topk_ids.device(), stream, [&] { cpu::moe_align(p); },
      HYLA_CUDA_BODY(cuda::moe_align(p, stream)));
}

Status moe_permute(const MoePermuteParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_moe_permute(p));
  return dispatch(
      "moe_permute", p.x.device(), stream, [&] { cpu::moe_permute(p); },
      HYLA_CUDA_BODY(cuda::moe_permute(p, stream)));
}

}  // namespace hyla::kernels
