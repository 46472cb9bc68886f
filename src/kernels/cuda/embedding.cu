// CUDA body of the embedding lookup (see kernels/embedding.h): one block per token, its threads
// striding over the row; y[t, i] = float(table[ids[t], i]), or NaN when ids[t] is outside [0, V).
#include "kernels/cuda/common.cuh"
#include "kernels/embedding.h"

namespace hyla::kernels::cuda {

namespace {

template <typename E>
struct EmbeddingArgs {
  const E* table;      // [V, H], row stride table_stride
  const int32_t* ids;  // [T]
  float* y;            // [T, H], row stride y_stride
  int64_t V, H, table_stride, y_stride;
};

template <typename E>
__global__ void embedding_kernel(const __grid_constant__ EmbeddingArgs<E> a) {
  const int64_t t = blockIdx.x;
  const int32_t id = a.ids[t];
  float* out = a.y + t * a.y_stride;
  if (id < 0 || id >= a.V) {
    for (int64_t i = threadIdx.x; i < a.H; i += blockDim.x) out[i] = __int_as_float(0x7fffffff);
    return;
  }
  const E* row = a.table + int64_t(id) * a.table_stride;
  for (int64_t i = threadIdx.x; i < a.H; i += blockDim.x) out[i] = to_float(row[i]);
}

template <typename E>
void launch_embedding(const EmbeddingParams& p, cudaStream_t stream) {
  const EmbeddingArgs<E> args{.table = ptr<const E>(p.table),
                              .ids = ptr<const int32_t>(p.ids),
                              .y = ptr<float>(p.y),
                              .V = p.table.size(0),
                              .H = p.table.size(1),
                              .table_stride = p.table.stride(0),
                              .y_stride = p.y.stride(0)};
  embedding_kernel<E><<<unsigned(p.ids.size(0)), 256, 0, stream>>>(args);
  HYLA_CUDA_CHECK_LAUNCH();
}

}  // namespace

Status embedding(const EmbeddingParams& p, Stream stream) {
  if (p.ids.size(0) == 0) return ok_status();
  const bool launched = dispatch_float(
      p.table.dtype(), [&]<typename E>(E) { launch_embedding<E>(p, to_cuda(stream)); });
  HYLA_CHECK(launched, "embedding: table dtype ", dtype_name(p.table.dtype()));
  return ok_status();
}

}  // namespace hyla::kernels::cuda
