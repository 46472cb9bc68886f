// Weighted sum of the routed experts' rows back into token order, optionally plus a shared
// expert (HF Qwen3NextSparseMoeBlock: + sigmoid(gate) * shared; Kimi / DeepSeek-V3: + shared):
//   out[t] = (accumulate ? out[t] : 0)
//            + sum over the token's slots s, in ascending slot_positions[s] (that is, ascending
//              expert id), of topk_weights[s] * expert_out[slot_positions[s]]
//            + (shared_gate ? sigmoid(shared_gate[t]) : 1) * shared[t]      (when shared given)
// The fixed order (by expert, as a loop over experts adding into out would) makes the result
// the same on every run; a position outside [0, N) is skipped (moe_align's CUDA body gives -1
// to an id it could not place).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace hyla::kernels {

struct MoeCombineParams {
  /// [N, width] f32, rows in moe_align's sorted order, last dim contiguous; with slot_positions
  /// and topk_weights, or all three `{}` (no routed term)
  TensorView expert_out{};
  TensorView slot_positions{};  ///< [T, top_k] i32 (moe_align), last dim contiguous
  TensorView topk_weights{};    ///< [T, top_k] f32 (moe_route), last dim contiguous
  TensorView shared{};          ///< optional [T, width] f32, last dim contiguous
  TensorView shared_gate{};     ///< optional [T, 1] f32 logits (only with shared)
  bool accumulate = false;      ///< add to out's values instead of overwriting them
  TensorView out;               ///< [T, width] f32, last dim contiguous; aliases no input
};

Status moe_combine(const MoeCombineParams& p, Stream stream = {});

namespace cpu {
void moe_combine(const MoeCombineParams& p);
}  // namespace cpu

namespace cuda {
Status moe_combine(const MoeCombineParams& p, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
