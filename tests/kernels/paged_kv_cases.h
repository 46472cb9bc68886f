// Inputs shared by the paged-cache tests (CPU: paged_attention_test, kv_pages_test; GPU:
// cuda/paged_attention_cuda_test, cuda/kv_pages_cuda_test): a batch of sequences with new tokens
// after `past` cached ones, their pages handed out in a shuffled order (so page ids are neither
// sorted nor contiguous), a spare page and the unused rows of each last page NaN (a read of a row
// no sequence owns poisons the output), page-table columns past each sequence's pages -1; and the
// float64 reference of paged attention read from the same (rounded) page values.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/paged_attention.h"
#include "testing.h"

namespace hyla::testing {

struct PagedCase {
  std::vector<int32_t> past;        ///< [B] cached tokens per sequence
  std::vector<int32_t> new_tokens;  ///< [B] new tokens per sequence (0 allowed)
  int64_t page_size, HQ, HKV, d_k, d_v;
  int64_t d_rope = 0;  ///< > 0: k_rope_pages [.., 1, d_rope] (MLA), q has d_k + d_rope dims
  DType page_dtype = DType::kF32;
  bool gate = false;
  float scale = 0.0f;

  int64_t B() const { return int64_t(past.size()); }
  int64_t T() const { return std::accumulate(new_tokens.begin(), new_tokens.end(), int64_t(0)); }
  std::string name() const {
    std::string s = str_cat("B", B(), "_T", T(), "_ps", page_size, "_HQ", HQ, "_HKV", HKV, "_dk",
                            d_k, "_dv", d_v);
    if (d_rope > 0) s += str_cat("_rope", d_rope);
    s += str_cat("_", dtype_name(page_dtype), gate ? "_gate" : "", "_past");
    for (int32_t p : past) s += str_cat("-", p);
    return s;
  }
};

/// Host tensors of one case. Pages hold rows [0, past + n) of each sequence: the new tokens' rows
/// are already written (paged attention's precondition).
struct PagedInputs {
  Tensor q, k_pages, k_rope_pages, v_pages, gate;
  Tensor cu_seqlens, past, page_table;
  int64_t num_pages = 0;
  std::vector<int32_t> sequence;  ///< [T] token -> its sequence

  kernels::PageIndex index() const { return {cu_seqlens, past, page_table}; }
};

/// A contiguous host copy of an f32 view (any strides).
inline Tensor contiguous_f32(const TensorView& view) {
  Tensor out = Tensor::empty(view.ndim(), view.shape(), DType::kF32);
  const std::vector<double> values = to_f64(view);
  for (size_t i = 0; i < values.size(); ++i) out.host<float>()[i] = float(values[i]);
  return out;
}

/// Page ids for every sequence (ceil(len / page_size) each) from a shuffled pool with one spare.
inline std::vector<std::vector<int32_t>> shuffled_tables(const PagedCase& c, std::mt19937& rng,
                                                         int64_t* num_pages) {
  std::vector<int64_t> pages_of(static_cast<size_t>(c.B()));
  int64_t total = 0;
  for (int64_t b = 0; b < c.B(); ++b) {
    const int64_t len = int64_t(c.past[size_t(b)]) + c.new_tokens[size_t(b)];
    pages_of[size_t(b)] = std::max<int64_t>(1, (len + c.page_size - 1) / c.page_size);
    total += pages_of[size_t(b)];
  }
  *num_pages = total + 1;
  std::vector<int32_t> ids(static_cast<size_t>(*num_pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(c.B()));
  size_t next = 0;
  for (int64_t b = 0; b < c.B(); ++b)
    for (int64_t i = 0; i < pages_of[size_t(b)]; ++i) tables[size_t(b)].push_back(ids[next++]);
  return tables;
}

/// [B, max_pages + 1] i32: each sequence's pages, then -1.
inline Tensor table_tensor(const std::vector<std::vector<int32_t>>& tables) {
  size_t width = 0;
  for (const auto& t : tables) width = std::max(width, t.size());
  Tensor out = Tensor::empty({int64_t(tables.size()), int64_t(width + 1)}, DType::kI32);
  int32_t* p = out.host<int32_t>();
  for (size_t b = 0; b < tables.size(); ++b)
    for (size_t i = 0; i <= width; ++i)
      p[b * (width + 1) + i] = i < tables[b].size() ? tables[b][i] : -1;
  return out;
}

inline Tensor cu_seqlens_tensor(const PagedCase& c) {
  std::vector<int32_t> cu = {0};
  for (int32_t n : c.new_tokens) cu.push_back(cu.back() + n);
  return int32_tensor(cu);
}

/// Pages [num_pages, page_size, H, d] of `dtype`, NaN everywhere, then each sequence's rows
/// [0, past + n) random.
inline Tensor random_pages(const PagedCase& c, const std::vector<std::vector<int32_t>>& tables,
                           int64_t num_pages, int64_t H, int64_t d, std::mt19937& rng) {
  Tensor pages = poisoned({num_pages, c.page_size, H, d}, c.page_dtype);
  const int64_t row = H * d * dtype_size(c.page_dtype);
  for (int64_t b = 0; b < c.B(); ++b) {
    const int64_t len = int64_t(c.past[size_t(b)]) + c.new_tokens[size_t(b)];
    Tensor values = random_uniform({std::max<int64_t>(len, 1), H, d}, c.page_dtype, rng);
    for (int64_t pos = 0; pos < len; ++pos) {
      const int64_t page = tables[size_t(b)][size_t(pos / c.page_size)];
      std::memcpy(
          static_cast<char*>(pages.view().raw()) + (page * c.page_size + pos % c.page_size) * row,
          static_cast<const char*>(values.view().raw()) + pos * row, size_t(row));
    }
  }
  return pages;
}

inline PagedInputs make_paged_inputs(const PagedCase& c, std::mt19937& rng) {
  PagedInputs in;
  const std::vector<std::vector<int32_t>> tables = shuffled_tables(c, rng, &in.num_pages);
  const int64_t T = c.T();
  in.q = random_uniform({T, c.HQ, c.d_k + c.d_rope}, DType::kF32, rng, -2.0f, 2.0f);
  in.k_pages = random_pages(c, tables, in.num_pages, c.HKV, c.d_k, rng);
  if (c.d_rope > 0) in.k_rope_pages = random_pages(c, tables, in.num_pages, 1, c.d_rope, rng);
  in.v_pages = random_pages(c, tables, in.num_pages, c.HKV, c.d_v, rng);
  if (c.gate) in.gate = random_uniform({T, c.HQ, c.d_v}, DType::kF32, rng, -4.0f, 4.0f);
  in.cu_seqlens = cu_seqlens_tensor(c);
  in.past = int32_tensor(c.past);
  in.page_table = table_tensor(tables);
  for (int64_t b = 0; b < c.B(); ++b)
    for (int32_t i = 0; i < c.new_tokens[size_t(b)]; ++i) in.sequence.push_back(int32_t(b));
  return in;
}

/// Element [page, row, h, i] of host pages as double.
inline double page_value(const Tensor& pages, int64_t page, int64_t row, int64_t h, int64_t i) {
  const int64_t offset = ((page * pages.size(1) + row) * pages.size(2) + h) * pages.size(3) + i;
  return pages.dtype() == DType::kF32 ? double(pages.host<float>()[offset])
                                      : double(bf16_to_f32(pages.host<bf16>()[offset]));
}

/// o [T, HQ, d_v] in float64 from the case's page values (see kernels/paged_attention.h).
inline std::vector<double> paged_attention_reference(const PagedCase& c, const PagedInputs& in) {
  const int64_t T = c.T(), d_qk = c.d_k + c.d_rope, group = c.HQ / c.HKV;
  const double scale = c.scale > 0.0f ? double(c.scale) : 1.0 / std::sqrt(double(d_qk));
  const int32_t* cu = in.cu_seqlens.host<int32_t>();
  const int32_t* table = in.page_table.host<int32_t>();
  const int64_t max_pages = in.page_table.size(1);
  std::vector<double> o(static_cast<size_t>(T * c.HQ * c.d_v));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t b = in.sequence[size_t(t)], len = c.past[size_t(b)] + (t - cu[b]) + 1;
    for (int64_t h = 0; h < c.HQ; ++h) {
      const int64_t h_kv = h / group;
      const float* q_row = in.q.host<float>() + (t * c.HQ + h) * d_qk;
      std::vector<double> score(static_cast<size_t>(len));
      for (int64_t j = 0; j < len; ++j) {
        const int64_t page = table[b * max_pages + j / c.page_size], row = j % c.page_size;
        double dot = 0;
        for (int64_t i = 0; i < c.d_k; ++i)
          dot += double(q_row[i]) * page_value(in.k_pages, page, row, h_kv, i);
        for (int64_t i = 0; i < c.d_rope; ++i)
          dot += double(q_row[c.d_k + i]) * page_value(in.k_rope_pages, page, row, 0, i);
        score[size_t(j)] = scale * dot;
      }
      const double max_score = *std::max_element(score.begin(), score.end());
      double sum = 0;
      for (double& s : score) sum += (s = std::exp(s - max_score));
      double* o_row = o.data() + (t * c.HQ + h) * c.d_v;
      for (int64_t j = 0; j < len; ++j) {
        const int64_t page = table[b * max_pages + j / c.page_size], row = j % c.page_size;
        for (int64_t i = 0; i < c.d_v; ++i)
          o_row[i] += score[size_t(j)] / sum * page_value(in.v_pages, page, row, h_kv, i);
      }
      if (c.gate)
        for (int64_t i = 0; i < c.d_v; ++i)
          o_row[i] /= 1.0 + std::exp(-double(in.gate.host<float>()[(t * c.HQ + h) * c.d_v + i]));
    }
  }
  return o;
}

/// The cases both the CPU and the GPU test run: page sizes 1 / 16 / 64, GQA 1:1 and 4:1, d 32 to
/// 256, past 0 and > 0, decode and prefill, f32 and bf16 pages, gate on and off, MLA's rope part.
inline std::vector<PagedCase> paged_cases() {
  const DType f32 = DType::kF32, bf16 = DType::kBF16;
  return {
      {{0}, {1}, 16, 4, 4, 32, 32},                                   // one token, nothing cached
      {{0, 0}, {7, 33}, 16, 8, 2, 64, 64},                            // prefill, GQA 4:1
      {{5, 0, 40}, {1, 1, 1}, 1, 4, 4, 32, 32, 0, f32, true},         // decode, page_size 1
      {{100, 17, 0}, {1, 9, 20}, 64, 8, 2, 128, 128, 0, bf16, true},  // mixed, bf16, gate
      {{63, 1}, {2, 64}, 16, 2, 2, 256, 256},                         // d 256, page boundaries
      {{30, 0}, {3, 5}, 16, 4, 4, 48, 32, 16, f32, true, 0.3f},       // MLA: d_k 48 + rope 16
      {{9, 0, 70}, {1, 0, 3}, 16, 4, 1, 96, 64, 32, bf16},            // MLA, empty sequence
      {{17}, {129}, 64, 8, 2, 64, 64, 0, bf16},                       // long prefill, odd length
  };
}

}  // namespace hyla::testing
