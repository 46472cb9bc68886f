// The MTP draft head's test scene, shared by the CPU test (mtp_test.cpp) and the CUDA one
// (cuda/mtp_cuda_test.cpp): the MTP golden sets (tests/data/golden/<arch>_mtp, made by
// tools/make_mtp_model.py), pooled memory for a few sequences (linear-state slots, and KV pages
// for the model's attention layers and the MTP layer, NaN-poisoned so rows nothing wrote fail),
// and the batches of a draft: the target's step, the MTP prefill over its positions, then a
// single row and a deeper draft per sequence.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/test_files.h"
#include "testing.h"

namespace hyla::testing {

/// The MTP sets derive from the committed golden sets (not $HYLA_GOLDEN_DIR's).
inline std::vector<std::string> mtp_arch_names() { return {"qwen3_next", "qwen3_5"}; }
inline std::string mtp_model_dir(const std::string& arch) {
  return test_data_dir() + "/golden/" + arch + "_mtp";
}

/// Pools for `slots` sequences and `pages` KV pages of `page_size` tokens on `device`: every
/// linear layer's conv and SSM slots (zeros), every full-attention layer's K and V pages, the MTP
/// layers' after the model's (global ids num_layers + k), NaN-filled.
struct PooledMemory {
  model::BatchMemory memory;
  std::vector<Tensor> owned;

  PooledMemory(const model::ModelConfig& c, int64_t slots, int64_t pages, int64_t page_size,
               Device device) {
    const int64_t L = c.num_layers, kv_layers = L + c.num_mtp_layers;
    memory.conv_state.resize(size_t(L));
    memory.ssm_state.resize(size_t(L));
    memory.k_pages.resize(size_t(kv_layers));
    memory.v_pages.resize(size_t(kv_layers));
    memory.page_size = page_size;
    auto keep = [&](Tensor t) {
      owned.push_back(device.is_cpu() ? t : t.to(device));
      return owned.back().view();
    };
    const model::LinearAttentionConfig& l = c.linear;
    const model::FullAttentionConfig& a = c.attention;
    for (int64_t i = 0; i < kv_layers; ++i) {
      if (i < L && model::is_linear_mixer(c.mixers[size_t(i)])) {
        memory.conv_state[size_t(i)] =
            keep(Tensor::zeros({slots, l.conv_dim(), l.conv_kernel - 1}, DType::kF32));
        memory.ssm_state[size_t(i)] =
            keep(Tensor::zeros({slots, l.num_v_heads, l.head_v_dim, l.head_k_dim}, DType::kF32));
        continue;
      }
      memory.k_pages[size_t(i)] =
          keep(poisoned({pages, page_size, a.num_kv_heads, a.head_dim}, DType::kF32));
      memory.v_pages[size_t(i)] =
          keep(poisoned({pages, page_size, a.num_kv_heads, a.head_dim}, DType::kF32));
    }
  }
};

/// A batch of sequences: sequence b holds tokens[b] at positions past[b]... on page_tables[b].
inline model::Batch make_batch(const std::vector<std::vector<int32_t>>& tokens,
                               const std::vector<int64_t>& past,
                               const std::vector<std::vector<int32_t>>& page_tables,
                               bool logits_all) {
  model::Batch batch;
  batch.cu_seqlens = {0};
  for (size_t b = 0; b < tokens.size(); ++b) {
    batch.tokens.insert(batch.tokens.end(), tokens[b].begin(), tokens[b].end());
    batch.cu_seqlens.push_back(int32_t(batch.tokens.size()));
    batch.state_slots.push_back(int32_t(b));
  }
  batch.past = past;
  batch.page_tables = page_tables;
  batch.logits_all = logits_all;
  return batch;
}

/// Rows [begin, begin + count) of a [T, H] tensor of sequences packed one after another, for the
/// rows picked per sequence: rows[b] = (first row in the source, count).
inline Tensor gather_host_rows(const Tensor& x,
                               const std::vector<std::pair<int64_t, int64_t>>& rows) {
  const Tensor host = x.device().is_cpu() ? x : x.to(Device::cpu());
  const int64_t H = host.size(1);
  int64_t T = 0;
  for (const auto& [begin, count] : rows) T += count;
  Tensor out = Tensor::empty({T, H}, DType::kF32);
  int64_t at = 0;
  for (const auto& [begin, count] : rows) {
    std::copy_n(host.host<float>() + begin * H, count * H, out.host<float>() + at * H);
    at += count;
  }
  return out;
}

/// The scene: two sequences (8 and 5 target tokens, pages of 4 tokens in scattered page ids).
/// The target runs every token; the MTP prefill covers positions 0..n-3 (next tokens 1..n-2),
/// the single-row call position n-2 (next token n-1), and the deeper draft position n-1 with the
/// single row's output as its hidden and a chosen draft token.
struct MtpScene {
  static constexpr int64_t kPageSize = 4, kPages = 6;
  std::vector<std::vector<int32_t>> tokens = {{17, 250, 3, 499, 42, 8, 311, 77},
                                              {120, 5, 460, 64, 301}};
  std::vector<std::vector<int32_t>> pages = {{4, 1}, {0, 5}};
  std::vector<int32_t> drafts = {90, 411};  ///< the deeper draft's token per sequence

  int64_t length(size_t b) const { return int64_t(tokens[b].size()); }
  /// The target's step over every token, logits of every row.
  model::Batch target(bool logits_all) const {
    return make_batch(tokens, {0, 0}, pages, logits_all);
  }
  /// MTP prefill: rows at positions 0..n-3 with tokens 1..n-2.
  model::Batch mtp_prefill() const {
    std::vector<std::vector<int32_t>> next;
    for (size_t b = 0; b < tokens.size(); ++b)
      next.emplace_back(tokens[b].begin() + 1, tokens[b].end() - 1);
    return make_batch(next, {0, 0}, pages, true);
  }
  /// MTP single row at position n-2 with token n-1 (logits of the last rows only).
  model::Batch mtp_row() const {
    return make_batch({{tokens[0].back()}, {tokens[1].back()}}, {length(0) - 2, length(1) - 2},
                      pages, false);
  }
  /// The deeper draft at position n-1 with the drafted token.
  model::Batch mtp_deeper() const {
    return make_batch({{drafts[0]}, {drafts[1]}}, {length(0) - 1, length(1) - 1}, pages, false);
  }
  /// The target's final hidden rows each MTP call reads, from the target step's export [T, H].
  Tensor prefill_hidden(const Tensor& target_hidden) const {
    return gather_host_rows(target_hidden, {{0, length(0) - 2}, {length(0), length(1) - 2}});
  }
  Tensor row_hidden(const Tensor& target_hidden) const {
    return gather_host_rows(target_hidden, {{length(0) - 2, 1}, {length(0) + length(1) - 2, 1}});
  }
};

}  // namespace hyla::testing
