// CUDA body of RMSNorm (kernels/rmsnorm.h), optionally fused with the residual add:
//   [residual = residual + x]   xhat = v * rsqrt(mean(v^2) + eps)   y = (offset + w) * xhat
// with v = residual (fused) or x. One block per row of d; fp32 compute; y rounded once.
// Layouts: x, y, residual [..., d] (1-4 dims), last dim contiguous, rows strided; weight [d].
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rows.cuh"
#include "kernels/rmsnorm.h"

namespace hyla::kernels::cuda {

namespace {

struct RmsNormArgs {
  const void* x;    // [rows, d] TX, rows at x_rows
  const void* w;    // [d] TW
  void* y;          // [rows, d] TY, rows at y_rows; may be x (same dtype and strides)
  float* residual;  // [rows, d] f32, rows at residual_rows; null when not fused
  RowLayout x_rows, y_rows, residual_rows;
  int64_t d;
  float eps;
  float offset;  // 1 for the zero-centred form (1 + w), else 0
};

template <typename TX, typename TW, typename TY>
__global__ void rmsnorm_kernel(const __grid_constant__ RmsNormArgs a) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const TX* x = static_cast<const TX*>(a.x) + row_offset(a.x_rows, row);
  const TW* w = static_cast<const TW*>(a.w);
  TY* y = static_cast<TY*>(a.y) + row_offset(a.y_rows, row);
  float* r = a.residual ? a.residual + row_offset(a.residual_rows, row) : nullptr;
  // v = residual + x (written back) or x; each thread owns elements i = tid + k * blockDim, so it
  // reads back only what it wrote itself, and y (which may be x) is written after the block sum
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < a.d; i += blockDim.x) {
    float v = to_float(x[i]);
    if (r) {
      v = r[i] + v;
      r[i] = v;
    }
    sum_sq += v * v;
  }
  const float inv_rms = 1.0f / sqrtf(block_sum(sum_sq, scratch) / float(a.d) + a.eps);
  for (int64_t i = threadIdx.x; i < a.d; i += blockDim.x) {
    const float v = r ? r[i] : to_float(x[i]);
    // scale * (v * inv_rms), the CPU body's order; explicit roundings keep nvcc from fusing
    y[i] = from_float<TY>(__fmul_rn(__fadd_rn(a.offset, to_float(w[i])), __fmul_rn(v, inv_rms)));
  }
}

}  // namespace

Status rmsnorm(const RmsNormParams& p, Stream stream) {
  const RmsNormArgs args{
      .x = p.x.raw(),
      .w = p.weight.raw(),
      .y = p.y.raw(),
      .residual = p.residual.defined() ? static_cast<float*>(p.residual.raw()) : nullptr,
      .x_rows = row_layout(p.x),
      .y_rows = row_layout(p.y),
      .residual_rows = p.residual.defined() ? row_layout(p.residual) : RowLayout{},
      .d = p.x.size(-1),
      .eps = p.eps,
      .offset = p.form == RmsNormForm::kOffset ? 1.0f : 0.0f,
  };
  const int64_t rows = num_rows(args.x_rows);
  if (rows == 0 || args.d == 0) return ok_status();
  HYLA_RETURN_IF_ERROR(check_grid_rows("rmsnorm", rows));
  const bool dispatched = dispatch_float(p.x.dtype(), [&]<typename TX>(TX) {
    dispatch_float(p.weight.dtype(), [&]<typename TW>(TW) {
      dispatch_float(p.y.dtype(), [&]<typename TY>(TY) {
        rmsnorm_kernel<TX, TW, TY>
            <<<unsigned(rows), row_block_threads(args.d), 0, to_cuda(stream)>>>(args);
        HYLA_CUDA_CHECK_LAUNCH();
      });
    });
  });
  HYLA_CHECK(dispatched, "rmsnorm: unexpected dtype ", dtype_name(p.x.dtype()));
  return ok_status();
}

}  // namespace hyla::kernels::cuda
