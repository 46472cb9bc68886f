// CUDA body of the int8 row quantisation (see kernels/int8_rows.h): one block per row; a block
// maximum of |x| (a non-finite element counts as +inf, which makes the scale NaN), then each
// thread quantises its elements. __fdiv_rn keeps the divisions correctly rounded, as on the CPU.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rows.cuh"
#include "kernels/int8_rows.h"

namespace hyla::kernels::cuda {

namespace {

template <typename T>
__global__ void quantize_kernel(const T* __restrict__ x, int64_t x_stride, int8_t* __restrict__ q,
                                int64_t q_stride, float* __restrict__ scale, int64_t C) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const T* in = x + r * x_stride;
  int8_t* out = q + r * q_stride;
  float amax = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float v = to_float(in[i]);
    amax = fmaxf(amax, isfinite(v) ? fabsf(v) : INFINITY);
  }
  amax = block_max(amax, scratch);
  const float s = isfinite(amax) ? __fdiv_rn(amax, 127.0f) : NAN;
  if (threadIdx.x == 0) scale[r] = s;
  const bool zero = !(s > 0.0f) || !isfinite(s);
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float v = zero ? 0.0f : rintf(__fdiv_rn(to_float(in[i]), s));
    out[i] = int8_t(fminf(fmaxf(v, -127.0f), 127.0f));
  }
}

template <typename T>
__global__ void dequantize_kernel(const int8_t* __restrict__ q, int64_t q_stride,
                                  const float* __restrict__ scale, T* __restrict__ y,
                                  int64_t y_stride, int64_t C) {
  const int64_t r = blockIdx.x;
  const float s = scale[r];
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x)
    y[r * y_stride + i] = from_float<T>(float(q[r * q_stride + i]) * s);
}

}  // namespace

Status quantize_int8_rows(const QuantizeInt8RowsParams& p, Stream stream) {
  const int64_t R = p.x.size(0), C = p.x.size(1);
  if (R == 0) return ok_status();
  HYLA_RETURN_IF_ERROR(check_grid_rows("quantize_int8_rows", R));
  const bool launched = dispatch_float(p.x.dtype(), [&]<typename T>(T) {
    quantize_kernel<T><<<unsigned(R), row_block_threads(C), 0, to_cuda(stream)>>>(
        ptr<const T>(p.x), p.x.stride(0), ptr<int8_t>(p.q), p.q.stride(0), ptr<float>(p.scale), C);
  });
  HYLA_CHECK(launched, "quantize_int8_rows: dtype ", dtype_name(p.x.dtype()));
  HYLA_CUDA_CHECK_LAUNCH();
  return ok_status();
}

Status dequantize_int8_rows(const DequantizeInt8RowsParams& p, Stream stream) {
  const int64_t R = p.y.size(0), C = p.y.size(1);
  if (R == 0) return ok_status();
  HYLA_RETURN_IF_ERROR(check_grid_rows("dequantize_int8_rows", R));
  const bool launched = dispatch_float(p.y.dtype(), [&]<typename T>(T) {
    dequantize_kernel<T><<<unsigned(R), row_block_threads(C), 0, to_cuda(stream)>>>(
        ptr<const int8_t>(p.q), p.q.stride(0), ptr<const float>(p.scale), ptr<T>(p.y),
        p.y.stride(0), C);
  });
  HYLA_CHECK(launched, "dequantize_int8_rows: dtype ", dtype_name(p.y.dtype()));
  HYLA_CUDA_CHECK_LAUNCH();
  return ok_status();
}

}  // namespace hyla::kernels::cuda
