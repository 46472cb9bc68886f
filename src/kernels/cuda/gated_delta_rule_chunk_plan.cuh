// The chunk numbering both CUDA chunk bodies (gated_delta_rule_chunk.cu, the fp32 one, and
// gated_delta_rule_chunk_mma.cu, the tensor-core one) compute on the device from cu_seqlens, so
// that no call waits for the host.
#pragma once

#include <cstdint>

#include "kernels/gated_delta_rule.h"

namespace hyla::kernels::cuda {

/// Sequence b owns chunks [chunk_first[b], chunk_first[b+1]); chunk i belongs to chunk_seq[i] (-1
/// past the last chunk); its state after 64 (j + 1) tokens is chunk_states entry
/// boundary_first[b] + j.
struct ChunkPlan {
  const int32_t* cu;  // [B+1]
  int64_t cu_stride;
  int T, B, max_chunks;
  int32_t* chunk_first;     // [B+1]
  int32_t* chunk_seq;       // [max_chunks]
  int32_t* boundary_first;  // [B]
};

/// Tokens [begin, end) of sequence b, clamped to [0, T] so that bad offsets (not checked on the
/// host for CUDA calls) never index outside the activations.
__device__ __forceinline__ void chunk_sequence_range(const int32_t* cu, int64_t cu_stride, int T,
                                                     int b, int& begin, int& end) {
  const int lo = cu[b * cu_stride], hi = cu[(b + 1) * cu_stride];
  begin = min(max(lo, 0), T);
  end = min(max(hi, begin), T);
}

namespace {  // one copy per body's translation unit

/// <<<1, 1>>>: fills the plan's arrays.
__global__ void chunk_plan_kernel(const __grid_constant__ ChunkPlan a) {
  int chunks = 0, boundaries = 0;
  for (int b = 0; b < a.B; ++b) {
    int begin, end;
    chunk_sequence_range(a.cu, a.cu_stride, a.T, b, begin, end);
    const int len = end - begin;
    const int n = min((len + kDeltaRuleChunk - 1) / kDeltaRuleChunk, a.max_chunks - chunks);
    a.chunk_first[b] = chunks;
    a.boundary_first[b] = boundaries;
    for (int i = 0; i < n; ++i) a.chunk_seq[chunks + i] = b;
    chunks += n;
    boundaries += len / kDeltaRuleChunk;
  }
  a.chunk_first[a.B] = chunks;
  for (int i = chunks; i < a.max_chunks; ++i) a.chunk_seq[i] = -1;
}

}  // namespace

/// A slot id usable for the pool: in [0, num_slots), else -1 (skip).
__device__ __forceinline__ int64_t chunk_pool_slot(const int32_t* slots, int64_t stride, int b,
                                                   int64_t num_slots) {
  if (slots == nullptr) return -1;
  const int32_t s = slots[b * stride];
  return s >= 0 && s < num_slots ? s : -1;
}

}  // namespace hyla::kernels::cuda
