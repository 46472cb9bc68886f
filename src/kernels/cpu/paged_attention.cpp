// CPU body of paged attention (see kernels/paged_attention.h): one parallel task per (token, query
// head) pair; fp32 scores, softmax and output accumulation in the order of cpu/attention.cpp, so
// f32 pages give exactly its results.
#include "kernels/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/tensor_access.h"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cpu {

namespace {

/// The pages' element type P (float or bf16): keys and values are read as fp32.
template <typename P>
void paged_attention_typed(const PagedAttentionParams& p) {
  const int64_t T = p.q.size(0), HQ = p.q.size(1), d_qk = p.q.size(2);
  const int64_t HKV = p.k_pages.size(2), d_k = p.k_pages.size(3), d_v = p.v_pages.size(3);
  const int64_t page_size = p.k_pages.size(1), max_pages = p.index.page_table.size(1);
  const int64_t group = HQ / HKV;  // query heads per kv head
  const bool rope = p.k_rope_pages.defined();
  // HF: scaling = head_dim ** -0.5 in double, applied to fp32 scores as a float
  const float scale = p.scale > 0.0f ? p.scale : float(1.0 / std::sqrt(double(d_qk)));
  const int32_t* cu = p.index.cu_seqlens.host<int32_t>();
  const int32_t* past = p.index.past.host<int32_t>();
  const int32_t* table = p.index.page_table.host<int32_t>();
  const float* q = static_cast<const float*>(p.q.raw());
  const P* k = static_cast<const P*>(p.k_pages.raw());
  const P* k_rope = rope ? static_cast<const P*>(p.k_rope_pages.raw()) : nullptr;
  const P* v = static_cast<const P*>(p.v_pages.raw());
  float* o = static_cast<float*>(p.o.raw());
  // token t -> its sequence
  std::vector<int32_t> sequence(static_cast<size_t>(T));
  for (int64_t b = 0; b + 1 < p.index.cu_seqlens.size(0); ++b)
    std::fill(sequence.begin() + cu[b], sequence.begin() + cu[b + 1], int32_t(b));

  parallel_for(T * HQ, [&](int64_t pair) {
    const int64_t t = pair / HQ, h = pair % HQ, h_kv = h / group, b = sequence[size_t(t)];
    const int64_t len = int64_t(past[b]) + (t - cu[b]) + 1;  // positions [0, past + i] visible
    const int32_t* pages = table + b * max_pages;
    // row of position j in a page tensor, head `head`
    auto row = [&](const P* base, const TensorView& view, int64_t j, int64_t head) {
      return base + int64_t(pages[j / page_size]) * view.stride(0) +
             (j % page_size) * view.stride(1) + head * view.stride(2);
    };
    const float* q_row = q + t * p.q.stride(0) + h * p.q.stride(1);
    // key / value rows as fp32: read in place for f32 pages without a rope part, else widened
    // (and for MLA joined [k | k_rope]) into scratch first
    std::vector<float> key(static_cast<size_t>(d_qk)), value(static_cast<size_t>(d_v));
    auto key_row = [&](int64_t j) -> const float* {
      const P* k_row = row(k, p.k_pages, j, h_kv);
      if constexpr (std::is_same_v<P, float>)
        if (!rope) return k_row;
      for (int64_t i = 0; i < d_k; ++i) key[size_t(i)] = load_f32(k_row + i);
      if (rope) {
        const P* r_row = row(k_rope, p.k_rope_pages, j, 0);
        for (int64_t i = d_k; i < d_qk; ++i) key[size_t(i)] = load_f32(r_row + (i - d_k));
      }
      return key.data();
    };
    auto value_row = [&](int64_t j) -> const float* {
      const P* v_row = row(v, p.v_pages, j, h_kv);
      if constexpr (std::is_same_v<P, float>) return v_row;
      for (int64_t i = 0; i < d_v; ++i) value[size_t(i)] = load_f32(v_row + i);
      return value.data();
    };
    // s_j = scale * <q, k_j>
    std::vector<float> prob(static_cast<size_t>(len));
    float max_score = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < len; ++j) {
      const float* k_row = key_row(j);
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t i_k = 0; i_k < d_qk; ++i_k) dot += q_row[i_k] * k_row[i_k];
      prob[size_t(j)] = dot * scale;
      max_score = std::max(max_score, prob[size_t(j)]);
    }
    // p_j = exp(s_j - max) / sum_j exp(s_j - max)
    float sum = 0.0f;
    for (int64_t j = 0; j < len; ++j) {
      prob[size_t(j)] = std::exp(prob[size_t(j)] - max_score);
      sum += prob[size_t(j)];
    }
    const float inv_sum = 1.0f / sum;
    // o = sum_j p_j v_j
    std::vector<float> acc(static_cast<size_t>(d_v), 0.0f);
    for (int64_t j = 0; j < len; ++j) {
      const float* v_row = value_row(j);
      const float weight = prob[size_t(j)] * inv_sum;
#pragma omp simd
      for (int64_t i_v = 0; i_v < d_v; ++i_v) acc[size_t(i_v)] += weight * v_row[i_v];
    }
    // o *= sigmoid(gate)
    if (p.gate.defined()) {
      const float* g =
          static_cast<const float*>(p.gate.raw()) + t * p.gate.stride(0) + h * p.gate.stride(1);
      for (int64_t i_v = 0; i_v < d_v; ++i_v) acc[size_t(i_v)] *= sigmoid(g[i_v]);
    }
    std::copy(acc.begin(), acc.end(), o + t * p.o.stride(0) + h * p.o.stride(1));
  });
}

}  // namespace

void paged_attention(const PagedAttentionParams& p) {
  dispatch_float(p.k_pages.dtype(), [&]<typename P>(P) { paged_attention_typed<P>(p); });
}

}  // namespace hyla::kernels::cpu
