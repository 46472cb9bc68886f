// CPU body of MoE top-k routing (see kernels/moe_route.h): tokens split into parallel blocks;
// per token, scores, optional group filter, then top_k rounds of an argmax over the eligible
// experts (top_k is small; strict > keeps the lower index on ties, like a stable sort).
#include "kernels/moe_route.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/tensor_access.h"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cpu {

namespace {

/// Index of the largest value[i] with eligible[i] set (the lowest such index on ties), or -1.
int64_t argmax_eligible(const float* value, const uint8_t* eligible, int64_t n) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (eligible[i] && (best < 0 || value[i] > value[best])) best = i;
  }
  return best;
}

}  // namespace

void moe_route(const MoeRouteParams& p) {
  const int64_t T = p.logits.size(0), E = p.logits.size(1), top_k = p.top_k;
  const int64_t num_groups = p.num_groups, group_size = E / num_groups;
  const bool group_limited = p.topk_groups < num_groups;
  const float* bias =
      p.correction_bias.defined() ? static_cast<const float*>(p.correction_bias.raw()) : nullptr;
  parallel_for_blocks(T, rows_per_task(E * top_k), [&](int64_t begin, int64_t end) {
    std::vector<float> score(static_cast<size_t>(E)), choice(static_cast<size_t>(E)),
        group_score(static_cast<size_t>(num_groups));
    std::vector<uint8_t> eligible(static_cast<size_t>(E)),
        group_eligible(static_cast<size_t>(num_groups));
    for (int64_t t = begin; t < end; ++t) {
      const float* logit = static_cast<const float*>(p.logits.raw()) + t * p.logits.stride(0);
      int32_t* ids = p.topk_ids.data<int32_t>() + t * p.topk_ids.stride(0);
      float* weights = p.topk_weights.data<float>() + t * p.topk_weights.stride(0);

      // scores: softmax = exp(l - max) / sum (as torch), or sigmoid per expert
      if (p.scoring == MoeScoring::kSoftmax) {
        float max_logit = logit[0];
        for (int64_t e = 1; e < E; ++e) max_logit = std::max(max_logit, logit[e]);
        float sum = 0.0f;
        for (int64_t e = 0; e < E; ++e) {
          score[size_t(e)] = std::exp(logit[e] - max_logit);
          sum += score[size_t(e)];
        }
        for (int64_t e = 0; e < E; ++e) score[size_t(e)] /= sum;
      } else {
        for (int64_t e = 0; e < E; ++e) score[size_t(e)] = sigmoid(logit[e]);
      }
      // choice = score + bias: what the selection ranks
      for (int64_t e = 0; e < E; ++e)
        choice[size_t(e)] = bias ? score[size_t(e)] + bias[e] : score[size_t(e)];

      std::fill(eligible.begin(), eligible.end(), uint8_t{1});
      if (group_limited) {
        // group score = the two largest choices of the group, summed; keep the best topk_groups
        for (int64_t g = 0; g < num_groups; ++g) {
          const float* c = choice.data() + g * group_size;
          float first = c[0], second = c[1];
          if (second > first) std::swap(first, second);
          for (int64_t i = 2; i < group_size; ++i) {
            if (c[i] > first) {
              second = first;
              first = c[i];
            } else if (c[i] > second) {
              second = c[i];
            }
          }
          group_score[size_t(g)] = first + second;
        }
        std::fill(group_eligible.begin(), group_eligible.end(), uint8_t{1});
        std::fill(eligible.begin(), eligible.end(), uint8_t{0});
        for (int64_t k = 0; k < p.topk_groups; ++k) {
          const int64_t g = argmax_eligible(group_score.data(), group_eligible.data(), num_groups);
          group_eligible[size_t(g)] = 0;
          std::fill_n(eligible.begin() + g * group_size, group_size, uint8_t{1});
        }
      }

      // top_k experts by choice, descending; weights are the raw scores
      float weight_sum = 0.0f;
      for (int64_t k = 0; k < top_k; ++k) {
        const int64_t e = argmax_eligible(choice.data(), eligible.data(), E);
        eligible[size_t(e)] = 0;
        ids[k] = int32_t(e);
        weights[k] = score[size_t(e)];
        weight_sum += weights[k];
      }
      if (p.renormalize) {
        const float denominator =
            p.scoring == MoeScoring::kSigmoid ? weight_sum + 1e-20f : weight_sum;
        for (int64_t k = 0; k < top_k; ++k) weights[k] /= denominator;
      }
      for (int64_t k = 0; k < top_k; ++k) weights[k] *= p.routed_scaling;
    }
  });
}

}  // namespace hyla::kernels::cpu
