// CUDA body of the strided copy (see kernels/copy.h): a grid-stride loop over the elements in
// row-major order; each flat index is split into 4 coordinates (shapes left-padded with 1s) and
// read and written through the two views' strides.
#include <algorithm>

#include "kernels/copy.h"
#include "kernels/cuda/common.cuh"

namespace hyla::kernels::cuda {

namespace {

template <typename TX, typename TY>
struct CopyArgs {
  const TX* x;
  TY* y;
  int64_t numel;
  int64_t size[kMaxCopyDims];      // left-padded with 1
  int64_t x_stride[kMaxCopyDims];  // in elements; padded dims 0
  int64_t y_stride[kMaxCopyDims];
};

template <typename TX, typename TY>
__global__ void copy_kernel(const __grid_constant__ CopyArgs<TX, TY> a) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < a.numel;
       e += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = e, x_off = 0, y_off = 0;
#pragma unroll
    for (int d = kMaxCopyDims - 1; d >= 0; --d) {
      const int64_t i = rest % a.size[d];
      rest /= a.size[d];
      x_off += i * a.x_stride[d];
      y_off += i * a.y_stride[d];
    }
    a.y[y_off] = from_float<TY>(to_float(a.x[x_off]));
  }
}

template <typename TX, typename TY>
void launch_copy(const CopyParams& p, int64_t numel, cudaStream_t stream) {
  CopyArgs<TX, TY> args{};
  args.x = ptr<const TX>(p.x);
  args.y = ptr<TY>(p.y);
  args.numel = numel;
  const int pad = kMaxCopyDims - p.x.ndim();
  for (int d = 0; d < kMaxCopyDims; ++d) {
    const bool real = d >= pad;
    args.size[d] = real ? p.x.size(d - pad) : 1;
    args.x_stride[d] = real ? p.x.stride(d - pad) : 0;
    args.y_stride[d] = real ? p.y.stride(d - pad) : 0;
  }
  constexpr int kThreads = 256;
  // enough blocks to fill the device several times over; the loop covers the rest
  const int64_t blocks = std::min<int64_t>(ceil_div(numel, kThreads), 65536);
  copy_kernel<TX, TY><<<unsigned(blocks), kThreads, 0, stream>>>(args);
  HYLA_CUDA_CHECK_LAUNCH();
}

}  // namespace

Status copy(const CopyParams& p, Stream stream) {
  const int64_t numel = p.x.numel();
  if (numel == 0) return ok_status();
  bool launched = false;
  dispatch_float(p.x.dtype(), [&]<typename TX>(TX) {
    launched = dispatch_float(
        p.y.dtype(), [&]<typename TY>(TY) { launch_copy<TX, TY>(p, numel, to_cuda(stream)); });
  });
  HYLA_CHECK(launched, "copy: dtypes ", dtype_name(p.x.dtype()), " -> ", dtype_name(p.y.dtype()));
  return ok_status();
}

}  // namespace hyla::kernels::cuda
