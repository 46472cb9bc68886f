// Fused decode / verify step of a GDN or KDA layer (seed: decode 时 ... fused recurrent kernel,
// target_verify and update-after-verify). B sequences, each with T new tokens (T = 1: decode;
// T = 1 + drafts: speculative verify), all starting from their pool slots:
//   [q | k | v] = silu(causal_conv1d(qkv))              window from the conv-state pool
//   GDN: g = -exp(A_log[h]) softplus(a + dt_bias[h])    (one per value head)
//   KDA: g = -exp(A_log[h]) softplus(f + dt_bias[h, i])  or the safe gate
//        g = lower_bound * sigmoid(exp(A_log[h]) (f + dt_bias[h, i]))   (one per key channel)
//   beta = sigmoid(b);  q, k = l2norm(q, k);  q *= scale
//   delta rule (kernels/gated_delta_rule.h) token by token from the slot's state
//   optional: o = norm_weight * rmsnorm(o) * act(norm_gate)
// commit = true: the final SSM state and the advanced conv window are written back in place.
// commit = false (verify): every token's SSM state goes to step_states and the pools stay
// untouched; gated_delta_rule_commit then installs the state after the accepted tokens. No
// allocation and, on CUDA, no host synchronisation: a decode step can be captured in a graph.
#pragma once

#include <cstdint>
#include <optional>

#include "core/tensor.h"
#include "kernels/gated_rmsnorm.h"

namespace hyla::kernels {

/// Most tokens per sequence one decode / verify call takes (1 + 7 drafts).
inline constexpr int64_t kMaxDecodeTokens = 8;

struct GatedDeltaRuleDecodeParams {
  int64_t tokens_per_seq = 1;  ///< T, in [1, kMaxDecodeTokens]
  /// [B T, conv_dim] f32|bf16, rows b T + t: the projected channels before the conv, in the order
  /// [q (H d_k) | k (H d_k) | v (HV d_v)]; conv_dim = 2 H d_k + HV d_v.
  /// qkv, a, b and norm_gate may be row-strided views (e.g. narrow views of one fused projection
  /// [B T, total]): contiguous within a row, each row starting 16-byte aligned.
  TensorView qkv;
  TensorView conv_weight;  ///< [conv_dim, K] f32; w[c, K-1] multiplies the newest token
  TensorView conv_state;   ///< [slots, conv_dim, K-1] f32|bf16 pool, oldest input first
  /// GDN: [B T, HV] raw decay input a. KDA: [B T, HV, d_k] raw forget input f. f32|bf16.
  TensorView a;
  TensorView b;                      ///< [B T, HV] f32|bf16 raw write strength (beta = sigmoid(b))
  TensorView A_log;                  ///< [HV] f32
  TensorView dt_bias;                ///< GDN: [HV] f32. KDA: [HV, d_k] f32.
  std::optional<float> lower_bound;  ///< KDA only: the safe gate when set (K3: -5)
  TensorView state_pool;             ///< [slots, HV, d_v, d_k] f32|bf16, d_k contiguous
  /// [B] i32 on the kernel's device: each sequence's slot in both pools; -1 = padding (skipped:
  /// nothing read or written, its o rows untouched). On CUDA an id outside the pool is skipped too.
  TensorView slots;
  float scale = 0.0f;  ///< 0 = d_k^-1/2
  bool commit = true;
  /// Verify (commit = false) only: out [B, T, HV, d_v, d_k], the pool's dtype: state after each
  /// token.
  TensorView step_states;
  TensorView o;  ///< out [B T, HV, d_v] f32|bf16

  /// Optional gated RMSNorm of o (set norm_weight to enable): [d_v] f32 weight, gate [B T, HV,
  /// d_v].
  TensorView norm_weight;
  TensorView norm_gate;
  float norm_eps = 1e-6f;
  GateActivation norm_act = GateActivation::kSilu;

  /// CUDA only (the CPU body ignores it). The step may start before the kernel issued just
  /// before it on the stream has finished (programmatic dependent launch) and read the slot ids,
  /// the state pool and the conv-state pool meanwhile; qkv, a and b are read after that kernel
  /// has finished. Set it only when that kernel writes none of slots, state_pool, conv_state
  /// (e.g. the layer's input projection; not this layer's previous step or commit). The step
  /// starts early only as far as that kernel lets its dependents launch early. Only decode (T = 1)
  /// on the two block-kernel tilings the entry picks with it (below 257 (sequence, key head)
  /// units, and for key heads of 64 rows) starts early; verify (T > 1) and the other tilings
  /// ignore it (run in stream order).
  bool overlap_previous = false;

  /// CUDA only, optional (the CPU body ignores it): [B, H] i32 arrival counters on the kernel's
  /// device, all zero before the first call; every call leaves them zero again, so one buffer of
  /// B_max x H zeros (a prefix view for smaller batches) serves every decode call of a stream.
  /// With them, the blocks that share a key head's q/k conv windows are ordered by counting (the
  /// last block to have read the windows advances them) instead of by a thread-block cluster
  /// barrier, so they need not be co-scheduled in one GPC (faster at small batches:
  /// docs/perf-history.md, "GPU decode").
  /// Calls that may run at the same time (several streams) need separate buffers.
  TensorView arrivals;
  /// Optional (the CPU body ignores it): f32 scratch on the kernel's device of at least
  /// gated_delta_rule_decode_workspace_bytes(decode_shape(p)) bytes, 16-byte aligned, contiguous,
  /// that the call may overwrite; its contents need not be kept between calls. With it, CUDA
  /// decode (T = 1) batches of at least 1024 (sequence, key head) units run in two kernels: the
  /// conv, gates and inputs of each (sequence, key head) prepared once into it, then the state
  /// streamed in blocks of 8 rows (faster than one kernel at large batches: docs/perf-history.md,
  /// "GPU decode"). Calls that may run at the same time need separate workspaces.
  TensorView workspace;
};

/// After a verify call: install, per sequence, the state after its first accepted[b] tokens.
struct GatedDeltaRuleCommitParams {
  int64_t tokens_per_seq = 1;  ///< T of the verify call
  /// the verify call's [B T, conv_dim] (advances the conv window); may be row-strided as there
  TensorView qkv;
  TensorView conv_state;   ///< [slots, conv_dim, K-1] pool, updated in place
  TensorView step_states;  ///< the verify call's [B, T, HV, d_v, d_k]
  TensorView state_pool;   ///< [slots, HV, d_v, d_k], updated in place
  TensorView slots;        ///< [B] i32, -1 = skip
  /// [B] i32 in [0, T] on the kernel's device: tokens accepted; 0 leaves both pools as they are.
  TensorView accepted;
};

Status gated_delta_rule_decode(const GatedDeltaRuleDecodeParams& p, Stream stream = {});
Status gated_delta_rule_commit(const GatedDeltaRuleCommitParams& p, Stream stream = {});

/// Sizes of one decode call, read off the shapes (after check_gated_delta_rule_decode passed).
struct DecodeShape {
  int64_t T, B, H, HV, d_k, d_v, conv_dim;
  bool kda;  ///< a is the per-channel KDA input f [B T, HV, d_k]
};
DecodeShape decode_shape(const GatedDeltaRuleDecodeParams& p);

/// One sequence's part of GatedDeltaRuleDecodeParams::workspace, offsets in floats from the
/// part's start: the conv outputs q | k [H][2 d_k] and v [HV][d_v], the decays [HV] (KDA:
/// [HV][d_k]) and beta [HV], fp32; `floats`: the part's size, rounded up to 16 bytes (the parts
/// follow one another, sequence b's at b floats).
struct DecodeWorkspaceLayout {
  int64_t qk, v, decay, beta, floats;
};
DecodeWorkspaceLayout decode_workspace_layout(const DecodeShape& s);

/// Bytes of GatedDeltaRuleDecodeParams::workspace a call of this shape can use: B parts of
/// decode_workspace_layout(s).floats.
int64_t gated_delta_rule_decode_workspace_bytes(const DecodeShape& s);

/// Shapes and dtypes of p (values of device-resident index tensors are not read).
Status check_gated_delta_rule_decode(const GatedDeltaRuleDecodeParams& p);
Status check_gated_delta_rule_commit(const GatedDeltaRuleCommitParams& p);

namespace cpu {
void gated_delta_rule_decode(const GatedDeltaRuleDecodeParams& p);
void gated_delta_rule_commit(const GatedDeltaRuleCommitParams& p);
}  // namespace cpu

namespace cuda {
Status gated_delta_rule_decode(const GatedDeltaRuleDecodeParams& p, Stream stream);
Status gated_delta_rule_commit(const GatedDeltaRuleCommitParams& p, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
