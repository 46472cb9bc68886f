// CUDA body of the scaled residual add (see kernels/add.h): one block per row, its threads
// striding over the row; y[t, i] = fmaf(s_t, x[t, i], y[t, i]).
#include "kernels/add.h"
#include "kernels/cuda/common.cuh"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cuda {

namespace {

struct AddArgs {
  const float* x;     // [T, W], row stride x_stride
  const float* gate;  // [T], stride gate_stride; null: s_t = scale
  float* y;           // [T, W], row stride y_stride (may be x: each element is read, then written)
  float scale;
  int64_t W, x_stride, gate_stride, y_stride;
};

__global__ void add_kernel(const __grid_constant__ AddArgs a) {
  const int64_t t = blockIdx.x;
  const float s = a.gate ? a.scale * sigmoid(a.gate[t * a.gate_stride]) : a.scale;
  const float* in = a.x + t * a.x_stride;
  float* out = a.y + t * a.y_stride;
  for (int64_t i = threadIdx.x; i < a.W; i += blockDim.x) out[i] = fmaf(s, in[i], out[i]);
}

}  // namespace

Status add(const AddParams& p, Stream stream) {
  const int64_t T = p.y.size(0);
  if (T == 0 || p.y.size(1) == 0) return ok_status();
  const AddArgs args{.x = ptr<const float>(p.x),
                     .gate = p.gate.defined() ? ptr<const float>(p.gate) : nullptr,
                     .y = ptr<float>(p.y),
                     .scale = p.scale,
                     .W = p.y.size(1),
                     .x_stride = p.x.stride(0),
                     .gate_stride = p.gate.defined() ? p.gate.stride(0) : 0,
                     .y_stride = p.y.stride(0)};
  add_kernel<<<unsigned(T), 256, 0, to_cuda(stream)>>>(args);
  HYLA_CUDA_CHECK_LAUNCH();
  return ok_status();
}

}  // namespace hyla::kernels::cuda
