// CPU body of the fused decode / verify step and of the commit (see
// kernels/gated_delta_rule_decode.h): the CPU bodies of causal_conv1d, the gates,
// gated_delta_rule_recurrent and gated_rmsnorm composed one sequence at a time (each of them runs
// its heads or channel blocks in parallel). The conv output, g, beta and the per-step states stay
// fp32 between the ops, so the pools and step_states are rounded to their dtypes once; o is
// stored in its dtype, and the fused norm, when asked, reads it from there and writes it in place.
#include "kernels/gated_delta_rule_decode.h"

#include <cstring>
#include <vector>

#include "kernels/causal_conv1d.h"
#include "kernels/cpu/tensor_access.h"  // dispatch_float, parallel_for
#include "kernels/gated_delta_rule.h"
#include "kernels/gated_rmsnorm.h"
#include "kernels/gates.h"

namespace hyla::kernels::cpu {

namespace {

/// A contiguous host fp32 view of `shape` over `buffer` (sized by the caller).
TensorView f32_view(std::vector<float>& buffer, std::initializer_list<int64_t> shape) {
  return TensorView(buffer.data(), DType::kF32, shape);
}

}  // namespace

void gated_delta_rule_decode(const GatedDeltaRuleDecodeParams& p) {
  const DecodeShape s = decode_shape(p);
  const int64_t T = s.T, H = s.H, HV = s.HV, d_k = s.d_k, d_v = s.d_v;
  const int64_t conv_dim = s.conv_dim;
  // fp32 steps of a bf16 pool are rounded into step_states after the sequence; an fp32 pool's
  // step_states are written directly
  const bool round_steps = !p.commit && p.state_pool.dtype() != DType::kF32;

  // Scratch of one sequence, reused by the next.
  std::vector<float> mixed(size_t(T * conv_dim));            // silu(conv(qkv)): [q | k | v]
  std::vector<float> g(size_t(T * HV * (s.kda ? d_k : 1)));  // log decay
  std::vector<float> beta(size_t(T * HV));                   // write strength
  std::vector<float> steps(round_steps ? size_t(T * HV * d_v * d_k) : 0);
  int32_t cu[2] = {0, int32_t(T)};  // each call sees one sequence of T tokens

  const TensorView mixed_view = f32_view(mixed, {T, conv_dim});
  const TensorView g_view = s.kda ? f32_view(g, {T, HV, d_k}) : f32_view(g, {T, HV});
  const TensorView beta_view = f32_view(beta, {T, HV});
  const TensorView cu_seqlens(cu, DType::kI32, {2});

  const int32_t* slots = p.slots.data<int32_t>();
  for (int64_t b = 0; b < s.B; ++b) {
    if (slots[b] < 0) continue;  // padding: no pool access, o rows untouched
    const int64_t row = b * T;
    const TensorView slot = p.slots.slice(b, b + 1);  // the sequence's slot in both pools
    const TensorView commit_slot = p.commit ? slot : TensorView();

    // [q | k | v] = silu(conv(qkv)), history from the slot; the advanced window is written back
    // on commit only (verify leaves the conv pool to gated_delta_rule_commit)
    causal_conv1d({.x = p.qkv.slice(row, row + T),
                   .weight = p.conv_weight,
                   .bias = {},
                   .cu_seqlens = cu_seqlens,
                   .conv_state = p.conv_state,
                   .initial_slots = slot,
                   .final_slots = commit_slot,
                   .silu = true,
                   .y = mixed_view});

    // gates: GDN one decay per value head, KDA one per key channel; beta = sigmoid(b)
    if (s.kda) {
      kda_gate({.f = p.a.slice(row, row + T),
                .A_log = p.A_log,
                .dt_bias = p.dt_bias,
                .lower_bound = p.lower_bound,
                .g = g_view,
                .b = p.b.slice(row, row + T),
                .beta = beta_view});
    } else {
      gdn_gate({.a = p.a.slice(row, row + T),
                .b = p.b.slice(row, row + T),
                .A_log = p.A_log,
                .dt_bias = p.dt_bias,
                .g = g_view,
                .beta = beta_view});
    }

    // delta rule token by token from the slot's state (l2norm q, k; q *= scale) -> o rows; the
    // final state goes back to the slot on commit, every step's state to step_states on verify
    TensorView step_states;
    if (!p.commit)
      step_states = round_steps ? f32_view(steps, {T, HV, d_v, d_k}) : p.step_states.select(b);
    const TensorView o_rows = p.o.slice(row, row + T);
    gated_delta_rule_recurrent(
        {.q = mixed_view.narrow(1, 0, H * d_k).unflatten_last(H, d_k),
         .k = mixed_view.narrow(1, H * d_k, H * d_k).unflatten_last(H, d_k),
         .v = mixed_view.narrow(1, 2 * H * d_k, HV * d_v).unflatten_last(HV, d_v),
         .g = g_view,
         .beta = beta_view,
         .cu_seqlens = cu_seqlens,
         .state_pool = p.state_pool,
         .initial_slots = slot,
         .final_slots = commit_slot,
         .use_qk_l2norm = true,
         .scale = p.scale,
         .o = o_rows,
         .step_states = step_states,
         .chunk_states = {},
         .workspace = {}});
    if (round_steps) {
      bf16* dst = p.step_states.select(b).data<bf16>();
      for (size_t i = 0; i < steps.size(); ++i) dst[i] = f32_to_bf16(steps[i]);
    }

    // o = norm_weight * rmsnorm(o) * act(norm_gate), in place
    if (p.norm_weight.defined()) {
      gated_rmsnorm({.x = o_rows,
                     .gate = p.norm_gate.slice(row, row + T),
                     .weight = p.norm_weight,
                     .eps = p.norm_eps,
                     .act = p.norm_act,
                     .y = o_rows});
    }
  }
}

void gated_delta_rule_commit(const GatedDeltaRuleCommitParams& p) {
  const int64_t T = p.tokens_per_seq, B = p.qkv.size(0) / T, conv_dim = p.qkv.size(1);
  const int64_t history = p.conv_state.size(2);  // K-1 inputs per channel, oldest first
  const int64_t state_size = p.state_pool.size(1) * p.state_pool.size(2) * p.state_pool.size(3);
  const int64_t state_bytes = state_size * dtype_size(p.state_pool.dtype());
  const int32_t* slots = p.slots.data<int32_t>();
  const int32_t* accepted = p.accepted.data<int32_t>();
  dispatch_float(p.qkv.dtype(), [&]<typename TX>(TX) {
    dispatch_float(p.conv_state.dtype(), [&]<typename TS>(TS) {
      parallel_for(B, [&](int64_t b) {
        const int32_t slot = slots[b];
        const int64_t n = accepted[b];
        if (slot < 0 || n == 0) return;  // padding, or nothing accepted: both pools stay
        // SSM state: the verify call's state after its n-th token
        std::memcpy(p.state_pool.select(slot).raw(), p.step_states.select(b).select(n - 1).raw(),
                    size_t(state_bytes));
        // conv window: the last K-1 entries of [old window | qkv rows b T .. b T + n - 1]. Entry j
        // takes element n + j of that list; ascending j reads old entries before they are
        // overwritten (n + j > j).
        const TX* x = static_cast<const TX*>(p.qkv.raw()) + b * T * p.qkv.stride(0);
        TS* state = static_cast<TS*>(p.conv_state.raw()) + slot * p.conv_state.stride(0);
        for (int64_t c = 0; c < conv_dim; ++c) {
          TS* window = state + c * p.conv_state.stride(1);
          for (int64_t j = 0; j < history; ++j) {
            const int64_t src = n + j;
            const float value = src < history ? load_f32(window + src)
                                              : load_f32(x + (src - history) * p.qkv.stride(0) + c);
            store_f32(window + j, value);
          }
        }
      });
    });
  });
}

}  // namespace hyla::kernels::cpu
