// CPU body of the rotary embedding (see kernels/rope.h): tokens split into parallel blocks; each
// token's cos / sin are computed once (fp32, as HF) and applied to all of its heads.
#include "kernels/rope.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/tensor_access.h"

namespace hyla::kernels::cpu {

void rope(const RopeParams& p) {
  const int64_t T = p.x.size(0), heads = p.x.size(1);
  const int64_t half = p.rotary_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) inv_freq[size_t(i)] = rope_inv_freq(p.theta, p.rotary_dim, i);
  float* x = static_cast<float*>(p.x.raw());
  const int32_t* positions = p.positions.host<int32_t>();
  parallel_for_blocks(T, rows_per_task(heads * p.rotary_dim), [&](int64_t begin, int64_t end) {
    std::vector<float> cos_angle(static_cast<size_t>(half)), sin_angle(static_cast<size_t>(half));
    for (int64_t t = begin; t < end; ++t) {
      // angle = float(pos) * inv_freq (HF: an fp32 outer product), then fp32 cos / sin
      const float pos = float(positions[t * p.positions.stride(0)]);
      for (int64_t i = 0; i < half; ++i) {
        const float angle = pos * inv_freq[size_t(i)];
        cos_angle[size_t(i)] = std::cos(angle);
        sin_angle[size_t(i)] = std::sin(angle);
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* x_row = x + t * p.x.stride(0) + h * p.x.stride(1);
        // rotate_half: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin) on the first rotary_dim dims
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = x_row[i], x2 = x_row[i + half];
          const float c = cos_angle[size_t(i)], s = sin_angle[size_t(i)];
          x_row[i] = x1 * c - x2 * s;
          x_row[i + half] = x2 * c + x1 * s;
        }
      }
    }
  });
}

}  // namespace hyla::kernels::cpu
