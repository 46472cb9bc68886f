// CUDA body of MoE top-k routing (see kernels/moe_route.h): one warp per token, its scores,
// selection scores and eligibility flags in shared memory. Same arithmetic and tie-breaking as
// the CPU body: strict > while scanning experts in ascending order, and the lower index on equal
// values when two lanes' candidates meet, so the lowest index among equal maxima wins; group
// scores are the top-2 of each group found by the CPU's serial loop (one lane per group).
// Softmax sums in another order than the CPU, so weights may differ in the last bits.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/moe_route.h"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cuda {

namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpsPerBlock = 4;
constexpr int64_t kMaxSharedBytes = 48 * 1024;  // without the opt-in attribute

struct RouteArgs {
  const float* logits;  // [T, E], row stride logits_row
  const float* bias;    // [E] or nullptr
  int32_t* ids;         // [T, top_k], row stride ids_row
  float* weights;       // [T, top_k], row stride weights_row
  int64_t logits_row, ids_row, weights_row;
  int64_t T;
  int E, top_k, num_groups, group_size, topk_groups;
  bool softmax, renormalize, group_limited;
  float routed_scaling;
  int warp_bytes;  // shared memory per warp
};

/// Shared memory of one warp: score[E], choice[E], group_score[G] floats, then eligible[E] and
/// group_eligible[G] flags; padded to 16 bytes.
int64_t route_warp_bytes(int64_t E, int64_t G) {
  return (int64_t(sizeof(float)) * (2 * E + G) + E + G + 15) / 16 * 16;
}

/// The eligible i in [0, n) with the largest value[i], the lowest index on ties; every lane gets
/// lane 0's answer. Returns an index whenever any i is eligible.
__device__ int warp_argmax_eligible(const float* value, const uint8_t* eligible, int n, int lane) {
  float best_value = 0.0f;
  int best = -1;
  for (int i = lane; i < n; i += 32)
    if (eligible[i] && (best < 0 || value[i] > best_value)) {
      best_value = value[i];
      best = i;
    }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float other_value = __shfl_xor_sync(kFullMask, best_value, o);
    const int other = __shfl_xor_sync(kFullMask, best, o);
    const bool take = other >= 0 && (best < 0 || other_value > best_value ||
                                     (other_value == best_value && other < best));
    if (take) {
      best_value = other_value;
      best = other;
    }
  }
  return __shfl_sync(kFullMask, best, 0);
}

__global__ void moe_route_kernel(const __grid_constant__ RouteArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t t = int64_t(blockIdx.x) * kWarpsPerBlock + warp;
  if (t >= a.T) return;  // uniform per warp; the kernel has no block barrier
  const int E = a.E, G = a.num_groups, group_size = a.group_size;
  float* score = reinterpret_cast<float*>(smem + int64_t(warp) * a.warp_bytes);
  float* choice = score + E;
  float* group_score = choice + E;
  uint8_t* eligible = reinterpret_cast<uint8_t*>(group_score + G);
  uint8_t* group_eligible = eligible + E;
  const float* logit = a.logits + t * a.logits_row;

  // scores: softmax = exp(l - max) / sum, or sigmoid per expert (each lane its experts)
  if (a.softmax) {
    float max_logit = -INFINITY;
    for (int e = lane; e < E; e += 32) max_logit = fmaxf(max_logit, logit[e]);
    max_logit = warp_max(max_logit);
    float sum = 0.0f;
    for (int e = lane; e < E; e += 32) {
      score[e] = expf(logit[e] - max_logit);
      sum += score[e];
    }
    sum = warp_sum(sum);
    for (int e = lane; e < E; e += 32) score[e] /= sum;
  } else {
    for (int e = lane; e < E; e += 32) score[e] = sigmoid(logit[e]);
  }
  // choice = score + bias: what the selection ranks
  for (int e = lane; e < E; e += 32) {
    choice[e] = a.bias ? score[e] + a.bias[e] : score[e];
    eligible[e] = a.group_limited ? 0 : 1;
  }
  __syncwarp();

  if (a.group_limited) {
    // group score = the two largest choices of the group, summed (the CPU's loop, a lane a group)
    for (int g = lane; g < G; g += 32) {
      const float* c = choice + int64_t(g) * group_size;
      float first = c[0], second = c[1];
      if (second > first) {
        const float swap = first;
        first = second;
        second = swap;
      }
      for (int i = 2; i < group_size; ++i) {
        if (c[i] > first) {
          second = first;
          first = c[i];
        } else if (c[i] > second) {
          second = c[i];
        }
      }
      group_score[g] = first + second;
      group_eligible[g] = 1;
    }
    __syncwarp();
    // keep the best topk_groups groups: their experts become eligible
    for (int k = 0; k < a.topk_groups; ++k) {
      const int g = warp_argmax_eligible(group_score, group_eligible, G, lane);
      __syncwarp();  // every lane has read group_eligible before lane 0 changes it
      if (lane == 0) group_eligible[g] = 0;
      for (int i = lane; i < group_size; i += 32) eligible[g * group_size + i] = 1;
      __syncwarp();
    }
  }

  // top_k experts by choice, descending; weights are the raw scores (lane 0 writes, in k order)
  int32_t* ids = a.ids + t * a.ids_row;
  float* weights = a.weights + t * a.weights_row;
  float weight_sum = 0.0f;
  for (int k = 0; k < a.top_k; ++k) {
    // an expert is eligible here: the entry checked top_k <= experts in the kept groups
    const int e = warp_argmax_eligible(choice, eligible, E, lane);
    __syncwarp();  // every lane has read eligible before lane 0 changes it
    if (lane == 0) {
      eligible[e] = 0;
      ids[k] = e;
      weights[k] = score[e];
      weight_sum += score[e];
    }
    __syncwarp();
  }
  if (lane == 0) {
    if (a.renormalize) {
      const float denominator = a.softmax ? weight_sum : weight_sum + 1e-20f;
      for (int k = 0; k < a.top_k; ++k) weights[k] /= denominator;
    }
    for (int k = 0; k < a.top_k; ++k) weights[k] *= a.routed_scaling;
  }
}

}  // namespace

Status moe_route(const MoeRouteParams& p, Stream stream) {
  const int64_t T = p.logits.size(0), E = p.logits.size(1);
  const int64_t warp_bytes = route_warp_bytes(E, p.num_groups);
  if (warp_bytes * kWarpsPerBlock > kMaxSharedBytes)
    return unsupported("moe_route: E = ", E, " experts need ", warp_bytes * kWarpsPerBlock,
                       " bytes of shared memory per block on CUDA, more than ", kMaxSharedBytes);
  if (T == 0) return ok_status();
  RouteArgs a{};
  a.logits = ptr<const float>(p.logits);
  a.bias = p.correction_bias.defined() ? ptr<const float>(p.correction_bias) : nullptr;
  a.ids = ptr<int32_t>(p.topk_ids);
  a.weights = ptr<float>(p.topk_weights);
  a.logits_row = p.logits.stride(0);
  a.ids_row = p.topk_ids.stride(0);
  a.weights_row = p.topk_weights.stride(0);
  a.T = T;
  a.E = int(E);
  a.top_k = int(p.top_k);
  a.num_groups = int(p.num_groups);
  a.group_size = int(E / p.num_groups);
  a.topk_groups = int(p.topk_groups);
  a.softmax = p.scoring == MoeScoring::kSoftmax;
  a.renormalize = p.renormalize;
  a.group_limited = p.topk_groups < p.num_groups;
  a.routed_scaling = p.routed_scaling;
  a.warp_bytes = int(warp_bytes);
  const int64_t blocks = ceil_div(T, kWarpsPerBlock);
  moe_route_kernel<<<unsigned(blocks), kWarpsPerBlock * 32, size_t(warp_bytes * kWarpsPerBlock),
                     to_cuda(stream)>>>(a);
  HYLA_CUDA_CHECK_LAUNCH();
  return ok_status();
}

}  // namespace hyla::kernels::cuda
