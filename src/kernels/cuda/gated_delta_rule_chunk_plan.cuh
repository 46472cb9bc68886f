// What both CUDA chunk bodies (gated_delta_rule_chunk.cu, the fp32 one, and
// gated_delta_rule_chunk_mma.cu, the tensor-core one) share: the call's operands as the kernels
// read them (ChunkCall, filled once on the host), and the chunk numbering, computed on the device
// from cu_seqlens so that no call waits for the host.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/gated_delta_rule.h"

namespace hyla::kernels::cuda {

/// The operands of one gated_delta_rule_chunk call; strides in elements. Each body's kernel
/// arguments extend it with their workspace regions.
struct ChunkCall {
  const void* q;                                           // [T, H, d_k]
  const void* k;                                           // [T, H, d_k]
  const void* v;                                           // [T, HV, d_v]
  void* o;                                                 // [T, HV, d_v]
  int64_t q_st, q_sh, k_st, k_sh, v_st, v_sh, o_st, o_sh;  // token and head strides
  bool q_bf16, k_bf16, v_bf16, o_bf16;
  const float* g;  // [T, HV] (GDN) or [T, HV, d_k] (KDA), last dim contiguous
  int64_t g_st, g_sh;
  bool per_channel;
  const float* beta;  // [T, HV]
  int64_t beta_st, beta_sh;
  const int32_t* cu;  // [B+1]
  int64_t cu_stride;
  void* pool;  // [slots, HV, d_v, d_k] contiguous; null when no slot array is given
  bool pool_bf16;
  int64_t num_slots;
  const int32_t* initial_slots;  // [B] or null (zero initial states)
  int64_t initial_stride;
  const int32_t* final_slots;  // [B] or null (no commit)
  int64_t final_stride;
  float* chunk_states;  // [num_chunk_states, HV, d_v, d_k] contiguous, or null
  int64_t num_chunk_states;
  bool l2norm;
  float scale;
  int T, B, H, HV, group, d_k, d_v;
  // the plan's workspace regions (ChunkWorkspaceLayout)
  int max_chunks;
  int32_t* chunk_first;     // [B+1]
  int32_t* chunk_seq;       // [max_chunks]
  int32_t* boundary_first;  // [B]
};

/// p's operands and the plan's regions of its workspace.
inline ChunkCall chunk_call(const GatedDeltaRuleParams& p, const ChunkWorkspaceShape& shape,
                            const ChunkWorkspaceLayout& layout) {
  ChunkCall c{};
  c.q = p.q.raw();
  c.k = p.k.raw();
  c.v = p.v.raw();
  c.o = p.o.raw();
  c.q_st = p.q.stride(0), c.q_sh = p.q.stride(1);
  c.k_st = p.k.stride(0), c.k_sh = p.k.stride(1);
  c.v_st = p.v.stride(0), c.v_sh = p.v.stride(1);
  c.o_st = p.o.stride(0), c.o_sh = p.o.stride(1);
  c.q_bf16 = p.q.dtype() == DType::kBF16;
  c.k_bf16 = p.k.dtype() == DType::kBF16;
  c.v_bf16 = p.v.dtype() == DType::kBF16;
  c.o_bf16 = p.o.dtype() == DType::kBF16;
  c.g = ptr<const float>(p.g);
  c.g_st = p.g.stride(0), c.g_sh = p.g.stride(1);
  c.per_channel = shape.per_channel;
  c.beta = ptr<const float>(p.beta);
  c.beta_st = p.beta.stride(0), c.beta_sh = p.beta.stride(1);
  c.cu = ptr<const int32_t>(p.cu_seqlens);
  c.cu_stride = p.cu_seqlens.stride(0);
  const bool uses_pool = p.initial_slots.defined() || p.final_slots.defined();
  c.pool = uses_pool ? p.state_pool.raw() : nullptr;
  c.pool_bf16 = uses_pool && p.state_pool.dtype() == DType::kBF16;
  c.num_slots = uses_pool ? p.state_pool.size(0) : 0;
  c.initial_slots = p.initial_slots.defined() ? ptr<const int32_t>(p.initial_slots) : nullptr;
  c.initial_stride = p.initial_slots.defined() ? p.initial_slots.stride(0) : 0;
  c.final_slots = p.final_slots.defined() ? ptr<const int32_t>(p.final_slots) : nullptr;
  c.final_stride = p.final_slots.defined() ? p.final_slots.stride(0) : 0;
  c.chunk_states = p.chunk_states.defined() ? ptr<float>(p.chunk_states) : nullptr;
  c.num_chunk_states = p.chunk_states.defined() ? p.chunk_states.size(0) : 0;
  c.l2norm = p.use_qk_l2norm;
  c.scale = p.scale > 0.0f ? p.scale : 1.0f / std::sqrt(float(shape.d_k));
  c.T = int(shape.T), c.B = int(shape.B), c.H = int(shape.H), c.HV = int(shape.HV);
  c.group = shape.H > 0 ? int(shape.HV / shape.H) : 0;
  c.d_k = int(shape.d_k), c.d_v = int(shape.d_v);
  float* ws = ptr<float>(p.workspace);
  c.max_chunks = int(layout.max_chunks);
  c.chunk_first = reinterpret_cast<int32_t*>(ws + layout.chunk_first);
  c.chunk_seq = reinterpret_cast<int32_t*>(ws + layout.chunk_seq);
  c.boundary_first = reinterpret_cast<int32_t*>(ws + layout.boundary_first);
  return c;
}

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

/// Numbers c's chunks on stream s (the first launch of either body).
inline void launch_chunk_plan(const ChunkCall& c, cudaStream_t s) {
  chunk_plan_kernel<<<1, 1, 0, s>>>(ChunkPlan{.cu = c.cu,
                                              .cu_stride = c.cu_stride,
                                              .T = c.T,
                                              .B = c.B,
                                              .max_chunks = c.max_chunks,
                                              .chunk_first = c.chunk_first,
                                              .chunk_seq = c.chunk_seq,
                                              .boundary_first = c.boundary_first});
  HYLA_CUDA_CHECK_LAUNCH();
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
