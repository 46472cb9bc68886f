// CPU body of the scaled residual add (see kernels/add.h): rows split into parallel blocks, one
// fma per element.
#include "kernels/add.h"

#include <cmath>

#include "kernels/cpu/tensor_access.h"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cpu {

void add(const AddParams& p) {
  const int64_t T = p.y.size(0), W = p.y.size(1);
  const float* x = p.x.host<float>();
  float* y = p.y.host<float>();
  const float* gate = p.gate.defined() ? p.gate.host<float>() : nullptr;
  parallel_for_blocks(T, rows_per_task(W), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      // s_t = scale or scale * sigmoid(gate[t]);  y[t] = fma(s_t, x[t], y[t])
      const float s = gate ? p.scale * sigmoid(gate[t * p.gate.stride(0)]) : p.scale;
      const float* in = x + t * p.x.stride(0);
      float* out = y + t * p.y.stride(0);
      for (int64_t i = 0; i < W; ++i) out[i] = std::fma(s, in[i], out[i]);
    }
  });
}

}  // namespace hyla::kernels::cpu
