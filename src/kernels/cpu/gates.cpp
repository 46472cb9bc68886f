// CPU bodies of the GDN and KDA gates (see kernels/gates.h): fp32 compute, tokens split into
// parallel blocks.
#include "kernels/gates.h"

#include <cmath>

#include "kernels/cpu/tensor_access.h"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cpu {

void gdn_gate(const GdnGateParams& p) {
  const int64_t T = p.a.size(0), HV = p.a.size(1);
  const float* A_log = p.A_log.data<float>();
  const float* dt_bias = p.dt_bias.data<float>();
  float* g = p.g.data<float>();
  float* beta = p.beta.data<float>();
  dispatch_float(p.a.dtype(), [&]<typename TA>(TA) {
    dispatch_float(p.b.dtype(), [&]<typename TB>(TB) {
      const TA* a = static_cast<const TA*>(p.a.raw());
      const TB* b = static_cast<const TB*>(p.b.raw());
      parallel_for_blocks(T, rows_per_task(4 * HV), [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          // per value head: g = -exp(A_log) * softplus(a + dt_bias),  beta = sigmoid(b)
          for (int64_t h = 0; h < HV; ++h) {
            const float decay_rate = std::exp(A_log[h]);
            g[t * p.g.stride(0) + h] = gate_log_decay(
                decay_rate, load_f32(a + t * p.a.stride(0) + h) + dt_bias[h], false, 0.0f);
            beta[t * p.beta.stride(0) + h] = sigmoid(load_f32(b + t * p.b.stride(0) + h));
          }
        }
      });
    });
  });
}

void kda_gate(const KdaGateParams& p) {
  const int64_t T = p.f.size(0), H = p.f.size(1), d_k = p.f.size(2);
  const float* A_log = p.A_log.data<float>();
  const float* dt_bias = p.dt_bias.data<float>();
  const int64_t dt_bias_stride_h = p.dt_bias.stride(0);
  float* g = p.g.data<float>();
  dispatch_float(p.f.dtype(), [&]<typename TF>(TF) {
    const TF* f = static_cast<const TF*>(p.f.raw());
    parallel_for_blocks(T, rows_per_task(4 * H * d_k), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        for (int64_t h = 0; h < H; ++h) {
          const float decay_rate = std::exp(A_log[h]);
          const TF* f_row = f + t * p.f.stride(0) + h * p.f.stride(1);
          const float* bias_row = dt_bias + h * dt_bias_stride_h;
          float* g_row = g + t * p.g.stride(0) + h * p.g.stride(1);
          // plain gate: g = -exp(A_log) * softplus(f + dt_bias), in (-inf, 0]; safe gate:
          // g = lower_bound * sigmoid(exp(A_log) * (f + dt_bias)), in [lower_bound, 0]
          const bool safe = p.lower_bound.has_value();
          const float lower_bound = p.lower_bound.value_or(0.0f);
          for (int64_t i_k = 0; i_k < d_k; ++i_k)
            g_row[i_k] = gate_log_decay(decay_rate, load_f32(f_row + i_k) + bias_row[i_k], safe,
                                        lower_bound);
        }
      }
    });
  });
  if (!p.b.defined()) return;
  float* beta = p.beta.data<float>();
  dispatch_float(p.b.dtype(), [&]<typename TB>(TB) {
    const TB* b = static_cast<const TB*>(p.b.raw());
    parallel_for_blocks(T, rows_per_task(4 * H), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        // beta = sigmoid(b), per head
        for (int64_t h = 0; h < H; ++h)
          beta[t * p.beta.stride(0) + h] = sigmoid(load_f32(b + t * p.b.stride(0) + h));
      }
    });
  });
}

}  // namespace hyla::kernels::cpu
