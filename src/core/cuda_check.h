// HYLA_CUDA_CHECK: wraps every CUDA runtime call; aborts with file:line and the CUDA error string.
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"

#define HYLA_CUDA_CHECK(call)                                                                   \
  do {                                                                                          \
    const cudaError_t hyla_cuda_err_ = (call);                                                  \
    HYLA_CHECK(hyla_cuda_err_ == cudaSuccess, #call, ": ", cudaGetErrorString(hyla_cuda_err_)); \
  } while (0)
