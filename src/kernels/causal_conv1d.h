// Depthwise causal 1-D convolution over packed varlen sequences (the "short conv" before the delta
// rule; HF causal_conv1d_fn / causal_conv1d_update semantics).
//   y[t, c] = act( bias[c] + sum_{j=0}^{K-1} w[c, j] * x[t - (K-1) + j, c] )
// where positions before a sequence's first token come from its conv state (oldest first), or are
// zero when the sequence has no initial state. w[c, K-1] multiplies the current token.
// Conv state layout: pool [slot, D, K-1], the K-1 most recent inputs per channel, oldest first.
// The pool may be a strided view (e.g. one layer's part of a per-slot buffer); its last dim is
// contiguous. Supported kernel sizes K: 1 to kMaxCausalConvKernel (models use 4).
// The final state is the last K-1 inputs of history + tokens, so a sequence shorter than K-1 keeps
// part of its history; the final slot may equal the initial slot (in-place update).
// Slot rules (checked on CPU calls; a CUDA caller keeps them): a slot is written by at most one
// sequence / row, and a slot that one sequence writes is not read by another in the same call.
#pragma once

#include "core/tensor.h"

namespace hyla::kernels {

/// Largest conv kernel size K the bodies support.
inline constexpr int kMaxCausalConvKernel = 8;

/// Prefill over a packed batch.
struct CausalConv1dParams {
  TensorView x;              ///< [T, D] f32|bf16, packed over sequences; last dim contiguous
  TensorView weight;         ///< [D, K] f32|bf16
  TensorView bias;           ///< optional [D] f32|bf16
  TensorView cu_seqlens;     ///< [B+1] i32 on x's device (values checked on CPU calls only)
  TensorView conv_state;     ///< [slots, D, K-1] f32|bf16 pool; needed iff any slot array is given
  TensorView initial_slots;  ///< optional [B] i32 on x's device: history slot, -1 = zeros
  TensorView final_slots;    ///< optional [B] i32 on x's device: last K-1 inputs' slot, -1 = skip
  bool silu = true;          ///< apply SiLU to the output
  TensorView y;              ///< out [T, D] f32|bf16; must not overlap x
};

/// Decode: one new token per sequence; slides each slot's window in place.
struct CausalConv1dUpdateParams {
  TensorView x;           ///< [B, D] f32|bf16
  TensorView weight;      ///< [D, K] f32|bf16
  TensorView bias;        ///< optional [D]
  TensorView conv_state;  ///< [slots, D, K-1] f32|bf16 pool, updated in place
  TensorView slots;       ///< [B] i32 on x's device; -1 = padding: row skipped, y row untouched
  bool silu = true;       ///< apply SiLU to the output
  TensorView y;           ///< out [B, D] f32|bf16; must not overlap x
};

Status causal_conv1d(const CausalConv1dParams& p, Stream stream = {});
Status causal_conv1d_update(const CausalConv1dUpdateParams& p, Stream stream = {});

namespace cpu {
void causal_conv1d(const CausalConv1dParams& p);
void causal_conv1d_update(const CausalConv1dUpdateParams& p);
}  // namespace cpu

namespace cuda {
Status causal_conv1d(const CausalConv1dParams& p, Stream stream);
Status causal_conv1d_update(const CausalConv1dUpdateParams& p, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
