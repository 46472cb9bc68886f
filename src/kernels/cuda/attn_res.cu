// CUDA body of the Attention-Residual mixture (kernels/attn_res.h), per token t over the rows
// [blocks[t, 0 .. n-1], partial[t]]:
//   score_j = (row_j . cw) / sqrt(mean(row_j^2) + eps);  p = softmax(score);  y = sum_j p_j row_j
// One block per token: each score's two sums are block reductions; thread 0 takes the softmax
// over the n + 1 scores in the CPU body's order; then the threads split the d columns of y, each
// summing over j in the CPU body's order with the same roundings (no fused multiply-add).
// Layouts: blocks [T, n, d], partial / y [T, d] f32, cw [d] f32|bf16 (strided), probs [T, n + 1]
// f32; last dims contiguous, the others strided.
#include "kernels/attn_res.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rows.cuh"

namespace hyla::kernels::cuda {

namespace {

/// The most candidates (n + 1) a block keeps the weights of in shared memory.
constexpr int64_t kMaxCandidates = 4096;

struct AttnResArgs {
  const float* blocks;   // [T, n, d], strides stride_blocks_t, stride_blocks_j; null for n = 0
  const float* partial;  // [T, d], row stride stride_partial
  const void* cw;        // [d] TW, stride stride_cw
  float* y;              // [T, d], row stride stride_y
  float* probs;          // [T, n + 1], row stride stride_probs; null when not wanted
  int64_t stride_blocks_t, stride_blocks_j, stride_partial, stride_y, stride_probs, stride_cw, n, d;
  float eps;
};

template <typename TW>
__global__ void attn_res_kernel(const __grid_constant__ AttnResArgs a) {
  __shared__ float scratch[32];
  extern __shared__ float weight[];  // [n + 1]: scores, then the mixture weights
  const int64_t t = blockIdx.x;
  const TW* cw = static_cast<const TW*>(a.cw);
  auto row_of = [&](int64_t j) {
    return j < a.n ? a.blocks + t * a.stride_blocks_t + j * a.stride_blocks_j
                   : a.partial + t * a.stride_partial;
  };
  for (int64_t j = 0; j <= a.n; ++j) {
    const float* row = row_of(j);
    float sum_sq = 0.0f, dot = 0.0f;
    for (int64_t i = threadIdx.x; i < a.d; i += blockDim.x) {
      sum_sq += row[i] * row[i];
      dot += row[i] * to_float(cw[i * a.stride_cw]);
    }
    sum_sq = block_sum(sum_sq, scratch);
    dot = block_sum(dot, scratch);
    if (threadIdx.x == 0) weight[j] = dot / sqrtf(sum_sq / float(a.d) + a.eps);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    // p = softmax(score), as the CPU body: max, exp(score - max), sum, divide
    float max_score = -INFINITY;
    for (int64_t j = 0; j <= a.n; ++j) max_score = fmaxf(max_score, weight[j]);
    float total = 0.0f;
    for (int64_t j = 0; j <= a.n; ++j) {
      weight[j] = expf(weight[j] - max_score);
      total += weight[j];
    }
    for (int64_t j = 0; j <= a.n; ++j) weight[j] /= total;
    if (a.probs)
      for (int64_t j = 0; j <= a.n; ++j) a.probs[t * a.stride_probs + j] = weight[j];
  }
  __syncthreads();
  // y = sum_j p_j row_j, j ascending; y does not overlap the rows (checked by the entry)
  float* y = a.y + t * a.stride_y;
  for (int64_t i = threadIdx.x; i < a.d; i += blockDim.x) {
    float acc = __fmul_rn(weight[0], row_of(0)[i]);
    for (int64_t j = 1; j <= a.n; ++j) acc = __fadd_rn(acc, __fmul_rn(weight[j], row_of(j)[i]));
    y[i] = acc;
  }
}

}  // namespace

Status attn_res(const AttnResParams& p, Stream stream) {
  const int64_t n = p.blocks.defined() ? p.blocks.size(1) : 0;
  if (n + 1 > kMaxCandidates)
    return unsupported("attn_res: ", n, " block snapshots on CUDA, supported up to ",
                       kMaxCandidates - 1);
  const bool with_probs = p.probs.defined();
  const AttnResArgs args{
      .blocks = n > 0 ? static_cast<const float*>(p.blocks.raw()) : nullptr,
      .partial = static_cast<const float*>(p.partial.raw()),
      .cw = p.cw.raw(),
      .y = static_cast<float*>(p.y.raw()),
      .probs = with_probs ? static_cast<float*>(p.probs.raw()) : nullptr,
      .stride_blocks_t = n > 0 ? p.blocks.stride(0) : 0,
      .stride_blocks_j = n > 0 ? p.blocks.stride(1) : 0,
      .stride_partial = p.partial.stride(0),
      .stride_y = p.y.stride(0),
      .stride_probs = with_probs ? p.probs.stride(0) : 0,
      .stride_cw = p.cw.stride(0),
      .n = n,
      .d = p.partial.size(1),
      .eps = p.eps,
  };
  const int64_t T = p.partial.size(0);
  if (T == 0) return ok_status();
  HYLA_RETURN_IF_ERROR(check_grid_rows("attn_res", T));
  const size_t smem = size_t(n + 1) * sizeof(float);
  const bool dispatched = dispatch_float(p.cw.dtype(), [&]<typename TW>(TW) {
    attn_res_kernel<TW><<<unsigned(T), row_block_threads(args.d), smem, to_cuda(stream)>>>(args);
    HYLA_CUDA_CHECK_LAUNCH();
  });
  HYLA_CHECK(dispatched, "attn_res: unexpected dtype ", dtype_name(p.cw.dtype()));
  return ok_status();
}

}  // namespace hyla::kernels::cuda
