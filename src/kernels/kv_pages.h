// Paged KV cache rows: where each sequence's tokens live, and the two copies between packed
// activations and pages (kernels/paged_attention.h reads the pages in place).
//   position p of sequence b  ->  row p % page_size of page page_table[b, p / page_size]
//   kv_page_write:  pages[position of token t] = rows[t]  for the T new tokens (f32 -> page dtype,
//                   bf16 rounded to nearest even); token t of sequence b (cu[b] <= t < cu[b+1]) is
//                   at position past[b] + t - cu[b]
//   kv_page_gather: out[b, p] = pages[position p of sequence b] for p < past[b] + n_b, then zeros
//                   (n_b = cu[b+1] - cu[b]); MLA expands its cached latent rows from this copy
// Pages: [num_pages, page_size, H, d] f32|bf16, last dim contiguous, other strides honoured (a
// column narrow of a wider page row is fine). Index tensors live on the kernel's device; their
// values are checked on the host for CPU calls only. On CUDA a page id outside [0, num_pages) is
// skipped (nothing written; gathered rows read as zeros).
#pragma once

#include <string_view>

#include "core/tensor.h"

namespace hyla::kernels {

/// The batch's view of a paged cache, all [.] i32 contiguous on the kernel's device.
struct PageIndex {
  TensorView cu_seqlens;  ///< [B+1]: sequence b's new tokens are rows [cu[b], cu[b+1])
  TensorView past;        ///< [B] >= 0: tokens sequence b had before its new ones
  /// [B, max_pages]: sequence b's pages in token order; entries past the pages covering
  /// past[b] + n_b positions are never read (-1 is customary)
  TensorView page_table;
};

/// Shapes, dtypes and devices of `index` for T packed tokens (kAnyDim: cu_seqlens[B] of them) over
/// pages of `page_size` rows; for a CPU `device` also its values: cu_seqlens a valid offset list
/// ending at T, past >= 0, every sequence's positions within its table, each page id read in [0,
/// num_pages). `writes`: also no two new tokens land on the same page row (a parallel body would
/// race).
Status check_page_index(std::string_view op, const PageIndex& index, int64_t T, int64_t num_pages,
                        int64_t page_size, Device device, bool writes);

struct KvPageWriteParams {
  TensorView k;          ///< [T, H, d_k] f32, last dim contiguous: the new tokens' rows
  TensorView k_pages;    ///< [num_pages, page_size, H, d_k] f32|bf16
  TensorView v{};        ///< optional [T, H, d_v] f32, written to v_pages like k
  TensorView v_pages{};  ///< [num_pages, page_size, H, d_v], k_pages' dtype (with v)
  PageIndex index;
};

Status kv_page_write(const KvPageWriteParams& p, Stream stream = {});

struct KvPageGatherParams {
  TensorView pages;  ///< [num_pages, page_size, H, d] f32|bf16
  PageIndex index;
  /// out [B, R, H, d] f32, last dim contiguous, R >= max_b past[b] + n_b; never aliases pages
  TensorView out;
};

Status kv_page_gather(const KvPageGatherParams& p, Stream stream = {});

namespace cpu {
void kv_page_write(const KvPageWriteParams& p);
void kv_page_gather(const KvPageGatherParams& p);
}  // namespace cpu

namespace cuda {
Status kv_page_write(const KvPageWriteParams& p, Stream stream);
Status kv_page_gather(const KvPageGatherParams& p, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
