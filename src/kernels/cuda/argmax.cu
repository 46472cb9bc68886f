// CUDA body of the greedy pick (see kernels/argmax.h): one block per row. Each thread scans its
// strided columns kUnroll loads at a time (independent loads in flight: one block reads a whole
// vocabulary row), keeping the larger value and, on equal values, the lower id, with NaN counted
// as -inf (the lowest id of the maxima: exactly the CPU's strict-> scan from a cleaned row[0]);
// then the block reduces the (value, id) pairs the same way. The census (count, lowest non-finite
// id) reduces beside.
#include <cstdint>

#include "kernels/argmax.h"
#include "kernels/cuda/common.cuh"

namespace hyla::kernels::cuda {

namespace {

constexpr int kThreads = 1024;
constexpr int kUnroll = 4;
constexpr unsigned kFullMask = 0xffffffffu;

struct ArgmaxArgs {
  const float* logits;  // [B, V], row stride logits_stride
  int32_t* ids;
  int32_t* non_finite;
  int32_t* first_bad;
  float* first_bad_value;  // or null
  int64_t V, first_bad_value_stride, logits_stride, ids_stride, non_finite_stride, first_bad_stride;
};

struct Best {
  float value;
  int32_t id;  // V when nothing beat -inf yet
  int32_t bad;
  int32_t first_bad;  // V when none
};

__device__ __forceinline__ Best merge(Best a, Best b) {
  Best r;
  const bool take_b = b.value > a.value || (b.value == a.value && b.id < a.id);
  r.value = take_b ? b.value : a.value;
  r.id = take_b ? b.id : a.id;
  r.bad = a.bad + b.bad;
  r.first_bad = min(a.first_bad, b.first_bad);
  return r;
}

__device__ __forceinline__ Best warp_merge(Best x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Best y;
    y.value = __shfl_xor_sync(kFullMask, x.value, o);
    y.id = __shfl_xor_sync(kFullMask, x.id, o);
    y.bad = __shfl_xor_sync(kFullMask, x.bad, o);
    y.first_bad = __shfl_xor_sync(kFullMask, x.first_bad, o);
    x = merge(x, y);
  }
  return x;
}

__global__ void __launch_bounds__(kThreads) argmax_kernel(const __grid_constant__ ArgmaxArgs a) {
  const int64_t b = blockIdx.x;
  const float* row = a.logits + b * a.logits_stride;
  const int32_t V = int32_t(a.V);
  Best best{-INFINITY, V, 0, V};
  for (int32_t base = 0; base < V; base += kThreads * kUnroll) {
    float x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t v = base + u * kThreads + int32_t(threadIdx.x);
      x[u] = v < V ? row[v] : -INFINITY;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t v = base + u * kThreads + int32_t(threadIdx.x);
      if (v >= V) continue;
      const float value = isnan(x[u]) ? -INFINITY : x[u];  // NaN counts as -inf
      if (value > best.value || (value == best.value && v < best.id)) {
        best.value = value;
        best.id = v;
      }
      if (!isfinite(x[u])) {
        ++best.bad;
        best.first_bad = min(best.first_bad, v);
      }
    }
  }
  best = warp_merge(best);
  __shared__ Best partial[kThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = best;
  __syncthreads();
  if (warp == 0) {
    best = lane < kThreads / 32 ? partial[lane] : Best{-INFINITY, V, 0, V};
    best = warp_merge(best);
    if (lane == 0) {
      a.ids[b * a.ids_stride] = best.id == V ? 0 : best.id;
      a.non_finite[b * a.non_finite_stride] = best.bad;
      a.first_bad[b * a.first_bad_stride] = best.first_bad == V ? -1 : best.first_bad;
      if (a.first_bad_value)
        a.first_bad_value[b * a.first_bad_value_stride] =
            best.first_bad == V ? 0.0f : row[best.first_bad];
    }
  }
}

}  // namespace

Status argmax(const ArgmaxParams& p, Stream stream) {
  const int64_t B = p.logits.size(0);
  if (B == 0) return ok_status();
  const ArgmaxArgs args{
      .logits = ptr<const float>(p.logits),
      .ids = ptr<int32_t>(p.ids),
      .non_finite = ptr<int32_t>(p.non_finite),
      .first_bad = ptr<int32_t>(p.first_bad),
      .first_bad_value = p.first_bad_value.defined() ? ptr<float>(p.first_bad_value) : nullptr,
      .V = p.logits.size(1),
      .first_bad_value_stride = p.first_bad_value.defined() ? p.first_bad_value.stride(0) : 0,
      .logits_stride = p.logits.stride(0),
      .ids_stride = p.ids.stride(0),
      .non_finite_stride = p.non_finite.stride(0),
      .first_bad_stride = p.first_bad.stride(0)};
  argmax_kernel<<<unsigned(B), kThreads, 0, to_cuda(stream)>>>(args);
  HYLA_CUDA_CHECK_LAUNCH();
  return ok_status();
}

}  // namespace hyla::kernels::cuda
