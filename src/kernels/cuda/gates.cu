// CUDA bodies of the GDN and KDA gates (kernels/gates.h), through scalar_math.h's
// gate_log_decay, sigmoid and softplus (the CPU bodies' formulas), fp32:
//   GDN, per (t, value head):    g = -exp(A_log[h]) softplus(a + dt_bias[h]),  beta = sigmoid(b)
//   KDA, per (t, h, i_k):        g = gate_log_decay(exp(A_log[h]), f + dt_bias[h, i_k], safe, lb)
//                                beta[t, h] = sigmoid(b[t, h]) when b is given
// GDN: one block per token, threads over HV. KDA: one block per (token, head) row, threads over
// d_k. Layouts: every tensor's last dim contiguous, leading dims strided.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rows.cuh"
#include "kernels/gates.h"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cuda {

namespace {

struct GdnGateArgs {
  const void* a;         // [T, HV] TA, row stride stride_a
  const void* b;         // [T, HV] TB, row stride stride_b
  const float* A_log;    // [HV]
  const float* dt_bias;  // [HV]
  float* g;              // [T, HV], row stride stride_g
  float* beta;           // [T, HV], row stride stride_beta
  int64_t stride_a, stride_b, stride_g, stride_beta, HV;
};

template <typename TA, typename TB>
__global__ void gdn_gate_kernel(const __grid_constant__ GdnGateArgs p) {
  const int64_t t = blockIdx.x;
  const TA* a = static_cast<const TA*>(p.a) + t * p.stride_a;
  const TB* b = static_cast<const TB*>(p.b) + t * p.stride_b;
  for (int64_t h = threadIdx.x; h < p.HV; h += blockDim.x) {
    const float decay_rate = expf(p.A_log[h]);
    p.g[t * p.stride_g + h] =
        gate_log_decay(decay_rate, __fadd_rn(to_float(a[h]), p.dt_bias[h]), false, 0.0f);
    p.beta[t * p.stride_beta + h] = sigmoid(to_float(b[h]));
  }
}

struct KdaGateArgs {
  const void* f;         // [T, H, d_k] TF, rows (t, h) at f_rows
  const float* A_log;    // [H]
  const float* dt_bias;  // [H, d_k], row stride stride_dt_bias
  float* g;              // [T, H, d_k], rows at g_rows
  const void* b;         // [T, H] TB, row stride stride_b; null when beta is not wanted
  float* beta;           // [T, H], row stride stride_beta
  RowLayout f_rows, g_rows;
  int64_t stride_dt_bias, stride_b, stride_beta, H, d_k;
  bool safe;          // safe gate: lower_bound sigmoid(A x)
  float lower_bound;  // safe gate only
};

template <typename TF, typename TB>
__global__ void kda_gate_kernel(const __grid_constant__ KdaGateArgs p) {
  const int64_t row = blockIdx.x;  // t H + h
  const int64_t t = row / p.H, h = row % p.H;
  const TF* f = static_cast<const TF*>(p.f) + row_offset(p.f_rows, row);
  const float* bias = p.dt_bias + h * p.stride_dt_bias;
  float* g = p.g + row_offset(p.g_rows, row);
  const float decay_rate = expf(p.A_log[h]);
  for (int64_t i_k = threadIdx.x; i_k < p.d_k; i_k += blockDim.x)
    g[i_k] =
        gate_log_decay(decay_rate, __fadd_rn(to_float(f[i_k]), bias[i_k]), p.safe, p.lower_bound);
  if (p.b != nullptr && threadIdx.x == 0)
    p.beta[t * p.stride_beta + h] =
        sigmoid(to_float(static_cast<const TB*>(p.b)[t * p.stride_b + h]));
}

}  // namespace

Status gdn_gate(const GdnGateParams& p, Stream stream) {
  const GdnGateArgs args{.a = p.a.raw(),
                         .b = p.b.raw(),
                         .A_log = static_cast<const float*>(p.A_log.raw()),
                         .dt_bias = static_cast<const float*>(p.dt_bias.raw()),
                         .g = static_cast<float*>(p.g.raw()),
                         .beta = static_cast<float*>(p.beta.raw()),
                         .stride_a = p.a.stride(0),
                         .stride_b = p.b.stride(0),
                         .stride_g = p.g.stride(0),
                         .stride_beta = p.beta.stride(0),
                         .HV = p.a.size(1)};
  const int64_t T = p.a.size(0);
  if (T == 0 || args.HV == 0) return ok_status();
  HYLA_RETURN_IF_ERROR(check_grid_rows("gdn_gate", T));
  const bool dispatched = dispatch_float(p.a.dtype(), [&]<typename TA>(TA) {
    dispatch_float(p.b.dtype(), [&]<typename TB>(TB) {
      gdn_gate_kernel<TA, TB>
          <<<unsigned(T), row_block_threads(args.HV), 0, to_cuda(stream)>>>(args);
      HYLA_CUDA_CHECK_LAUNCH();
    });
  });
  HYLA_CHECK(dispatched, "gdn_gate: unexpected dtype ", dtype_name(p.a.dtype()));
  return ok_status();
}

Status kda_gate(const KdaGateParams& p, Stream stream) {
  const bool with_beta = p.b.defined();
  const KdaGateArgs args{.f = p.f.raw(),
                         .A_log = static_cast<const float*>(p.A_log.raw()),
                         .dt_bias = static_cast<const float*>(p.dt_bias.raw()),
                         .g = static_cast<float*>(p.g.raw()),
                         .b = with_beta ? p.b.raw() : nullptr,
                         .beta = with_beta ? static_cast<float*>(p.beta.raw()) : nullptr,
                         .f_rows = row_layout(p.f),
                         .g_rows = row_layout(p.g),
                         .stride_dt_bias = p.dt_bias.stride(0),
                         .stride_b = with_beta ? p.b.stride(0) : 0,
                         .stride_beta = with_beta ? p.beta.stride(0) : 0,
                         .H = p.f.size(1),
                         .d_k = p.f.size(2),
                         .safe = p.lower_bound.has_value(),
                         .lower_bound = p.lower_bound.value_or(0.0f)};
  const int64_t rows = p.f.size(0) * args.H;
  // d_k = 0 still launches (one thread per row writes beta)
  if (rows == 0) return ok_status();
  HYLA_RETURN_IF_ERROR(check_grid_rows("kda_gate", rows));
  // without b the kernel never reads it: instantiate TB = TF
  const DType b_dtype = with_beta ? p.b.dtype() : p.f.dtype();
  const bool dispatched = dispatch_float(p.f.dtype(), [&]<typename TF>(TF) {
    dispatch_float(b_dtype, [&]<typename TB>(TB) {
      kda_gate_kernel<TF, TB>
          <<<unsigned(rows), row_block_threads(args.d_k), 0, to_cuda(stream)>>>(args);
      HYLA_CUDA_CHECK_LAUNCH();
    });
  });
  HYLA_CHECK(dispatched, "kda_gate: unexpected dtype ", dtype_name(p.f.dtype()));
  return ok_status();
}

}  // namespace hyla::kernels::cuda
