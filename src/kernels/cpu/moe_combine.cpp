// CPU body of the MoE combine (see kernels/moe_combine.h): tokens in parallel blocks; per token
// its K positions sorted ascending, then each weighted expert row added into the output row in
// that order, then the shared row.
#include "kernels/moe_combine.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/tensor_access.h"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cpu {

void moe_combine(const MoeCombineParams& p) {
  const int64_t T = p.out.size(0), width = p.out.size(1);
  const bool routed = p.expert_out.defined();
  const int64_t K = routed ? p.slot_positions.size(1) : 0;
  const int64_t N = routed ? p.expert_out.size(0) : 0;
  parallel_for_blocks(T, rows_per_task(width * (K + 1)), [&](int64_t begin, int64_t end) {
    std::vector<std::pair<int32_t, float>> terms(static_cast<size_t>(K));  // (position, weight)
    for (int64_t t = begin; t < end; ++t) {
      float* dst = p.out.host<float>() + t * p.out.stride(0);
      if (!p.accumulate) std::memset(dst, 0, size_t(width) * sizeof(float));
      if (routed) {
        const int32_t* position = p.slot_positions.host<int32_t>() + t * p.slot_positions.stride(0);
        const float* weight = p.topk_weights.host<float>() + t * p.topk_weights.stride(0);
        for (int64_t k = 0; k < K; ++k) terms[size_t(k)] = {position[k], weight[k]};
        std::sort(terms.begin(), terms.end(),
                  [](const auto& a, const auto& b) { return a.first < b.first; });
        for (const auto& [row, w] : terms) {
          if (row < 0 || row >= N) continue;
          const float* src = p.expert_out.host<float>() + row * p.expert_out.stride(0);
          for (int64_t i = 0; i < width; ++i) dst[i] += w * src[i];
        }
      }
      if (p.shared.defined()) {
        const float s = p.shared_gate.defined()
                            ? sigmoid(p.shared_gate.host<float>()[t * p.shared_gate.stride(0)])
                            : 1.0f;
        const float* src = p.shared.host<float>() + t * p.shared.stride(0);
        for (int64_t i = 0; i < width; ++i) dst[i] += s * src[i];
      }
    }
  });
}

}  // namespace hyla::kernels::cpu
