// CPU body of the grouped expert projection (see kernels/moe_grouped_linear.h): the dense
// projection on each non-empty expert's block of rows, so a mixture of experts gives the numbers
// one kernels::linear call per expert gives.
#include "kernels/moe_grouped_linear.h"

#include "kernels/linear.h"

namespace hyla::kernels::cpu {

void moe_grouped_linear(const MoeGroupedLinearParams& p) {
  const int64_t E = p.weight.size(0);
  const int32_t* offsets = p.expert_offsets.host<int32_t>();
  for (int64_t e = 0; e < E; ++e) {
    const int64_t begin = offsets[e], end = offsets[e + 1];
    if (begin == end) continue;
    linear({.x = p.x.slice(begin, end),
            .weight = p.weight.select(e),
            .bias = {},
            .y = p.y.slice(begin, end)});
  }
}

}  // namespace hyla::kernels::cpu
