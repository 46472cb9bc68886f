// CUDA bodies of l2norm and the elementwise activations (kernels/activations.h):
//   l2norm: y = x * rsqrt(sum_i x_i^2 + eps) per row;   activation: y = act(x) per element
// One block per row of the last dimension; fp32 compute through scalar_math.h (the CPU body's
// formulas); y rounded once. x, y: 1-4 dims, f32 | bf16 | f16 each, last dim contiguous, rows
// strided; y may be x (same dtype and strides).
#include <cuda_fp16.h>

#include "kernels/activations.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rows.cuh"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cuda {

namespace {

// ---- element access: common.cuh's f32 / bf16, plus f16, which only these ops accept ----
template <typename T>
__device__ __forceinline__ float load_element(const T* p) {
  return to_float(*p);
}
__device__ __forceinline__ float load_element(const __half* p) { return __half2float(*p); }
template <typename T>
__device__ __forceinline__ void store_element(T* p, float v) {
  *p = from_float<T>(v);
}
/// Round to nearest even, as the CPU's f32_to_f16.
__device__ __forceinline__ void store_element(__half* p, float v) { *p = __float2half_rn(v); }

/// Calls f(T{}) with T = float, __nv_bfloat16 or __half; false for other dtypes.
template <typename F>
bool dispatch_element(DType dtype, F&& f) {
  if (dtype == DType::kF16) {
    f(__half{});
    return true;
  }
  return dispatch_float(dtype, f);
}

struct RowsArgs {
  const void* x;  // [rows, n] TX, rows at x_rows
  void* y;        // [rows, n] TY, rows at y_rows; may be x (same dtype and strides)
  RowLayout x_rows, y_rows;
  int64_t n;
  float eps;       // l2norm only
  Activation act;  // activation only
};

template <typename TX, typename TY>
__global__ void l2norm_kernel(const __grid_constant__ RowsArgs a) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const TX* x = static_cast<const TX*>(a.x) + row_offset(a.x_rows, row);
  TY* y = static_cast<TY*>(a.y) + row_offset(a.y_rows, row);
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) {
    const float v = load_element(x + i);
    sum_sq += v * v;
  }
  // every x of the row is read before the block sum returns, so y (which may be x) is safe after
  const float inv_norm = 1.0f / sqrtf(block_sum(sum_sq, scratch) + a.eps);
  for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x)
    store_element(y + i, load_element(x + i) * inv_norm);
}

template <typename TX, typename TY>
__global__ void activation_kernel(const __grid_constant__ RowsArgs a) {
  const int64_t row = blockIdx.x;
  const TX* x = static_cast<const TX*>(a.x) + row_offset(a.x_rows, row);
  TY* y = static_cast<TY*>(a.y) + row_offset(a.y_rows, row);
  // each element is read and written by one thread, so y may be x
  for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) {
    const float v = load_element(x + i);
    float out = 0.0f;
    switch (a.act) {
      case Activation::kSigmoid: out = sigmoid(v); break;
      case Activation::kSoftplus: out = softplus(v); break;
      case Activation::kSilu: out = silu(v); break;
    }
    store_element(y + i, out);
  }
}

/// Launches kernel<TX, TY> with one block per row of x.
template <template <typename, typename> class Launch>
Status launch_rows(const char* op, const TensorView& x, const TensorView& y, RowsArgs args,
                   Stream stream) {
  args.x = x.raw();
  args.y = y.raw();
  args.x_rows = row_layout(x);
  args.y_rows = row_layout(y);
  args.n = x.size(-1);
  const int64_t rows = num_rows(args.x_rows);
  if (rows == 0 || args.n == 0) return ok_status();
  HYLA_RETURN_IF_ERROR(check_grid_rows(op, rows));
  const bool dispatched = dispatch_element(x.dtype(), [&]<typename TX>(TX) {
    dispatch_element(y.dtype(), [&]<typename TY>(TY) {
      Launch<TX, TY>::run(unsigned(rows), row_block_threads(args.n), to_cuda(stream), args);
      HYLA_CUDA_CHECK_LAUNCH();
    });
  });
  HYLA_CHECK(dispatched, op, ": unexpected dtype ", dtype_name(x.dtype()));
  return ok_status();
}

template <typename TX, typename TY>
struct L2NormLaunch {
  static void run(unsigned grid, int block, cudaStream_t s, const RowsArgs& a) {
    l2norm_kernel<TX, TY><<<grid, block, 0, s>>>(a);
  }
};
template <typename TX, typename TY>
struct ActivationLaunch {
  static void run(unsigned grid, int block, cudaStream_t s, const RowsArgs& a) {
    activation_kernel<TX, TY><<<grid, block, 0, s>>>(a);
  }
};

}  // namespace

Status l2norm(const TensorView& x, const TensorView& y, float eps, Stream stream) {
  RowsArgs args{};
  args.eps = eps;
  return launch_rows<L2NormLaunch>("l2norm", x, y, args, stream);
}

Status activation(Activation act, const TensorView& x, const TensorView& y, Stream stream) {
  RowsArgs args{};
  args.act = act;
  return launch_rows<ActivationLaunch>("activation", x, y, args, stream);
}

}  // namespace hyla::kernels::cuda
