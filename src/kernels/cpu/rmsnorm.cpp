// CPU body of RMSNorm (see kernels/rmsnorm.h): fp32 compute, rows of the last dimension split
// into parallel blocks.
#include "kernels/rmsnorm.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/tensor_access.h"

namespace hyla::kernels::cpu {

namespace {

template <typename TX, typename TY>
void rmsnorm_typed(const RmsNormParams& p, const float* scale) {
  const int64_t d = p.x.size(-1);
  const TX* x = static_cast<const TX*>(p.x.raw());
  TY* y = static_cast<TY*>(p.y.raw());
  float* residual = p.residual.defined() ? static_cast<float*>(p.residual.raw()) : nullptr;
  parallel_for_blocks(num_rows(p.x), rows_per_task(d), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const TX* x_row = x + row_offset(p.x, row);
      TY* y_row = y + row_offset(p.y, row);
      if (residual) {
        // residual += x, then y = scale * residual * rsqrt(mean(residual^2) + eps); x is read in
        // full before y (which may be x) is written
        float* r_row = residual + row_offset(p.residual, row);
        float sum_sq = 0.0f;
        for (int64_t i = 0; i < d; ++i) {
          const float v = r_row[i] + load_f32(x_row + i);
          r_row[i] = v;
          sum_sq += v * v;
        }
        const float inv_rms = 1.0f / std::sqrt(sum_sq / float(d) + p.eps);
        for (int64_t i = 0; i < d; ++i) store_f32(y_row + i, scale[i] * (r_row[i] * inv_rms));
        continue;
      }
      // y = scale * x * rsqrt(mean(x^2) + eps); x is read in full before y (which may be x) is
      // written
      float sum_sq = 0.0f;
      for (int64_t i = 0; i < d; ++i) {
        const float v = load_f32(x_row + i);
        sum_sq += v * v;
      }
      const float inv_rms = 1.0f / std::sqrt(sum_sq / float(d) + p.eps);
      for (int64_t i = 0; i < d; ++i)
        store_f32(y_row + i, scale[i] * (load_f32(x_row + i) * inv_rms));
    }
  });
}

}  // namespace

void rmsnorm(const RmsNormParams& p) {
  // the per-channel factor in fp32: w, or 1 + w for the zero-centred form (HF adds in fp32)
  const int64_t d = p.x.size(-1);
  std::vector<float> scale(static_cast<size_t>(d));
  const float offset = p.form == RmsNormForm::kOffset ? 1.0f : 0.0f;
  for (int64_t i = 0; i < d; ++i)
    scale[size_t(i)] = offset + load_f32_at(p.weight, i * p.weight.stride(0));
  dispatch_float(p.x.dtype(), [&]<typename TX>(TX) {
    dispatch_float(p.y.dtype(), [&]<typename TY>(TY) { rmsnorm_typed<TX, TY>(p, scale.data()); });
  });
}

}  // namespace hyla::kernels::cpu
