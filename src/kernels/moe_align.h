// Token-to-expert bookkeeping of a mixture of experts: sort the (token, k) slots of a routing by
// expert (moe_align), and gather the tokens' rows into that order (moe_permute), so each expert
// reads one contiguous block of rows. The order is deterministic: slots sorted by expert, stable
// by slot index s = t * top_k + k, so the summation order of moe_combine is fixed on every device.
//   counts[e]         = #{s : topk_ids[s] == e}
//   expert_offsets[e] = counts[0] + ... + counts[e - 1]   (expert_offsets[E] = T * top_k)
//   sorted_slots[p]   = the slot at position p (rows of expert e at [offsets[e], offsets[e + 1]))
//   slot_positions[s] = p with sorted_slots[p] == s (the inverse permutation)
//   moe_permute: y[p] = x[sorted_slots[p] / top_k]
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace hyla::kernels {

struct MoeAlignParams {
  TensorView topk_ids;  ///< [T, top_k] i32 expert ids in [0, E) (moe_route), last dim contiguous
  int64_t num_experts = 0;    ///< E >= 1
  TensorView expert_offsets;  ///< out [E + 1] i32, contiguous
  TensorView sorted_slots;    ///< out [T * top_k] i32, contiguous: position -> slot
  TensorView slot_positions;  ///< out [T, top_k] i32, contiguous: slot -> position
};

/// The ids' VALUES are checked on the host for CPU calls only (no device sync on CUDA). The CUDA
/// body places an id outside [0, E) nowhere: its slot_positions entry is -1, it is left out of
/// the counts (so expert_offsets[E] < T * top_k) and the tail of sorted_slots past
/// expert_offsets[E] is left unwritten.
Status moe_align(const MoeAlignParams& p, Stream stream = {});

struct MoePermuteParams {
  TensorView x;             ///< [T, width] f32 | bf16, last dim contiguous
  TensorView sorted_slots;  ///< [N] i32 (N = T * top_k): slot s reads token s / top_k
  int64_t top_k = 1;
  TensorView y;  ///< out [N, width], x's dtype, last dim contiguous; a slot outside [0, T * top_k)
                 ///< gives a row of zeros (no value check, so no device sync)
};

Status moe_permute(const MoePermuteParams& p, Stream stream = {});

namespace cpu {
void moe_align(const MoeAlignParams& p);
void moe_permute(const MoePermuteParams& p);
}  // namespace cpu

namespace cuda {
Status moe_align(const MoeAlignParams& p, Stream stream);
Status moe_permute(const MoePermuteParams& p, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
