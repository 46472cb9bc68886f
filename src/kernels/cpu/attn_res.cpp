// CPU body of the Attention-Residual mixture (see kernels/attn_res.h): tokens split into parallel
// blocks; per token the n + 1 scores, their softmax, then one pass over the rows for the mixture.
#include "kernels/attn_res.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/tensor_access.h"

namespace hyla::kernels::cpu {

void attn_res(const AttnResParams& p) {
  const int64_t T = p.partial.size(0), d = p.partial.size(1);
  const int64_t n = p.blocks.defined() ? p.blocks.size(1) : 0;
  std::vector<float> cw(static_cast<size_t>(d));
  for (int64_t i = 0; i < d; ++i) cw[size_t(i)] = load_f32_at(p.cw, i * p.cw.stride(0));
  const float* blocks = p.blocks.defined() ? static_cast<const float*>(p.blocks.raw()) : nullptr;
  const float* partial = static_cast<const float*>(p.partial.raw());
  float* y = static_cast<float*>(p.y.raw());
  float* probs = p.probs.defined() ? static_cast<float*>(p.probs.raw()) : nullptr;
  parallel_for_blocks(T, rows_per_task((n + 2) * d), [&](int64_t begin, int64_t end) {
    std::vector<const float*> rows(static_cast<size_t>(n + 1));
    std::vector<float> weight(static_cast<size_t>(n + 1));
    for (int64_t t = begin; t < end; ++t) {
      // rows: the n block snapshots of token t, then its partial sum
      for (int64_t j = 0; j < n; ++j)
        rows[size_t(j)] = blocks + t * p.blocks.stride(0) + j * p.blocks.stride(1);
      rows[size_t(n)] = partial + t * p.partial.stride(0);
      // score_j = rsqrt(mean(row^2) + eps) * (row . cw): the RMSNorm's scale factors out of the dot
      float max_score = -INFINITY;
      for (int64_t j = 0; j <= n; ++j) {
        const float* row = rows[size_t(j)];
        float sum_sq = 0.0f, dot = 0.0f;
        for (int64_t i = 0; i < d; ++i) {
          sum_sq += row[i] * row[i];
          dot += row[i] * cw[size_t(i)];
        }
        weight[size_t(j)] = dot / std::sqrt(sum_sq / float(d) + p.eps);
        max_score = std::max(max_score, weight[size_t(j)]);
      }
      // p = softmax(score)
      float total = 0.0f;
      for (int64_t j = 0; j <= n; ++j) {
        weight[size_t(j)] = std::exp(weight[size_t(j)] - max_score);
        total += weight[size_t(j)];
      }
      for (int64_t j = 0; j <= n; ++j) weight[size_t(j)] /= total;
      if (probs)
        for (int64_t j = 0; j <= n; ++j) probs[t * p.probs.stride(0) + j] = weight[size_t(j)];
      // y = sum_j p_j rows_j
      float* y_row = y + t * p.y.stride(0);
      for (int64_t i = 0; i < d; ++i) y_row[i] = weight[0] * rows[0][i];
      for (int64_t j = 1; j <= n; ++j) {
        const float* row = rows[size_t(j)];
        const float w = weight[size_t(j)];
        for (int64_t i = 0; i < d; ++i) y_row[i] += w * row[i];
      }
    }
  });
}

}  // namespace hyla::kernels::cpu
