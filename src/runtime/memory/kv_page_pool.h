// KvPagePool: paged KV cache for the attention layers only (linear layers keep their state in
// StatePool). A page holds `page_size` consecutive tokens of one sequence in every attention layer;
// a request's page table lists its pages in token order. A config with an MTP draft head
// (num_mtp_layers > 0) adds its full-attention layers after the model's, as global layer ids
// num_layers .. num_layers + num_mtp_layers - 1, sharing the pages. Per attention layer:
//   full attention (Qwen)  k, v    [pages, page_size, HKV, head_dim]
//   latent attention (MLA) latent  [pages, page_size, 1, kv_lora_rank + rope] rows [c | k_pe]
// head_dim (last) contiguous; f32 or bf16 (default).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "model/config.h"

namespace hyla::runtime {

struct KvPagePoolOptions {
  int64_t page_size = 64;      ///< tokens per page
  DType dtype = DType::kBF16;  ///< f32 | bf16
  Device device = Device::cpu();
};

class KvPagePool {
 public:
  /// A pool of `num_pages` pages for `config`'s attention layers, zero-filled. Errors: no
  /// attention layer, num_pages outside [1, 2^31), page_size < 1, a dtype other than f32 / bf16.
  static Result<KvPagePool> create(const model::ModelConfig& config, int64_t num_pages,
                                   KvPagePoolOptions options = {});
  /// Bytes one token occupies over all attention layers, the MTP head's included (K and V, or
  /// the MLA latent).
  static int64_t bytes_per_token(const model::ModelConfig& config, KvPagePoolOptions options = {});

  /// `pages` free page ids, all or nothing: on error nothing is taken.
  Result<std::vector<int32_t>> allocate(int64_t pages);
  /// Returns every page in `pages` to the pool, all or nothing: an id out of range, not allocated
  /// or listed twice fails the call and frees none.
  Status free(std::span<const int32_t> pages);

  int64_t capacity() const { return capacity_; }
  int64_t free_pages() const { return int64_t(free_list_.size()); }
  int64_t used_pages() const { return capacity_ - free_pages(); }
  bool is_allocated(int32_t page) const;
  /// Copies page `from` into page `to` in every attention layer (a prefix-cache hit that resumes
  /// inside a page takes its own copy of it). Both must be allocated.
  Status copy_page(int32_t from, int32_t to);
  int64_t page_size() const { return options_.page_size; }
  /// ceil(tokens / page_size): the pages a sequence of `tokens` tokens needs.
  int64_t pages_for_tokens(int64_t tokens) const;
  /// Bytes of one page over all attention layers.
  int64_t page_bytes() const { return page_bytes_; }

  /// Number of attention layers (the compact index range of the views below).
  int num_layers() const { return int(kinds_.size()); }
  /// Global layer id (the model's layers, then the MTP head's) -> compact attention index; -1 for
  /// linear layers.
  int attention_index(int layer) const;
  /// kFullAttention or kLatentAttention.
  model::MixerKind layer_kind(int attention_index) const;
  /// Full attention: K pages [pages, page_size, HKV, head_dim]. Latent attention: the latent
  /// pages [pages, page_size, 1, kv_lora_rank + qk_rope_head_dim].
  TensorView k_cache(int attention_index) const;
  /// Full attention: V pages [pages, page_size, HKV, head_dim]. Latent attention: undefined.
  TensorView v_cache(int attention_index) const;

  const KvPagePoolOptions& options() const { return options_; }

 private:
  KvPagePool() = default;

  KvPagePoolOptions options_;
  int64_t capacity_ = 0;
  int64_t page_bytes_ = 0;
  std::vector<int> attention_index_;     // per global layer
  std::vector<model::MixerKind> kinds_;  // per attention layer
  std::vector<Tensor> k_;                // per attention layer (MLA: the latent)
  std::vector<Tensor> v_;                // per attention layer (MLA: undefined)
  std::vector<int32_t> free_list_;       // a stack: back() is the next page handed out
  std::vector<uint8_t> allocated_;       // per page
};

}  // namespace hyla::runtime
