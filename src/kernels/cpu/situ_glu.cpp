// CPU body of SiTU-GLU (see kernels/situ_glu.h): rows split into parallel blocks.
#include "kernels/situ_glu.h"

#include <cmath>

#include "kernels/cpu/tensor_access.h"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cpu {

void situ_and_mul(const SituAndMulParams& p) {
  const int64_t T = p.x.size(0), I = p.y.size(1);
  const float* x = static_cast<const float*>(p.x.raw());
  float* y = static_cast<float*>(p.y.raw());
  const float beta = p.beta, linear_beta = p.linear_beta;
  parallel_for_blocks(T, rows_per_task(2 * I), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* gate = x + t * p.x.stride(0);
      const float* up = gate + I;
      float* y_row = y + t * p.y.stride(0);
      // y[i] is written after gate[i] and up[i] are read, so y may be the gate half of x
      for (int64_t i = 0; i < I; ++i) {
        const float g = gate[i];
        const float bounded_gate = beta * std::tanh(g / beta) * sigmoid(g);
        y_row[i] = bounded_gate * (linear_beta * std::tanh(up[i] / linear_beta));
      }
    }
  });
}

}  // namespace hyla::kernels::cpu
