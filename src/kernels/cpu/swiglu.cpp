// CPU body of SwiGLU (see kernels/swiglu.h): rows split into parallel blocks.
#include "kernels/swiglu.h"

#include "kernels/cpu/tensor_access.h"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cpu {

void swiglu(const SwigluParams& p) {
  const int64_t T = p.x.size(0), I = p.y.size(1);
  const float* x = static_cast<const float*>(p.x.raw());
  dispatch_float(p.y.dtype(), [&]<typename TY>(TY) {
    TY* y = static_cast<TY*>(p.y.raw());
    parallel_for_blocks(T, rows_per_task(2 * I), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const float* gate = x + t * p.x.stride(0);
        const float* up = gate + I;
        TY* y_row = y + t * p.y.stride(0);
        // y[i] is written after gate[i] and up[i] are read, so y may be the gate half of x
        for (int64_t i = 0; i < I; ++i) store_f32(y_row + i, silu(gate[i]) * up[i]);
      }
    });
  });
}

}  // namespace hyla::kernels::cpu
