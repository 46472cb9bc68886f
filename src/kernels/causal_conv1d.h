// Depthwise causal 1-D convolution over packed varlen sequences (the "short conv" before the delta
// rule; HF causal_conv1d_fn / causal_conv1d_update semantics).
//   y[t, c] = act( bias[c] + sum_{j=0}^{K-1} w[c, j] * x[t - (K-1) + j, c] )
// where positions before a sequence's first token come from its conv state (oldest first), or are
// zero when the sequence has no initial state. w[c, K-1] multiplies the current token.
// Conv state layout: pool [slot, D, K-1], the K-1 most recent inputs per channel, oldest first.
#pragma once

#include "core/tensor.h"

namespace hyla::kernels {

/// Prefill over a packed batch.
struct CausalConv1dParams {
  TensorView x;              ///< [T, D] f32|bf16, packed over sequences; last dim contiguous
  TensorView weight;         ///< [D, K] f32|bf16
  TensorView bias;           ///< optional [D] f32|bf16
  TensorView cu_seqlens;     ///< [B+1] i32, host
  TensorView conv_state;     ///< [slots, D, K-1] f32|bf16 pool; needed iff any slot array is given
  TensorView initial_slots;  ///< optional [B] i32, host: slot to read history from, -1 = zeros
  TensorView final_slots;    ///< optional [B] i32, host: slot to write the last K-1 inputs to, -1 = skip
  bool silu = true;          ///< apply SiLU to the output
  TensorView y;              ///< out [T, D] f32|bf16
};

/// Decode: one new token per sequence; slides each slot's window in place.
struct CausalConv1dUpdateParams {
  TensorView x;           ///< [B, D] f32|bf16
  TensorView weight;      ///< [D, K] f32|bf16
  TensorView bias;        ///< optional [D]
  TensorView conv_state;  ///< [slots, D, K-1] f32|bf16 pool, updated in place
  TensorView slots;       ///< [B] i32, host; -1 = padding: row skipped, y row left untouched
  bool silu = true;
  TensorView y;           ///< out [B, D] f32|bf16
};

Status causal_conv1d(const CausalConv1dParams& p, Stream stream = {});
Status causal_conv1d_update(const CausalConv1dUpdateParams& p, Stream stream = {});

namespace cpu {
void causal_conv1d(const CausalConv1dParams& p);
void causal_conv1d_update(const CausalConv1dUpdateParams& p);
}  // namespace cpu

}  // namespace hyla::kernels
