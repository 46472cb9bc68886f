// CPU body of causal attention over a KV cache (see kernels/attention.h): one parallel task per
// (token, query head) pair; fp32 scores, softmax and output accumulation.
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/tensor_access.h"

namespace hyla::kernels::cpu {

void attention(const AttentionParams& p) {
  const int64_t T = p.q.size(0), HQ = p.q.size(1), d_qk = p.q.size(2);
  const int64_t HKV = p.k_cache.size(1), d_v = p.v_cache.size(2);
  const int64_t group = HQ / HKV;  // query heads per kv head
  // HF: scaling = head_dim ** -0.5 in double, applied to fp32 scores as a float
  const float scale = p.scale > 0.0f ? p.scale : float(1.0 / std::sqrt(double(d_qk)));
  const float* q = static_cast<const float*>(p.q.raw());
  const float* k = static_cast<const float*>(p.k_cache.raw());
  const float* v = static_cast<const float*>(p.v_cache.raw());
  float* o = static_cast<float*>(p.o.raw());
  const int64_t k_stride_token = p.k_cache.stride(0), v_stride_token = p.v_cache.stride(0);
  parallel_for(T * HQ, [&](int64_t pair) {
    const int64_t t = pair / HQ, h = pair % HQ, h_kv = h / group;
    const int64_t len = p.past + t + 1;  // cache rows [0, past + t] are visible
    const float* q_row = q + t * p.q.stride(0) + h * p.q.stride(1);
    const float* k_head = k + h_kv * p.k_cache.stride(1);
    const float* v_head = v + h_kv * p.v_cache.stride(1);
    // s_j = scale * <q, k_j>
    std::vector<float> prob(static_cast<size_t>(len));
    float max_score = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < len; ++j) {
      const float* k_row = k_head + j * k_stride_token;
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
    // o = sum_j p_j v_j, accumulated in fp32 scratch: o may be q, which is read above
    std::vector<float> acc(static_cast<size_t>(d_v), 0.0f);
    for (int64_t j = 0; j < len; ++j) {
      const float* v_row = v_head + j * v_stride_token;
      const float weight = prob[size_t(j)] * inv_sum;
#pragma omp simd
      for (int64_t i_v = 0; i_v < d_v; ++i_v) acc[size_t(i_v)] += weight * v_row[i_v];
    }
    std::copy(acc.begin(), acc.end(), o + t * p.o.stride(0) + h * p.o.stride(1));
  });
}

}  // namespace hyla::kernels::cpu
