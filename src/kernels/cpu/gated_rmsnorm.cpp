// CPU body of the gated RMSNorm (see kernels/gated_rmsnorm.h): fp32 compute, one row per
// (token, head), rows split into parallel blocks.
#include "kernels/gated_rmsnorm.h"

#include <cmath>

#include "kernels/cpu/tensor_access.h"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cpu {

namespace {

template <typename TX, typename TG, typename TW, typename TY>
void gated_rmsnorm_typed(const GatedRmsNormParams& p) {
  const int64_t HV = p.x.size(1), d_v = p.x.size(2);
  const int64_t rows = p.x.size(0) * HV;
  const TX* x = static_cast<const TX*>(p.x.raw());
  const TG* gate = static_cast<const TG*>(p.gate.raw());
  const TW* weight = static_cast<const TW*>(p.weight.raw());
  TY* y = static_cast<TY*>(p.y.raw());
  const bool use_silu = p.act == GateActivation::kSilu;
  parallel_for_blocks(rows, rows_per_task(d_v), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t t = row / HV, h = row % HV;
      const TX* x_row = x + t * p.x.stride(0) + h * p.x.stride(1);
      const TG* gate_row = gate + t * p.gate.stride(0) + h * p.gate.stride(1);
      TY* y_row = y + t * p.y.stride(0) + h * p.y.stride(1);
      // y = weight * x * rsqrt(mean(x^2) + eps) * act(gate); x is read in full before y (which
      // may be x) is written
      float sum_sq = 0.0f;
      for (int64_t i_v = 0; i_v < d_v; ++i_v) {
        const float v = load_f32(x_row + i_v);
        sum_sq += v * v;
      }
      const float inv_rms = 1.0f / std::sqrt(sum_sq / float(d_v) + p.eps);
      for (int64_t i_v = 0; i_v < d_v; ++i_v) {
        const float z = load_f32(gate_row + i_v);
        const float gate_value = use_silu ? silu(z) : sigmoid(z);
        store_f32(y_row + i_v,
                  load_f32(weight + i_v) * (load_f32(x_row + i_v) * inv_rms) * gate_value);
      }
    }
  });
}

}  // namespace

void gated_rmsnorm(const GatedRmsNormParams& p) {
  dispatch_float(p.x.dtype(), [&]<typename TX>(TX) {
    dispatch_float(p.gate.dtype(), [&]<typename TG>(TG) {
      dispatch_float(p.weight.dtype(), [&]<typename TW>(TW) {
        dispatch_float(p.y.dtype(),
                       [&]<typename TY>(TY) { gated_rmsnorm_typed<TX, TG, TW, TY>(p); });
      });
    });
  });
}

}  // namespace hyla::kernels::cpu
