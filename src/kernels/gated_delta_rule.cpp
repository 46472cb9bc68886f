// Entry points of the gated delta rule: argument checks, then dispatch to the CPU or CUDA body.
#include "kernels/gated_delta_rule.h"

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "core/check.h"
#include "kernels/dispatch.h"

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
  const bool host_indices = device.is_cpu();  // index values are read on CPU calls only
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
    // On CUDA the count needs cu_seqlens' values: the body writes only the entries that exist.
    const int64_t n = host_indices ? gated_delta_rule_num_chunk_states(p.cu_seqlens) : kAnyDim;
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
  return dispatch(
      "gated_delta_rule_recurrent", p.q.device(), stream,
      [&] { cpu::gated_delta_rule_recurrent(p); },
      HYLA_CUDA_BODY(cuda::gated_delta_rule_recurrent(p, stream)));
}

int64_t gated_delta_rule_chunk_workspace_bytes(const GatedDeltaRuleParams& p) {
  if (!p.q.device().is_cuda()) return 0;
  return chunk_workspace_layout(chunk_workspace_shape(p)).bytes;
}

bool chunk_bf16_rows(const TensorView& x) {
  return x.dtype() == DType::kBF16 && x.stride(2) == 1 && x.stride(1) % 8 == 0 &&
         x.stride(0) % 8 == 0 && x.stride(1) >= x.size(2) &&
         x.stride(0) >= x.stride(1) * x.size(1) && reinterpret_cast<uintptr_t>(x.raw()) % 16 == 0;
}

bool chunk_uses_tensor_cores(const GatedDeltaRuleParams& p) {
  return p.q.device().is_cuda() && p.q.size(2) == 128 && p.k.size(2) == 128 &&
         p.v.size(2) % 32 == 0 && p.v.size(2) > 0;
}

int64_t chunk_cp_segments(int64_t T, int64_t B, int64_t HV, int64_t d_v) {
  const int64_t blocks = B * HV * (d_v / 64);
  if (blocks <= 0 || blocks >= 32 || d_v % 128 != 0) return 1;
  const int64_t chunks = T / (B * kDeltaRuleChunk);  // a sequence's, on average
  const int64_t P = std::min<int64_t>({8, 128 / blocks, chunks / 4});
  return P >= 4 ? P : 1;
}

namespace {

/// The tensor-core body's kernels of 128 value rows a block (the wide state kernel, context
/// parallelism's transfer kernel) take the call: d_k 128 and d_v a multiple of 128.
bool chunk_takes_128_rows(const GatedDeltaRuleParams& p) {
  return chunk_uses_tensor_cores(p) && p.v.size(2) % 128 == 0;
}

}  // namespace

ChunkWorkspaceShape chunk_workspace_shape(const GatedDeltaRuleParams& p) {
  const bool tc = chunk_uses_tensor_cores(p);
  const int64_t T = p.q.size(0), B = p.cu_seqlens.size(0) - 1, HV = p.v.size(1), d_v = p.v.size(2);
  const int64_t cp = !tc || B <= 0       ? 1
                     : p.cp_segments > 0 ? std::min<int64_t>(p.cp_segments, 16)
                                         : chunk_cp_segments(T, B, HV, d_v);
  const bool per_channel = p.g.ndim() == 3;
  const bool qk_rows = chunk_bf16_rows(p.q) && chunk_bf16_rows(p.k);
  const bool rows_as_they_are = chunk_bf16_rows(p.v) && (per_channel || qk_rows);
  return {.T = p.q.size(0),
          .B = p.cu_seqlens.size(0) - 1,
          .H = p.q.size(1),
          .HV = p.v.size(1),
          .d_k = p.q.size(2),
          .d_v = p.v.size(2),
          .per_channel = per_channel,
          .tensor_cores = tc,
          .bf16_copies = tc && !rows_as_they_are,
          .qk_bf16_rows = qk_rows,
          .cp_segments = cp};
}

ChunkWorkspaceLayout chunk_workspace_layout(const ChunkWorkspaceShape& s) {
  // Regions in order, each starting on a 256-byte boundary (64 floats).
  constexpr int64_t kAlign = 64;
  constexpr int64_t C = kDeltaRuleChunk;
  const auto round_up = [](int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
  ChunkWorkspaceLayout l{};
  l.max_chunks = (s.T + C - 1) / C + s.B;
  int64_t at = 0;
  const auto take = [&](int64_t floats) {
    const int64_t start = at;
    at += round_up(floats);
    return start;
  };
  l.chunk_first = take(s.B + 1);
  l.chunk_seq = take(l.max_chunks);
  l.boundary_first = take(s.B);
  if (s.tensor_cores) {
    const int64_t chunk_heads = l.max_chunks * s.HV;
    l.tc_t = take(chunk_heads * C * C / 2);
    l.tc_aqk = take(chunk_heads * C * C / 2);
    l.tc_vec = take(chunk_heads * 4 * C);  // KDA's d_k = 128 decays fit in its 4 x 64
    const int64_t kda = s.per_channel ? 1 : 0;
    l.tc_kg = take(kda * chunk_heads * C * s.d_k / 2);
    l.tc_qg = take(kda * chunk_heads * C * s.d_k / 2);
    l.tc_kd = take(kda * chunk_heads * C * s.d_k / 2);
    l.tc_ready = take(chunk_heads + 2);
    const int64_t copies = s.bf16_copies ? 1 : 0;
    l.tc_q = take(copies * (1 - kda) * s.T * s.H * s.d_k / 2);
    l.tc_k = take(copies * (1 - kda) * s.T * s.H * s.d_k / 2);
    l.tc_v = take(copies * (s.T * s.HV * s.d_v + 1) / 2);
    const int64_t segs = s.cp_segments > 1 ? s.B * s.cp_segments : 0;
    const int64_t with = segs > 0 ? 1 : 0;
    l.cp_cu = take(with * (segs + 1));
    l.cp_chunk_first = take(with * (segs + 1));
    l.cp_boundary_first = take(segs);
    l.cp_initial = take(segs);
    l.cp_final = take(segs);
    l.cp_transfer = take(segs * s.HV * (s.d_k + s.d_v) * s.d_k);
    l.cp_states = take(segs * s.HV * s.d_v * s.d_k);
  } else {
    l.w = take(s.T * s.HV * s.d_k);
    l.u = take(s.T * s.HV * s.d_v);
    l.qg = take(s.T * s.HV * s.d_k);
    l.kd = take(s.T * s.HV * s.d_k);
    l.aqk = take(s.T * s.HV * C);
    l.decay = take(l.max_chunks * s.HV * (s.per_channel ? s.d_k : 1));
  }
  l.bytes = at * int64_t(sizeof(float));
  return l;
}

namespace {

/// What a CUDA call needs beyond the shared checks: a key width its bodies take, a workspace of
/// gated_delta_rule_chunk_workspace_bytes, and the 128-row kernels for cp_segments and kWide.
Status check_gated_delta_rule_chunk_cuda(const GatedDeltaRuleParams& p) {
  constexpr std::string_view op = "gated_delta_rule_chunk";
  if (p.q.size(2) > kCudaChunkMaxKeyDim)
    return unsupported(op, ": d_k = ", p.q.size(2), " on CUDA, expected at most ",
                       kCudaChunkMaxKeyDim);
  if (p.cp_segments > 1 && !chunk_takes_128_rows(p))
    return invalid_argument(op, ": cp_segments ", p.cp_segments,
                            " needs the tensor-core body (d_k 128) and d_v a multiple of 128, got ",
                            "d_k ", p.q.size(2), ", d_v ", p.v.size(2));
  const int64_t need = gated_delta_rule_chunk_workspace_bytes(p);
  if (!p.workspace.defined())
    return invalid_argument(op, ": workspace is missing; CUDA calls need ", need,
                            " bytes (gated_delta_rule_chunk_workspace_bytes)");
  HYLA_RETURN_IF_ERROR(check_dtype(op, "workspace", p.workspace, {DType::kF32}));
  HYLA_RETURN_IF_ERROR(check_contiguous(op, "workspace", p.workspace));
  HYLA_RETURN_IF_ERROR(check_device(op, "workspace", p.workspace, p.q.device()));
  const int64_t have = p.workspace.numel() * int64_t(sizeof(float));
  if (have < need)
    return invalid_argument(op, ": workspace holds ", have, " bytes, expected at least ", need,
                            " (gated_delta_rule_chunk_workspace_bytes)");
  if (reinterpret_cast<uintptr_t>(p.workspace.raw()) % 16 != 0)
    return invalid_argument(op, ": workspace is not 16-byte aligned");
  if (p.state_kernel == ChunkStateKernel::kWide && !chunk_takes_128_rows(p))
    return invalid_argument(op, ": state_kernel kWide needs the tensor-core body (d_k 128) and ",
                            "d_v a multiple of 128, got d_k ", p.q.size(2), ", d_v ", p.v.size(2));
  return ok_status();
}

}  // namespace

Status gated_delta_rule_chunk(const GatedDeltaRuleParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_gated_delta_rule(p, /*chunked=*/true));
  if (p.cp_segments < 0 || p.cp_segments > 16)
    return invalid_argument("gated_delta_rule_chunk: cp_segments ", p.cp_segments,
                            ", expected 0 .. 16");
  if (!p.q.device().is_cpu()) HYLA_RETURN_IF_ERROR(check_gated_delta_rule_chunk_cuda(p));
  return dispatch(
      "gated_delta_rule_chunk", p.q.device(), stream, [&] { cpu::gated_delta_rule_chunk(p); },
      HYLA_CUDA_BODY(cuda::gated_delta_rule_chunk(p, stream)));
}

bool gated_delta_rule_extend_uses_chunk(const GatedDeltaRuleParams& p) {
  if (p.chunk_states.defined()) return true;
  const int64_t B = p.cu_seqlens.size(0) - 1;
  if (p.q.device().is_cuda())  // wider keys than the CUDA chunk body takes: recurrent
    return B > 0 && p.q.size(2) <= kCudaChunkMaxKeyDim && p.q.size(0) >= kCudaChunkMinTokens * B;
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
