// CUDA body of the row gather (see kernels/gather_rows.h): one block per output row, its threads
// striding over the row; y[i, c] = x[index[i], c] through fp32, or NaN when index[i] is outside
// [0, N).
#include "kernels/cuda/common.cuh"
#include "kernels/gather_rows.h"

namespace hyla::kernels::cuda {

namespace {

template <typename TX, typename TY>
struct GatherRowsArgs {
  const TX* x;           // [N, W], row stride x_stride
  const int32_t* index;  // [M]
  TY* y;                 // [M, W], row stride y_stride
  int64_t N, W, x_stride, y_stride;
};

template <typename TX, typename TY>
__global__ void gather_rows_kernel(const __grid_constant__ GatherRowsArgs<TX, TY> a) {
  const int64_t i = blockIdx.x;
  const int32_t row = a.index[i];
  TY* out = a.y + i * a.y_stride;
  if (row < 0 || row >= a.N) {
    for (int64_t c = threadIdx.x; c < a.W; c += blockDim.x)
      out[c] = from_float<TY>(__int_as_float(0x7fffffff));
    return;
  }
  const TX* in = a.x + int64_t(row) * a.x_stride;
  for (int64_t c = threadIdx.x; c < a.W; c += blockDim.x) out[c] = from_float<TY>(to_float(in[c]));
}

template <typename TX, typename TY>
void launch_gather_rows(const GatherRowsParams& p, cudaStream_t stream) {
  const GatherRowsArgs<TX, TY> args{.x = ptr<const TX>(p.x),
                                    .index = ptr<const int32_t>(p.index),
                                    .y = ptr<TY>(p.y),
                                    .N = p.x.size(0),
                                    .W = p.x.size(1),
                                    .x_stride = p.x.stride(0),
                                    .y_stride = p.y.stride(0)};
  gather_rows_kernel<TX, TY><<<unsigned(p.index.size(0)), 256, 0, stream>>>(args);
  HYLA_CUDA_CHECK_LAUNCH();
}

}  // namespace

Status gather_rows(const GatherRowsParams& p, Stream stream) {
  if (p.index.size(0) == 0) return ok_status();
  bool launched = false;
  dispatch_float(p.x.dtype(), [&]<typename TX>(TX) {
    launched = dispatch_float(
        p.y.dtype(), [&]<typename TY>(TY) { launch_gather_rows<TX, TY>(p, to_cuda(stream)); });
  });
  HYLA_CHECK(launched, "gather_rows: dtypes ", dtype_name(p.x.dtype()), " -> ",
             dtype_name(p.y.dtype()));
  return ok_status();
}

}  // namespace hyla::kernels::cuda
