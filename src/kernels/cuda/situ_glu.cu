// CUDA body of SiTU-GLU (kernels/situ_glu.h):
//   y[t, i] = beta tanh(g / beta) sigmoid(g) * linear_beta tanh(u / linear_beta)
// with g = x[t, i], u = x[t, I + i], evaluated by situ_glu_value (the CPU body's formula).
// One block per token row; fp32 compute; y f32 or bf16, rounded once. Layouts: x [T, 2I] f32,
// y [T, I], last dims contiguous, rows strided; an f32 y may be x's gate half (same row stride).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rows.cuh"
#include "kernels/situ_glu.h"

namespace hyla::kernels::cuda {

namespace {

struct SituGluArgs {
  const float* x;  // [T, 2I] f32, row stride stride_x
  void* y;         // [T, I] TY, row stride stride_y
  int64_t stride_x, stride_y, I;
  float beta, linear_beta;
};

template <typename TY>
__global__ void situ_glu_kernel(const __grid_constant__ SituGluArgs a) {
  const int64_t t = blockIdx.x;
  const float* gate = a.x + t * a.stride_x;
  const float* up = gate + a.I;
  TY* y = static_cast<TY*>(a.y) + t * a.stride_y;
  // y[i] is written by the thread that read gate[i] and up[i], after it read them, so y may be
  // the gate half of x
  for (int64_t i = threadIdx.x; i < a.I; i += blockDim.x)
    y[i] = from_float<TY>(situ_glu_value(gate[i], up[i], a.beta, a.linear_beta));
}

}  // namespace

Status situ_glu(const SituGluParams& p, Stream stream) {
  const SituGluArgs args{.x = static_cast<const float*>(p.x.raw()),
                         .y = p.y.raw(),
                         .stride_x = p.x.stride(0),
                         .stride_y = p.y.stride(0),
                         .I = p.y.size(1),
                         .beta = p.beta,
                         .linear_beta = p.linear_beta};
  const int64_t T = p.x.size(0);
  if (T == 0 || args.I == 0) return ok_status();
  HYLA_RETURN_IF_ERROR(check_grid_rows("situ_glu", T));
  const bool dispatched = dispatch_float(p.y.dtype(), [&]<typename TY>(TY) {
    situ_glu_kernel<TY><<<unsigned(T), row_block_threads(args.I), 0, to_cuda(stream)>>>(args);
    HYLA_CUDA_CHECK_LAUNCH();
  });
  HYLA_CHECK(dispatched, "situ_glu: unexpected dtype ", dtype_name(p.y.dtype()));
  return ok_status();
}

}  // namespace hyla::kernels::cuda
