// CUDA body of the gated RMSNorm (kernels/gated_rmsnorm.h), any d_v:
//   y = weight * (x * rsqrt(mean(x^2) + eps)) * act(gate),   act = silu (GDN) or sigmoid (KDA)
// One block per (token, head) row of d_v; fp32 compute; y rounded once.
// Layouts: x, gate, y [T, HV, d_v], last dim contiguous, T and HV strided; weight [d_v].
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rows.cuh"
#include "kernels/gated_rmsnorm.h"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cuda {

namespace {

struct GatedRmsNormArgs {
  const void* x;     // [T HV, d_v] TX, rows at x_rows
  const void* gate;  // [T HV, d_v] TG, rows at gate_rows
  const void* w;     // [d_v] TW
  void* y;           // [T HV, d_v] TY, rows at y_rows; may be x (same dtype and strides)
  RowLayout x_rows, gate_rows, y_rows;
  int64_t d_v;
  float eps;
  bool use_silu;  // silu(gate), else sigmoid(gate)
};

template <typename TX, typename TG, typename TW, typename TY>
__global__ void gated_rmsnorm_kernel(const __grid_constant__ GatedRmsNormArgs a) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const TX* x = static_cast<const TX*>(a.x) + row_offset(a.x_rows, row);
  const TG* gate = static_cast<const TG*>(a.gate) + row_offset(a.gate_rows, row);
  const TW* w = static_cast<const TW*>(a.w);
  TY* y = static_cast<TY*>(a.y) + row_offset(a.y_rows, row);
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < a.d_v; i += blockDim.x) {
    const float v = to_float(x[i]);
    sum_sq += v * v;
  }
  // every x of the row is read before the block sum returns, so y (which may be x) is safe after
  const float inv_rms = 1.0f / sqrtf(block_sum(sum_sq, scratch) / float(a.d_v) + a.eps);
  for (int64_t i = threadIdx.x; i < a.d_v; i += blockDim.x) {
    const float z = to_float(gate[i]);
    const float gate_value = a.use_silu ? silu(z) : sigmoid(z);
    // weight * (x * inv_rms) * act(gate), the CPU body's order
    y[i] = from_float<TY>(
        __fmul_rn(__fmul_rn(to_float(w[i]), __fmul_rn(to_float(x[i]), inv_rms)), gate_value));
  }
}

}  // namespace

Status gated_rmsnorm(const GatedRmsNormParams& p, Stream stream) {
  const GatedRmsNormArgs args{
      .x = p.x.raw(),
      .gate = p.gate.raw(),
      .w = p.weight.raw(),
      .y = p.y.raw(),
      .x_rows = row_layout(p.x),
      .gate_rows = row_layout(p.gate),
      .y_rows = row_layout(p.y),
      .d_v = p.x.size(2),
      .eps = p.eps,
      .use_silu = p.act == GateActivation::kSilu,
  };
  const int64_t rows = num_rows(args.x_rows);
  if (rows == 0 || args.d_v == 0) return ok_status();
  HYLA_RETURN_IF_ERROR(check_grid_rows("gated_rmsnorm", rows));
  const bool dispatched = dispatch_float(p.x.dtype(), [&]<typename TX>(TX) {
    dispatch_float(p.gate.dtype(), [&]<typename TG>(TG) {
      dispatch_float(p.weight.dtype(), [&]<typename TW>(TW) {
        dispatch_float(p.y.dtype(), [&]<typename TY>(TY) {
          gated_rmsnorm_kernel<TX, TG, TW, TY>
              <<<unsigned(rows), row_block_threads(args.d_v), 0, to_cuda(stream)>>>(args);
          HYLA_CUDA_CHECK_LAUNCH();
        });
      });
    });
  });
  HYLA_CHECK(dispatched, "gated_rmsnorm: unexpected dtype ", dtype_name(p.x.dtype()));
  return ok_status();
}

}  // namespace hyla::kernels::cuda
