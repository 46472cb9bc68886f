// CUDA half of device_memory.h (CUDA builds only).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/cuda_check.h"

namespace hyla {

bool cuda_available_impl() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

void* cuda_alloc(size_t bytes) {
  void* p = nullptr;
  HYLA_CUDA_CHECK(cudaMalloc(&p, bytes == 0 ? 256 : bytes));
  return p;
}

void cuda_free(void* ptr) { HYLA_CUDA_CHECK(cudaFree(ptr)); }

void cuda_copy(void* dst, bool dst_cuda, const void* src, bool src_cuda, size_t bytes) {
  const cudaMemcpyKind kind = dst_cuda
                                  ? (src_cuda ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                  : (src_cuda ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  HYLA_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));
}

void cuda_fill_bytes(void* ptr, uint8_t byte, size_t bytes) {
  HYLA_CUDA_CHECK(cudaMemset(ptr, byte, bytes));
}

}  // namespace hyla
