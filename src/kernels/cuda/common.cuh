// Device helpers shared by the CUDA bodies: element types and conversions, warp and block
// reductions, launch-grid arithmetic, and the dtype switch that picks a kernel instantiation.
// CUDA code only (include from .cu files).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "core/cuda_check.h"
#include "core/device_memory.h"
#include "core/tensor.h"

namespace hyla::kernels::cuda {

/// The stream a kernel call was given; `Stream{}`: the thread's current stream (the legacy default
/// stream unless the engine is capturing a CUDA graph, core/device_memory.h).
inline cudaStream_t to_cuda(Stream s) {
  return static_cast<cudaStream_t>(s.handle ? s.handle : current_stream().handle);
}

/// Aborts with the launch site when the last launch failed (a bad shape is a programming error:
/// every argument was checked by the op's entry before the launch).
#define HYLA_CUDA_CHECK_LAUNCH() HYLA_CUDA_CHECK(cudaGetLastError())

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Raises `kernel`'s dynamic shared memory limit to `bytes` on the current device, once per
/// (kernel, device). The default limit is 48 KB less the kernel's static shared memory, so even a
/// 48 KB request needs the call when the kernel also declares static shared memory (mbarriers).
/// The limit is a per-device attribute: each GPU that a tensor-parallel rank runs on gets its own.
inline void allow_dynamic_smem(const void* kernel, size_t bytes) {
  int device = 0;
  HYLA_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, size_t> raised;  // (kernel, device) -> limit
  const std::lock_guard<std::mutex> lock(mutex);
  size_t& limit = raised[{kernel, device}];
  if (bytes <= limit) return;
  HYLA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  limit = bytes;
}
template <typename... Args>
void allow_dynamic_smem(void (*kernel)(Args...), size_t bytes) {
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), bytes);
}

// ---- element types: f32 and bf16 activations / weights, read and written through float ----
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
/// Round to nearest even, as the CPU's f32_to_bf16 (core/dtype.h).
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

/// Calls f(T{}) with T the device element type of `dtype` (float or __nv_bfloat16); returns
/// false for other dtypes (the entry's checks exclude them, so callers abort on false).
template <typename F>
bool dispatch_float(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: f(float{}); return true;
    case DType::kBF16: f(__nv_bfloat16{}); return true;
    default: return false;
  }
}
/// Device pointer of a view as element type T (the entry checked the dtype).
template <typename T>
T* ptr(const TensorView& t) {
  return static_cast<T*>(t.raw());
}

// ---- reductions ----
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
/// Sum over the block (blockDim.x a multiple of 32, <= 1024), returned to every thread. `scratch`
/// holds 32 floats of shared memory; the call starts and ends with a barrier, so it can be reused.
__device__ __forceinline__ float block_sum(float x, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = warp_sum(x);
  __syncthreads();
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(x);
}
/// Max over the block, as block_sum.
__device__ __forceinline__ float block_max(float x, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = warp_max(x);
  __syncthreads();
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(x);
}

}  // namespace hyla::kernels::cuda
