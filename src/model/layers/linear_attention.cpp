// Short conv and delta rule shared by the GDN and KDA layers (see linear_attention.h).
#include "model/layers/linear_attention.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/causal_conv1d.h"
#include "kernels/copy.h"
#include "kernels/gated_delta_rule.h"
#include "kernels/gated_delta_rule_decode.h"
#include "kernels/gather_rows.h"

namespace hyla::model {

namespace {

/// Why the fused decode kernel cannot take this layer's shapes on `device`; empty when it can.
std::string fused_decode_limit(const ModelConfig& config, Device device,
                               std::initializer_list<const Tensor*> f32_weights) {
  const LinearAttentionConfig& l = config.linear;
  if (l.conv_kernel < 2 || l.conv_kernel > 4)
    return str_cat("a conv of ", l.conv_kernel, " taps (the kernel takes 2 to 4)");
  for (const Tensor* w : f32_weights)
    if (w->dtype() != DType::kF32)
      return str_cat("a ", dtype_name(w->dtype()),
                     " conv / A_log / dt_bias / norm weight (the kernel takes f32)");
  if (device.is_cuda() &&
      (l.head_k_dim != l.head_v_dim || (l.head_k_dim != 64 && l.head_k_dim != 128)))
    return str_cat("d_k = ", l.head_k_dim, ", d_v = ", l.head_v_dim,
                   " on CUDA (the CUDA kernel takes d_k = d_v in {64, 128})");
  return {};
}

}  // namespace

int64_t fused_verify_tokens(const LinearMemory& memory) {
  if (memory.verify == nullptr || memory.verify_mode != VerifyMode::kStepStates ||
      memory.host_cu_seqlens == nullptr || memory.host_cu_seqlens->size() < 2)
    return 0;
  const std::vector<int32_t>& cu = *memory.host_cu_seqlens;
  const int64_t T = cu[1] - cu[0];
  for (size_t b = 1; b + 1 < cu.size(); ++b)
    if (cu[b + 1] - cu[b] != T) return 0;
  return T <= kernels::kMaxDecodeTokens ? T : 0;
}

Result<bool> use_fused_decode(const ModelConfig& config, const LinearMemory& memory,
                              const TensorView& x,
                              std::initializer_list<const Tensor*> f32_weights) {
  LinearDecodeBackend backend = memory.backends.decode;
  if (memory.verify) {
    backend = memory.backends.verify_backend();
    if (fused_verify_tokens(memory) == 0) {
      if (backend == LinearDecodeBackend::kFused)
        return unsupported(
            "linear attention verify backend 'fused' needs per-token states (--spec-mode states) "
            "and at most ",
            kernels::kMaxDecodeTokens,
            " tokens in every sequence, all alike (a CUDA graph's verify step pads them); use "
            "--linear-attn-verify-backend ops or auto");
      return false;
    }
  } else if (!memory.decode) {
    return false;
  }
  switch (backend) {
    case LinearDecodeBackend::kOps: return false;
    case LinearDecodeBackend::kAuto:
      return x.device().is_cuda() && fused_decode_limit(config, x.device(), f32_weights).empty();
    case LinearDecodeBackend::kFused: break;
  }
  if (const std::string why = fused_decode_limit(config, x.device(), f32_weights); !why.empty())
    return unsupported("linear attention ", memory.verify ? "verify" : "decode",
                       " backend 'fused' cannot run this layer on ", device_name(x.device()), ": ",
                       why, "; use --linear-attn-", memory.verify ? "verify" : "decode",
                       "-backend ops or auto");
  return true;
}

namespace {

/// Calls f(sequence b, its boundary j, entry e, slot) for every listed boundary slot >= 0.
template <typename F>
Status for_each_boundary(const LinearMemory& memory, F&& f) {
  if (memory.decode || memory.boundary_slots == nullptr || memory.boundary_slots->empty())
    return ok_status();
  const std::vector<int32_t>& cu = *memory.host_cu_seqlens;
  int64_t e = 0;
  for (size_t b = 0; b + 1 < cu.size(); ++b)
    for (int64_t j = 0; j < (cu[b + 1] - cu[b]) / kernels::kDeltaRuleChunk; ++j, ++e)
      if (const int32_t slot = (*memory.boundary_slots)[size_t(e)]; slot >= 0)
        HYLA_RETURN_IF_ERROR(f(int64_t(b), j, e, slot));
  return ok_status();
}

// The conv window after 64 (j + 1) new tokens of sequence b: its K-1 inputs before that point
// (all inside this call's tokens, as 64 >= K-1), channel-major as the pool keeps them.
Status boundary_conv_windows(const TensorView& qkv, const LinearMemory& memory) {
  return for_each_boundary(memory, [&](int64_t b, int64_t j, int64_t, int32_t slot) {
    const TensorView window = memory.conv_pool.select(slot);  // [D, K-1]
    const int64_t K1 = window.size(1), D = window.size(0);
    const int64_t end = (*memory.host_cu_seqlens)[size_t(b)] + kernels::kDeltaRuleChunk * (j + 1);
    const TensorView rows = qkv.narrow(0, end - K1, K1);  // [K-1, D]
    const int64_t shape[] = {D, K1}, stride[] = {rows.stride(1), rows.stride(0)};
    return kernels::copy(
        {.x = TensorView(rows.raw(), rows.dtype(), 2, shape, stride, rows.device()), .y = window});
  });
}

}  // namespace

Result<TensorView> decode_rows(const TensorView& view, Tensor& storage) {
  bool row_contiguous = true;
  int64_t row = 1;
  for (int d = view.ndim() - 1; d >= 1; --d) {
    row_contiguous = row_contiguous && (view.size(d) == 1 || view.stride(d) == row);
    row *= view.size(d);
  }
  const int64_t element = dtype_size(view.dtype());
  if (row_contiguous && reinterpret_cast<uintptr_t>(view.raw()) % 16 == 0 &&
      view.stride(0) * element % 16 == 0 && view.stride(0) >= row)
    return view;
  storage = Tensor::empty(view.ndim(), view.shape(), view.dtype(), view.device());
  HYLA_RETURN_IF_ERROR(kernels::copy({.x = view, .y = storage}));
  return storage.view();
}

LayerState linear_new_state(const ModelConfig& config) {
  const LinearAttentionConfig& l = config.linear;
  LayerState s;
  s.conv_state = Tensor::zeros({1, l.conv_dim(), l.conv_kernel - 1}, DType::kF32);
  s.ssm_state = Tensor::zeros({1, l.num_v_heads, l.head_v_dim, l.head_k_dim}, DType::kF32);
  return s;
}

namespace {

/// A verify record's tensor: the one it holds when its shape and dtype match (a CUDA graph's
/// replay writes where its capture did), else a new one.
void keep_or_allocate(Tensor& t, const std::vector<int64_t>& shape, Device device,
                      DType dtype = DType::kF32) {
  if (t.defined() && t.dtype() == dtype && t.device() == device && t.ndim() == int(shape.size()) &&
      std::equal(shape.begin(), shape.end(), t.view().shape()))
    return;
  t = Tensor::empty(int(shape.size()), shape.data(), dtype, device);
}

}  // namespace

Status fused_verify_outputs(const LinearMemory& memory, kernels::GatedDeltaRuleDecodeParams& p) {
  if (memory.verify == nullptr) return ok_status();
  const int64_t T = fused_verify_tokens(memory), rows = p.qkv.size(0);
  const TensorView& pool = memory.ssm_pool;
  LinearVerifyRecord& record = *memory.verify;
  keep_or_allocate(record.step_states, {rows / T, T, pool.size(1), pool.size(2), pool.size(3)},
                   pool.device(), pool.dtype());
  keep_or_allocate(record.qkv, {rows, p.qkv.size(1)}, pool.device());
  HYLA_RETURN_IF_ERROR(kernels::copy({.x = p.qkv, .y = record.qkv}));
  record.fused_tokens = T;
  p.tokens_per_seq = T;
  p.commit = false;
  p.step_states = record.step_states;
  return ok_status();
}

Status short_conv_silu(const TensorView& qkv, const TensorView& conv_weight,
                       const LinearMemory& memory, const TensorView& mixed) {
  if (memory.decode) {  // one token per sequence: slide each window
    return kernels::causal_conv1d_update({.x = qkv,
                                          .weight = conv_weight,
                                          .bias = {},
                                          .conv_state = memory.conv_pool,
                                          .slots = memory.slots,
                                          .silu = true,
                                          .y = mixed});
  }
  if (memory.verify) {  // the inputs kept for the commit; each slot's window stays
    keep_or_allocate(memory.verify->qkv, {qkv.size(0), qkv.size(1)}, qkv.device());
    HYLA_RETURN_IF_ERROR(kernels::copy({.x = qkv, .y = memory.verify->qkv}));
  }
  HYLA_RETURN_IF_ERROR(boundary_conv_windows(qkv, memory));
  return kernels::causal_conv1d({.x = qkv,
                                 .weight = conv_weight,
                                 .bias = {},
                                 .cu_seqlens = memory.cu_seqlens,
                                 .conv_state = memory.conv_pool,
                                 .initial_slots = memory.slots,
                                 .final_slots = memory.verify ? TensorView() : memory.slots,
                                 .silu = true,
                                 .y = mixed});
}

Status delta_rule(const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& g, const TensorView& beta, const LinearMemory& memory,
                  const TensorView& o) {
  kernels::GatedDeltaRuleParams p;
  p.q = q;
  p.k = k;
  p.v = v;
  p.g = g;
  p.beta = beta;
  p.cu_seqlens = memory.cu_seqlens;
  p.state_pool = memory.ssm_pool;
  p.initial_slots = memory.slots;
  p.final_slots = memory.slots;
  p.use_qk_l2norm = true;
  p.o = o;
  if (memory.verify) {  // token by token from each slot, nothing written back (model/verify.h)
    p.final_slots = {};
    LinearVerifyRecord& record = *memory.verify;
    if (memory.verify_mode == VerifyMode::kStepStates) {
      const TensorView& pool = memory.ssm_pool;
      keep_or_allocate(record.step_states, {q.size(0), pool.size(1), pool.size(2), pool.size(3)},
                       q.device());
      p.step_states = record.step_states;
    } else {
      keep_or_allocate(record.g, std::vector<int64_t>(g.shape(), g.shape() + g.ndim()), g.device());
      keep_or_allocate(record.beta, std::vector<int64_t>(beta.shape(), beta.shape() + beta.ndim()),
                       beta.device());
      HYLA_RETURN_IF_ERROR(kernels::copy({.x = g, .y = record.g}));
      HYLA_RETURN_IF_ERROR(kernels::copy({.x = beta, .y = record.beta}));
    }
    return kernels::gated_delta_rule_recurrent(p);
  }
  const LinearPrefillBackend prefill = memory.backends.prefill;
  if (memory.decode || prefill == LinearPrefillBackend::kRecurrent)
    return kernels::gated_delta_rule_recurrent(p);
  // The prefix cache's states inside the chunk: the chunk kernel writes every 64th (chunk_states;
  // extend then always takes it), the listed ones go to their slots.
  Tensor boundary;
  if (memory.boundary_slots != nullptr && !memory.boundary_slots->empty()) {
    const TensorView& pool = memory.ssm_pool;
    boundary = Tensor::empty(
        {int64_t(memory.boundary_slots->size()), pool.size(1), pool.size(2), pool.size(3)},
        DType::kF32, q.device());
    p.chunk_states = boundary;
  }
  const bool chunk =
      prefill == LinearPrefillBackend::kChunk || kernels::gated_delta_rule_extend_uses_chunk(p);
  // The CUDA chunk body keeps its per-chunk scratch in a workspace (none on the CPU: 0 bytes).
  Tensor workspace;
  const int64_t workspace_bytes = kernels::gated_delta_rule_chunk_workspace_bytes(p);
  if (workspace_bytes > 0 && chunk) {
    workspace = Tensor::empty({(workspace_bytes + 3) / 4}, DType::kF32, q.device());
    p.workspace = workspace;
  }
  HYLA_RETURN_IF_ERROR(prefill == LinearPrefillBackend::kChunk
                           ? kernels::gated_delta_rule_chunk(p)
                           : kernels::gated_delta_rule_extend(p));
  return for_each_boundary(memory, [&](int64_t, int64_t, int64_t e, int32_t slot) {
    return kernels::copy({.x = boundary.view().select(e), .y = memory.ssm_pool.select(slot)});
  });
}

namespace {

/// Rows `rows` of `x` viewed as [T, W] (its leading dimension kept, the rest flattened).
Result<Tensor> gather(const Tensor& x, const TensorView& rows) {
  const int64_t T = x.size(0), W = x.numel() / std::max<int64_t>(T, 1);
  Tensor y = Tensor::empty({rows.size(0), W}, DType::kF32, x.device());
  HYLA_RETURN_IF_ERROR(
      kernels::gather_rows({.x = x.view().reshape({T, W}), .index = rows, .y = y}));
  return y;
}

}  // namespace

Status linear_commit_verify(const ModelConfig& config, const TensorView& conv_weight,
                            const LinearVerifyRecord& record, VerifyMode mode,
                            const LinearMemory& memory, const TensorView& rows,
                            std::span<const int32_t> last_rows, std::span<const int32_t> slots) {
  const LinearAttentionConfig& l = config.linear;
  if (record.fused_tokens > 0)
    return internal_error(
        "linear_commit_verify: a fused verify record goes to fused_commit_verify");
  const int64_t N = rows.size(0), D = record.qkv.size(1);
  // The conv over the accepted inputs from each slot's window, written back: the window advances.
  HYLA_ASSIGN_OR_RETURN(const Tensor qkv, gather(record.qkv, rows));
  Tensor mixed = Tensor::empty({N, D}, DType::kF32, qkv.device());
  HYLA_RETURN_IF_ERROR(kernels::causal_conv1d({.x = qkv,
                                               .weight = conv_weight,
                                               .bias = {},
                                               .cu_seqlens = memory.cu_seqlens,
                                               .conv_state = memory.conv_pool,
                                               .initial_slots = memory.slots,
                                               .final_slots = memory.slots,
                                               .silu = true,
                                               .y = mixed}));
  if (mode == VerifyMode::kStepStates) {  // the state after each sequence's last accepted token
    for (size_t b = 0; b < slots.size(); ++b)
      HYLA_RETURN_IF_ERROR(kernels::copy({.x = record.step_states.view().select(last_rows[b]),
                                          .y = memory.ssm_pool.select(slots[b])}));
    return ok_status();
  }
  // Replay: the recurrence over the accepted tokens from each slot's state, written back.
  const int64_t qk = l.num_k_heads * l.head_k_dim, value = l.num_v_heads * l.head_v_dim;
  HYLA_ASSIGN_OR_RETURN(Tensor g, gather(record.g, rows));
  HYLA_ASSIGN_OR_RETURN(Tensor beta, gather(record.beta, rows));
  Tensor o = Tensor::empty({N, l.num_v_heads, l.head_v_dim}, DType::kF32, qkv.device());
  kernels::GatedDeltaRuleParams p;
  p.q = mixed.view().narrow(1, 0, qk).unflatten_last(l.num_k_heads, l.head_k_dim);
  p.k = mixed.view().narrow(1, qk, qk).unflatten_last(l.num_k_heads, l.head_k_dim);
  p.v = mixed.view().narrow(1, 2 * qk, value).unflatten_last(l.num_v_heads, l.head_v_dim);
  p.g = record.g.ndim() == 3 ? g.view().unflatten_last(l.num_v_heads, l.head_k_dim) : g.view();
  p.beta = beta;
  p.cu_seqlens = memory.cu_seqlens;
  p.state_pool = memory.ssm_pool;
  p.initial_slots = memory.slots;
  p.final_slots = memory.slots;
  p.use_qk_l2norm = true;
  p.o = o;
  return kernels::gated_delta_rule_recurrent(p);
}

}  // namespace hyla::model

namespace hyla::model {

Status fused_commit_verify(const LinearVerifyRecord& record, const LinearMemory& memory,
                           const TensorView& accepted) {
  return kernels::gated_delta_rule_commit({.tokens_per_seq = record.fused_tokens,
                                           .qkv = record.qkv,
                                           .conv_state = memory.conv_pool,
                                           .step_states = record.step_states,
                                           .state_pool = memory.ssm_pool,
                                           .slots = memory.slots,
                                           .accepted = accepted});
}

}  // namespace hyla::model
