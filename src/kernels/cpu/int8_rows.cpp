// CPU body of the int8 row quantisation (see kernels/int8_rows.h): rows split into parallel
// blocks; per row the largest magnitude (NaN-propagating), then one division per element.
#include "kernels/int8_rows.h"

#include <cmath>
#include <cstdint>

#include "kernels/cpu/tensor_access.h"

namespace hyla::kernels::cpu {

void quantize_int8_rows(const QuantizeInt8RowsParams& p) {
  const int64_t C = p.x.size(1);
  int8_t* q = static_cast<int8_t*>(p.q.raw());
  float* scale = static_cast<float*>(p.scale.raw());
  dispatch_float(p.x.dtype(), [&]<typename T>(T) {
    const T* x = static_cast<const T*>(p.x.raw());
    parallel_for_blocks(p.x.size(0), rows_per_task(C), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* in = x + r * p.x.stride(0);
        int8_t* out = q + r * p.q.stride(0);
        float amax = 0.0f;
        for (int64_t i = 0; i < C; ++i) {
          const float a = std::fabs(load_f32(in + i));
          amax = (a > amax || std::isnan(a)) && !std::isnan(amax) ? a : amax;
        }
        const float s = std::isfinite(amax) ? amax / 127.0f : NAN;
        scale[r] = s;
        if (!(s > 0.0f) || !std::isfinite(s)) {
          for (int64_t i = 0; i < C; ++i) out[i] = 0;
          continue;
        }
        for (int64_t i = 0; i < C; ++i) {
          const float v = std::nearbyint(load_f32(in + i) / s);
          out[i] = int8_t(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
        }
      }
    });
  });
}

void dequantize_int8_rows(const DequantizeInt8RowsParams& p) {
  const int64_t C = p.y.size(1);
  const int8_t* q = static_cast<const int8_t*>(p.q.raw());
  const float* scale = static_cast<const float*>(p.scale.raw());
  dispatch_float(p.y.dtype(), [&]<typename T>(T) {
    T* y = static_cast<T*>(p.y.raw());
    parallel_for_blocks(p.y.size(0), rows_per_task(C), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int8_t* in = q + r * p.q.stride(0);
        T* out = y + r * p.y.stride(0);
        for (int64_t i = 0; i < C; ++i) store_f32(out + i, float(in[i]) * scale[r]);
      }
    });
  });
}

}  // namespace hyla::kernels::cpu
