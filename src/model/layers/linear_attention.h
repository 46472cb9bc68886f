// What the GDN and KDA layers share, over the sequences of a LinearMemory: the short conv over
// [q | k | v] and the delta rule, each in its decode form when every sequence has one new token
// (conv window slide, recurrent rule) and its prefill form otherwise (varlen conv, extend).
#pragma once

#include <initializer_list>
#include <span>

#include "core/tensor.h"
#include "kernels/gated_delta_rule_decode.h"
#include "model/config.h"
#include "model/layer_state.h"

namespace hyla::model {

/// True when this step of the layer runs the fused decode kernel
/// (kernels/gated_delta_rule_decode.h: conv, gates, l2norm, rule and gated norm in one call)
/// instead of the separate ops; only decode steps (one new token per sequence) can. By
/// memory.backends.decode: `ops` never; `auto` when the step is on CUDA and the CUDA kernel takes
/// the shapes (d_k = d_v in {64, 128}, a conv of 2 to 4 taps, f32 conv weight / A_log / dt_bias /
/// norm weight); `fused` always, and an error naming the reason where the kernel cannot take the
/// shapes on this device (the CPU body: a conv of 2 to 4 taps and those f32 weights; CUDA: also
/// the head sizes).
/// Verify steps (memory.verify) too, by backends.verify_backend(), where the record keeps
/// per-token states (kStepStates) and every sequence has the same T <= kMaxDecodeTokens tokens
/// (fused_verify_tokens): the kernel writes each token's state and the pools stay as they are.
Result<bool> use_fused_decode(const ModelConfig& config, const LinearMemory& memory,
                              const TensorView& x,
                              std::initializer_list<const Tensor*> f32_weights);

/// A verify step the fused kernel can take: its tokens per sequence; else 0.
int64_t fused_verify_tokens(const LinearMemory& memory);

/// Before the fused kernel runs a verify step (no-op otherwise): its per-token states go to the
/// record ([B, T, HV, d_v, d_k], the pool's dtype), its conv inputs are kept there (f32).
Status fused_verify_outputs(const LinearMemory& memory, kernels::GatedDeltaRuleDecodeParams& p);

/// The commit of a fused verify record: one kernel (gated_delta_rule_commit) installs each
/// sequence's conv window and state after its accepted tokens; memory.slots the verify step's
/// slots, `accepted` [B] i32 on the device.
Status fused_commit_verify(const LinearVerifyRecord& record, const LinearMemory& memory,
                           const TensorView& accepted);

/// `view` (a column range of a fused projection) as the fused decode entry reads it: the view
/// itself when it is contiguous within a row and its rows start 16-byte aligned (the entry's
/// row-strided form), else a contiguous copy held in `storage`.
Result<TensorView> decode_rows(const TensorView& view, Tensor& storage);

/// Fresh state of a GDN or KDA layer: conv [1, conv_dim, K-1] and SSM [1, HV, d_v, d_k], zeros.
LayerState linear_new_state(const ModelConfig& config);

/// mixed = silu(causal_conv1d(qkv)) with each sequence's window in its slot; qkv, mixed:
/// [T, conv_dim].
Status short_conv_silu(const TensorView& qkv, const TensorView& conv_weight,
                       const LinearMemory& memory, const TensorView& mixed);

/// o = gated_delta_rule(q, k, v, g, beta) from and back to each sequence's slot (q/k l2norm in
/// the kernel, scale d_k^-1/2). g: [T, HV] (GDN) or [T, HV, d_k] (KDA). Decode steps run the
/// recurrent rule; prefill steps the algorithm memory.backends.prefill names (auto:
/// gated_delta_rule_extend's choice).
Status delta_rule(const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& g, const TensorView& beta, const LinearMemory& memory,
                  const TensorView& o);

/// After a verify step (model/verify.h): installs in each sequence's slot the conv window and SSM
/// state after its accepted tokens. `memory` describes the accepted tokens only (cu_seqlens over
/// them, slots on the device), `rows` [N] i32 (device) their rows in the verify step;
/// `last_rows` and `slots` (host) each sequence's last accepted row and its slot.
Status linear_commit_verify(const ModelConfig& config, const TensorView& conv_weight,
                            const LinearVerifyRecord& record, VerifyMode mode,
                            const LinearMemory& memory, const TensorView& rows,
                            std::span<const int32_t> last_rows, std::span<const int32_t> slots);

}  // namespace hyla::model
