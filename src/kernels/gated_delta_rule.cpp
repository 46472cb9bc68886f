// Entry points of the gated delta rule: argument checks, then dispatch to the CPU or CUDA body.
#include "kernels/gated_delta_rule.h"

#include "core/check.h"

namespace hyla::kernels {

namespace {

int64_t chunk_states_before(const TensorView& cu_seqlens, int64_t b) {
  const int32_t* cu = cu_seqlens.data<int32_t>();
  const int64_t s = cu_seqlens.stride(0);
  int64_t n = 0;
  for (int64_t i = 0; i < b; ++i) n += (cu[(i + 1) * s] - cu[i * s]) / kDeltaRuleChunk;
  return n;
}

}  // namespace

int64_t gated_delta_rule_num_chunk_states(const TensorView& cu_seqlens) {
  return chunk_states_before(cu_seqlens, cu_seqlens.size(0) - 1);
}

int64_t gated_delta_rule_chunk_state_offset(const TensorView& cu_seqlens, int64_t b) {
  return chunk_states_before(cu_seqlens, b);
}

Status check_gated_delta_rule(const GatedDeltaRuleParams& p, bool chunked) {
  const char* op = chunked ? "gated_delta_rule_chunk" : "gated_delta_rule_recurrent";
  HYLA_RETURN_IF_ERROR(check_shape(op, "q", p.q, {kAnyDim, kAnyDim, kAnyDim}, "T, H, d_k"));
  const int64_t T = p.q.size(0), H = p.q.size(1), d_k = p.q.size(2);
  HYLA_RETURN_IF_ERROR(check_shape(op, "k", p.k, {T, H, d_k}, "T, H, d_k"));
  HYLA_RETURN_IF_ERROR(check_shape(op, "v", p.v, {T, kAnyDim, kAnyDim}, "T, HV, d_v"));
  const int64_t HV = p.v.size(1), d_v = p.v.size(2);
  if (H <= 0 || HV % H != 0)
    return invalid_argument(op, ": HV = ", HV, " value heads must be a multiple of H = ", H,
                            " key heads (GVA)");
  if (p.g.defined() && p.g.ndim() == 3) {
    HYLA_RETURN_IF_ERROR(check_shape(op, "g", p.g, {T, HV, d_k}, "T, HV, d_k (KDA gate)"));
  } else {
    HYLA_RETURN_IF_ERROR(check_shape(op, "g", p.g, {T, HV}, "T, HV (GDN gate)"));
  }
  HYLA_RETURN_IF_ERROR(check_shape(op, "beta", p.beta, {T, HV}, "T, HV"));
  HYLA_RETURN_IF_ERROR(check_shape(op, "o", p.o, {T, HV, d_v}, "T, HV, d_v"));
  for (const auto& [name, t] : {std::pair{"q", &p.q}, {"k", &p.k}, {"v", &p.v}, {"o", &p.o}}) {
    HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {DType::kF32, DType::kBF16}));
    HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, name, *t));
  }
  HYLA_RETURN_IF_ERROR(check_dtype(op, "g", p.g, {DType::kF32}));
  HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, "g", p.g));
  HYLA_RETURN_IF_ERROR(check_dtype(op, "beta", p.beta, {DType::kF32}));

  const Device device = p.q.device();
  for (const auto& [name, t] :
       {std::pair{"k", &p.k}, {"v", &p.v}, {"g", &p.g}, {"beta", &p.beta}, {"o", &p.o}}) {
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
  }

  HYLA_RETURN_IF_ERROR(check_cu_seqlens(op, p.cu_seqlens, T, device));
  const int64_t B = p.cu_seqlens.size(0) - 1;
  const bool uses_pool = p.initial_slots.defined() || p.final_slots.defined();
  if (uses_pool) {
    HYLA_RETURN_IF_ERROR(check_shape(op, "state_pool", p.state_pool, {kAnyDim, HV, d_v, d_k},
                                     "slots, HV, d_v, d_k"));
    HYLA_RETURN_IF_ERROR(check_dtype(op, "state_pool", p.state_pool, {DType::kF32, DType::kBF16}));
    HYLA_RETURN_IF_ERROR(check_contiguous(op, "state_pool", p.state_pool));
    HYLA_RETURN_IF_ERROR(check_device(op, "state_pool", p.state_pool, device));
    const int64_t slots = p.state_pool.size(0);
    if (p.initial_slots.defined())
      HYLA_RETURN_IF_ERROR(check_slots(op, "initial_slots", p.initial_slots, B, slots, device));
    if (p.final_slots.defined())
      HYLA_RETURN_IF_ERROR(check_slots(op, "final_slots", p.final_slots, B, slots, device));
    HYLA_RETURN_IF_ERROR(check_slot_ownership(op, p.initial_slots, "initial_slots", p.final_slots,
                                              "final_slots", slots));
  }
  if (p.step_states.defined()) {
    if (chunked)
      return invalid_argument(op, ": step_states is a recurrent-only output; use chunk_states");
    HYLA_RETURN_IF_ERROR(
        check_shape(op, "step_states", p.step_states, {T, HV, d_v, d_k}, "T, HV, d_v, d_k"));
    HYLA_RETURN_IF_ERROR(check_dtype(op, "step_states", p.step_states, {DType::kF32}));
    HYLA_RETURN_IF_ERROR(check_contiguous(op, "step_states", p.step_states));
    HYLA_RETURN_IF_ERROR(check_device(op, "step_states", p.step_states, device));
  }
  if (p.chunk_states.defined()) {
    if (!chunked)
      return invalid_argument(op, ": chunk_states is a chunk-only output; use step_states");
    const int64_t n = gated_delta_rule_num_chunk_states(p.cu_seqlens);
    HYLA_RETURN_IF_ERROR(check_shape(op, "chunk_states", p.chunk_states, {n, HV, d_v, d_k},
                                     "sum_b floor(len_b / 64), HV, d_v, d_k"));
    HYLA_RETURN_IF_ERROR(check_dtype(op, "chunk_states", p.chunk_states, {DType::kF32}));
    HYLA_RETURN_IF_ERROR(check_contiguous(op, "chunk_states", p.chunk_states));
    HYLA_RETURN_IF_ERROR(check_device(op, "chunk_states", p.chunk_states, device));
  }
  if (!(p.scale >= 0.0f))
    return invalid_argument(op, ": scale is ", p.scale, ", expected >= 0 (0 = d_k^-1/2)");
  return ok_status();
}

Status gated_delta_rule_recurrent(const GatedDeltaRuleParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_gated_delta_rule(p, /*chunked=*/false));
  if (p.q.device().is_cpu()) {
    cpu::gated_delta_rule_recurrent(p);
    return ok_status();
  }
#if HYLA_WITH_CUDA
  return cuda::gated_delta_rule_recurrent(p, stream);
#else
  (void)stream;
  return unsupported("gated_delta_rule_recurrent: this build has no CUDA support");
#endif
}

Status gated_delta_rule_chunk(const GatedDeltaRuleParams& p, Stream) {
  HYLA_RETURN_IF_ERROR(check_gated_delta_rule(p, /*chunked=*/true));
  if (p.q.device().is_cuda())
    return unsupported(
        "gated_delta_rule_chunk: no CUDA body yet (CUDA prefill kernels: later issue)");
  cpu::gated_delta_rule_chunk(p);
  return ok_status();
}

bool gated_delta_rule_extend_uses_chunk(const GatedDeltaRuleParams& p) {
  if (p.chunk_states.defined()) return true;
  const int64_t B = p.cu_seqlens.size(0) - 1;
  return B > 0 && p.q.size(0) >= kCpuChunkMinTokens * B;
}

Status gated_delta_rule_extend(const GatedDeltaRuleParams& p, Stream stream) {
  if (p.step_states.defined())
    return invalid_argument(
        "gated_delta_rule_extend: step_states is a verify output; call "
        "gated_delta_rule_recurrent");
  HYLA_RETURN_IF_ERROR(check_gated_delta_rule(p, /*chunked=*/true));
  return gated_delta_rule_extend_uses_chunk(p) ? gated_delta_rule_chunk(p, stream)
                                               : gated_delta_rule_recurrent(p, stream);
}

}  // namespace hyla::kernels
