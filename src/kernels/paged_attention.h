// Causal GQA softmax attention of a batch's new tokens over each sequence's KV pages, read
// through a page table (HF eager_attention_forward per sequence: matmul(q, k^T) * scale, causal
// mask, fp32 softmax with the max subtracted, matmul(p, v); no sliding window).
//   token t of sequence b (position past[b] + i, i = t - cu[b]), query head h, kv head
//   h_kv = h / (HQ / HKV):
//     s_j = scale * <q[t, h], key_j>,   key_j = k at position j of sequence b (kv head h_kv),
//           and with k_rope: key_j = [k_j | k_rope_j] (MLA's decoupled key, one for all heads)
//     o[t, h] = sum_j softmax(s)_j v_j,   j in [0, past[b] + i]       (fp32 throughout)
//     optional gate: o[t, h] *= sigmoid(gate[t, h])                   (Qwen gated attention, K3
//     MLA)
// The new tokens' k / v must already be in the pages (kv_page_write). Pages are f32 or bf16 (read
// as fp32); positions map to pages as in kernels/kv_pages.h. On CUDA, a page id outside
// [0, num_pages) is skipped (its keys take no weight); a row whose keys are all skipped is 0.
// CUDA paths (kernels/cuda/paged_attention.cu): decode (T = B, one query token per sequence)
// splits each sequence's keys over several blocks and merges their partial softmax sums (the
// partials live in `workspace`); prefill (T > B) runs query tiles of one sequence per block.
#pragma once

#include "core/tensor.h"
#include "kernels/kv_pages.h"

namespace hyla::kernels {

struct PagedAttentionParams {
  TensorView q;  ///< [T, HQ, d_qk] f32 packed varlen, last dim contiguous
  /// [num_pages, page_size, HKV, d_k] f32|bf16, last dim contiguous; d_k = d_qk, or
  /// d_qk - d_rope with k_rope_pages. HQ is a multiple of HKV.
  TensorView k_pages;
  /// optional [num_pages, page_size, 1, d_rope], k_pages' dtype: appended to every head's key
  TensorView k_rope_pages{};
  TensorView v_pages;  ///< [num_pages, page_size, HKV, d_v], k_pages' dtype
  PageIndex index;     ///< cu_seqlens [B+1], past [B], page_table [B, max_pages]
  float scale = 0.0f;  ///< 0 = d_qk^-1/2 (HF: head_dim ** -0.5)
  TensorView gate{};   ///< optional [T, HQ, d_v] f32, last dim contiguous
  TensorView o;        ///< out [T, HQ, d_v] f32, last dim contiguous; aliases no input
  /// CUDA decode path: scratch of at least paged_attention_workspace_bytes(*this) bytes (any
  /// dtype), contiguous, 16-byte aligned, on the kernel's device; not needed when that is 0 (CPU,
  /// prefill, one key split). Calls that may run at the same time need separate workspaces.
  TensorView workspace{};
  /// CUDA decode path: 0 picks the number of key splits per sequence from the shapes; n in
  /// [1, kPagedAttentionMaxSplits] forces n (tests reach the merge of many splits and of one).
  int decode_splits = 0;
};
// Every view's other strides are honoured.

/// Largest d_qk and d_v the CUDA body takes (its shared-memory tiles and registers are sized for
/// it).
inline constexpr int64_t kPagedAttentionMaxHeadDim = 512;
/// Largest PagedAttentionParams::decode_splits.
inline constexpr int kPagedAttentionMaxSplits = 1024;

/// Key splits per sequence of the CUDA decode path for this call's shapes (T = B): enough blocks
/// (T * HKV * splits) for about two waves of an H200's 132 SMs, at least 64 keys a split of the
/// longest context the page table holds (max_pages * page_size); decode_splits when set. 1 when
/// the call takes the prefill path (T != B) or runs on the CPU.
int64_t paged_attention_splits(const PagedAttentionParams& p);

/// Bytes of PagedAttentionParams::workspace the call needs: with s = paged_attention_splits(p) > 1,
/// T * HQ * s partial results (running max, sum, d_v unnormalised outputs; f32), else 0.
int64_t paged_attention_workspace_bytes(const PagedAttentionParams& p);

Status paged_attention(const PagedAttentionParams& p, Stream stream = {});

namespace cpu {
void paged_attention(const PagedAttentionParams& p);
}  // namespace cpu

namespace cuda {
Status paged_attention(const PagedAttentionParams& p, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
