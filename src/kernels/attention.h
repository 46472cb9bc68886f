// Causal softmax attention of one sequence over its contiguous KV cache, with grouped KV heads
// (HF eager_attention_forward: matmul(q, k^T) * scale, causal mask, fp32 softmax, matmul(p, v)).
//   token t (absolute position past + t), query head h, kv head h / (HQ / HKV):
//   s_j = scale * <q[t, h], k_cache[j, h_kv]>,   j in [0, past + t]
//   o[t, h] = sum_j softmax(s)_j v_cache[j, h_kv]          (max subtracted before exp)
// d_qk and d_v may differ (MLA: 48 and 32). Each (t, h) pair is independent, so a prefill split
// into chunks (or followed by decode steps) gives the rows of one long prefill.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace hyla::kernels {

struct AttentionParams {
  TensorView q;  ///< [T, HQ, d_qk] f32: the T new tokens, at positions past .. past+T-1
  /// [S, HKV, d_qk] f32, rows [0, past+T) valid (the new tokens' k already written),
  /// S >= past+T; HQ is a multiple of HKV
  TensorView k_cache;
  TensorView v_cache;  ///< [S, HKV, d_v] f32
  int64_t past = 0;    ///< tokens already in the cache before these T, >= 0
  float scale = 0.0f;  ///< 0 = d_qk^-1/2 (HF: head_dim ** -0.5)
  /// out [T, HQ, d_v] f32; may alias q (same strides, d_v = d_qk), never the caches
  TensorView o;
};
// Every view has a contiguous last dim; other strides are honoured.

Status attention(const AttentionParams& p, Stream stream = {});

namespace cpu {
void attention(const AttentionParams& p);
}  // namespace cpu

}  // namespace hyla::kernels
