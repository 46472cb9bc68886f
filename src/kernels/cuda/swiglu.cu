// CUDA body of SwiGLU (kernels/swiglu.h): y[t, i] = silu(x[t, i]) * x[t, I + i].
// One block per token row; fp32 compute (scalar_math.h's silu, as the CPU body); y f32 or bf16,
// rounded once. Layouts: x [T, 2I] f32, y [T, I], last dims contiguous, rows strided; an f32 y
// may be x's gate half (same row stride).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rows.cuh"
#include "kernels/scalar_math.h"
#include "kernels/swiglu.h"

namespace hyla::kernels::cuda {

namespace {

struct SwigluArgs {
  const float* x;  // [T, 2I] f32, row stride stride_x
  void* y;         // [T, I] TY, row stride stride_y
  int64_t stride_x, stride_y, I;
};

template <typename TY>
__global__ void swiglu_kernel(const __grid_constant__ SwigluArgs a) {
  const int64_t t = blockIdx.x;
  const float* gate = a.x + t * a.stride_x;
  const float* up = gate + a.I;
  TY* y = static_cast<TY*>(a.y) + t * a.stride_y;
  // y[i] is written by the thread that read gate[i] and up[i], after it read them, so y may be
  // the gate half of x
  for (int64_t i = threadIdx.x; i < a.I; i += blockDim.x)
    y[i] = from_float<TY>(__fmul_rn(silu(gate[i]), up[i]));
}

}  // namespace

Status swiglu(const SwigluParams& p, Stream stream) {
  const SwigluArgs args{.x = static_cast<const float*>(p.x.raw()),
                        .y = p.y.raw(),
                        .stride_x = p.x.stride(0),
                        .stride_y = p.y.stride(0),
                        .I = p.y.size(1)};
  const int64_t T = p.x.size(0);
  if (T == 0 || args.I == 0) return ok_status();
  HYLA_RETURN_IF_ERROR(check_grid_rows("swiglu", T));
  const bool dispatched = dispatch_float(p.y.dtype(), [&]<typename TY>(TY) {
    swiglu_kernel<TY><<<unsigned(T), row_block_threads(args.I), 0, to_cuda(stream)>>>(args);
    HYLA_CUDA_CHECK_LAUNCH();
  });
  HYLA_CHECK(dispatched, "swiglu: unexpected dtype ", dtype_name(p.y.dtype()));
  return ok_status();
}

}  // namespace hyla::kernels::cuda
