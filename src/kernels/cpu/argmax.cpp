// CPU body of the greedy pick (see kernels/argmax.h): one pass per row, rows in parallel.
#include "kernels/argmax.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/tensor_access.h"

namespace hyla::kernels::cpu {

void argmax(const ArgmaxParams& p) {
  const int64_t B = p.logits.size(0), V = p.logits.size(1);
  const float* logits = p.logits.host<float>();
  int32_t* ids = p.ids.host<int32_t>();
  int32_t* non_finite = p.non_finite.host<int32_t>();
  int32_t* first_bad = p.first_bad.host<int32_t>();
  parallel_for_blocks(B, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const float* row = logits + b * p.logits.stride(0);
      // strict > keeps the lowest id on ties; NaN never compares greater (and row[0] NaN -> -inf)
      float best_value = std::isnan(row[0]) ? -std::numeric_limits<float>::infinity() : row[0];
      int64_t best = 0, bad = 0, first = -1;
      for (int64_t v = 0; v < V; ++v) {
        if (row[v] > best_value) {
          best_value = row[v];
          best = v;
        }
        if (!std::isfinite(row[v])) {
          if (first < 0) first = v;
          ++bad;
        }
      }
      ids[b * p.ids.stride(0)] = int32_t(best);
      non_finite[b * p.non_finite.stride(0)] = int32_t(bad);
      first_bad[b * p.first_bad.stride(0)] = int32_t(first);
      if (p.first_bad_value.defined())
        p.first_bad_value.host<float>()[b * p.first_bad_value.stride(0)] =
            first >= 0 ? row[first] : 0.0f;
    }
  });
}

}  // namespace hyla::kernels::cpu
