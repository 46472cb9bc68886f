// CUDA body of the MoE combine (see kernels/moe_combine.h): one block per (token, run of
// kColumns columns), so a decode step of one token still spreads over several SMs. Its K
// (position, weight) pairs go to shared memory and thread 0 sorts them by position (insertion
// sort: K is small); then each thread sums its columns in that order, as the CPU body does.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/moe_combine.h"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int64_t kColumns = 256;               // columns per block
constexpr int64_t kMaxSharedBytes = 48 * 1024;  // without the opt-in attribute

struct CombineArgs {
  const float* expert_out;   // [N, width], row stride expert_row; nullptr: no routed term
  const int32_t* positions;  // [T, K], row stride positions_row
  const float* weights;      // [T, K], row stride weights_row
  const float* shared;       // [T, width], row stride shared_row; or nullptr
  const float* shared_gate;  // [T, 1], row stride gate_row; or nullptr
  float* out;                // [T, width], row stride out_row
  int64_t expert_row, positions_row, weights_row, shared_row, gate_row, out_row;
  int64_t N, width;
  int K;
  bool accumulate;
};

__global__ void moe_combine_kernel(const __grid_constant__ CombineArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  int32_t* position = reinterpret_cast<int32_t*>(smem);      // [K]
  float* weight = reinterpret_cast<float*>(position + a.K);  // [K]
  const int64_t t = blockIdx.x;
  if (a.expert_out) {
    for (int k = threadIdx.x; k < a.K; k += blockDim.x) {
      position[k] = a.positions[t * a.positions_row + k];
      weight[k] = a.weights[t * a.weights_row + k];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int k = 1; k < a.K; ++k) {  // ascending position, equal ones keep their order
        const int32_t key = position[k];
        const float w = weight[k];
        int j = k - 1;
        for (; j >= 0 && position[j] > key; --j) {
          position[j + 1] = position[j];
          weight[j + 1] = weight[j];
        }
        position[j + 1] = key;
        weight[j + 1] = w;
      }
    }
    __syncthreads();
  }
  const float s = a.shared_gate ? sigmoid(a.shared_gate[t * a.gate_row]) : 1.0f;
  float* dst = a.out + t * a.out_row;
  const int64_t end = std::min(a.width, (int64_t(blockIdx.y) + 1) * kColumns);
  for (int64_t i = blockIdx.y * kColumns + threadIdx.x; i < end; i += blockDim.x) {
    float acc = a.accumulate ? dst[i] : 0.0f;
    if (a.expert_out) {
      for (int k = 0; k < a.K; ++k) {
        const int64_t row = position[k];
        if (row < 0 || row >= a.N) continue;
        acc += weight[k] * a.expert_out[row * a.expert_row + i];
      }
    }
    if (a.shared) acc += s * a.shared[t * a.shared_row + i];
    dst[i] = acc;
  }
}

}  // namespace

Status moe_combine(const MoeCombineParams& p, Stream stream) {
  const int64_t T = p.out.size(0);
  const bool routed = p.expert_out.defined();
  const int64_t K = routed ? p.slot_positions.size(1) : 0;
  const int64_t shared_bytes = K * int64_t(sizeof(int32_t) + sizeof(float));
  if (shared_bytes > kMaxSharedBytes)
    return unsupported("moe_combine: top_k = ", K, " needs ", shared_bytes,
                       " bytes of shared memory on CUDA, more than ", kMaxSharedBytes);
  if (T == 0) return ok_status();
  CombineArgs a{};
  if (routed) {
    a.expert_out = ptr<const float>(p.expert_out);
    a.positions = ptr<const int32_t>(p.slot_positions);
    a.weights = ptr<const float>(p.topk_weights);
    a.expert_row = p.expert_out.stride(0);
    a.positions_row = p.slot_positions.stride(0);
    a.weights_row = p.topk_weights.stride(0);
    a.N = p.expert_out.size(0);
  }
  if (p.shared.defined()) {
    a.shared = ptr<const float>(p.shared);
    a.shared_row = p.shared.stride(0);
  }
  if (p.shared_gate.defined()) {
    a.shared_gate = ptr<const float>(p.shared_gate);
    a.gate_row = p.shared_gate.stride(0);
  }
  a.out = ptr<float>(p.out);
  a.out_row = p.out.stride(0);
  a.width = p.out.size(1);
  a.K = int(K);
  a.accumulate = p.accumulate;
  if (a.width == 0) return ok_status();
  const dim3 grid(unsigned(T), unsigned(ceil_div(a.width, kColumns)));
  moe_combine_kernel<<<grid, kThreads, size_t(shared_bytes), to_cuda(stream)>>>(a);
  HYLA_CUDA_CHECK_LAUNCH();
  return ok_status();
}

}  // namespace hyla::kernels::cuda
