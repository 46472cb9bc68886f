// Shared by the GPU benchmarks of bench/: event timing of a call repeated on the legacy stream.
#pragma once

#include <cuda_runtime.h>

#include "core/cuda_check.h"

namespace hyla::bench {

/// Milliseconds per call of f(i) over `calls` calls after `warmup` untimed ones.
template <typename F>
double time_calls(int warmup, int calls, F&& f) {
  for (int i = 0; i < warmup; ++i) f(i);
  cudaEvent_t start, stop;
  HYLA_CUDA_CHECK(cudaEventCreate(&start));
  HYLA_CUDA_CHECK(cudaEventCreate(&stop));
  HYLA_CUDA_CHECK(cudaEventRecord(start));
  for (int i = 0; i < calls; ++i) f(warmup + i);
  HYLA_CUDA_CHECK(cudaEventRecord(stop));
  HYLA_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  HYLA_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  HYLA_CUDA_CHECK(cudaEventDestroy(start));
  HYLA_CUDA_CHECK(cudaEventDestroy(stop));
  return double(ms) / calls;
}

}  // namespace hyla::bench
