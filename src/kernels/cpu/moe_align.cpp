// CPU body of the MoE slot sort and row gather (see kernels/moe_align.h): a counting sort over
// the slots in index order (so stable by slot), then rows copied in parallel blocks.
#include "kernels/moe_align.h"

#include <cstring>
#include <vector>

#include "kernels/cpu/tensor_access.h"

namespace hyla::kernels::cpu {

void moe_align(const MoeAlignParams& p) {
  const int64_t T = p.topk_ids.size(0), K = p.topk_ids.size(1), E = p.num_experts;
  int32_t* offsets = p.expert_offsets.host<int32_t>();
  int32_t* sorted_slots = p.sorted_slots.host<int32_t>();
  int32_t* slot_positions = p.slot_positions.host<int32_t>();
  auto id_at = [&](int64_t t, int64_t k) {
    return p.topk_ids.host<int32_t>()[t * p.topk_ids.stride(0) + k];
  };
  // offsets = exclusive prefix sum of the counts per expert
  std::vector<int64_t> cursor(size_t(E) + 1, 0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k) ++cursor[size_t(id_at(t, k)) + 1];
  for (int64_t e = 0; e < E; ++e) cursor[size_t(e) + 1] += cursor[size_t(e)];
  for (int64_t e = 0; e <= E; ++e) offsets[e] = int32_t(cursor[size_t(e)]);
  // slots in index order: each takes the next position of its expert (stable by slot)
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      const int64_t slot = t * K + k, position = cursor[size_t(id_at(t, k))]++;
      sorted_slots[position] = int32_t(slot);
      slot_positions[slot] = int32_t(position);
    }
  }
}

void moe_permute(const MoePermuteParams& p) {
  const int64_t T = p.x.size(0), width = p.x.size(1), N = p.y.size(0);
  const int64_t num_slots = T * p.top_k;
  const size_t row_bytes = size_t(width) * dtype_size(p.x.dtype());
  const int32_t* sorted_slots = p.sorted_slots.host<int32_t>();
  const auto* x = static_cast<const char*>(p.x.raw());
  auto* y = static_cast<char*>(p.y.raw());
  const int64_t x_row = p.x.stride(0) * dtype_size(p.x.dtype());
  const int64_t y_row = p.y.stride(0) * dtype_size(p.y.dtype());
  parallel_for_blocks(N, rows_per_task(width), [&](int64_t begin, int64_t end) {
    for (int64_t position = begin; position < end; ++position) {
      const int64_t slot = sorted_slots[position];
      char* dst = y + position * y_row;
      if (slot < 0 || slot >= num_slots)
        std::memset(dst, 0, row_bytes);
      else
        std::memcpy(dst, x + (slot / p.top_k) * x_row, row_bytes);
    }
  });
}

}  // namespace hyla::kernels::cpu
