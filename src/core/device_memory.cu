// CUDA half of device_memory.h (CUDA builds only).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/device_memory.h"

namespace hyla {

bool cuda_available_impl() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

namespace {

/// The current device's default memory pool keeps what it frees (release threshold: unlimited),
/// so the per-layer scratch tensors of a forward pass are served from the pool instead of
/// cudaMalloc / cudaFree, which synchronise the device.
void keep_freed_memory_in_pool() {
  int device = 0;
  HYLA_CUDA_CHECK(cudaGetDevice(&device));
  static thread_local int configured_for = -1;
  if (configured_for == device) return;
  cudaMemPool_t pool = nullptr;
  HYLA_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t threshold = UINT64_MAX;
  HYLA_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  configured_for = device;
}

}  // namespace

namespace {
cudaStream_t current() { return static_cast<cudaStream_t>(current_stream().handle); }
}  // namespace

void* cuda_legacy_stream() { return static_cast<void*>(cudaStreamLegacy); }

// Stream-ordered on the current stream (the legacy default stream, which every kernel launch and
// device_copy of Hyla is ordered with, unless the engine is capturing a graph on its own stream,
// which synchronises with the legacy one): a buffer freed here is reused only by work queued
// after the free.
void* cuda_alloc(size_t bytes) {
  keep_freed_memory_in_pool();
  void* p = nullptr;
  HYLA_CUDA_CHECK(cudaMallocAsync(&p, bytes == 0 ? 256 : bytes, current()));
  return p;
}

void cuda_free(void* ptr) { HYLA_CUDA_CHECK(cudaFreeAsync(ptr, current())); }

void* cuda_pinned_alloc(size_t bytes) {
  void* p = nullptr;
  HYLA_CUDA_CHECK(cudaMallocHost(&p, bytes == 0 ? 1 : bytes));
  return p;
}

void cuda_pinned_free(void* ptr) { HYLA_CUDA_CHECK(cudaFreeHost(ptr)); }

void cuda_copy_async(void* dst, bool dst_cuda, const void* src, bool src_cuda, size_t bytes) {
  const cudaMemcpyKind kind = dst_cuda
                                  ? (src_cuda ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                  : (src_cuda ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  HYLA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, current()));
}

void cuda_copy(void* dst, bool dst_cuda, const void* src, bool src_cuda, size_t bytes) {
  const cudaMemcpyKind kind = dst_cuda
                                  ? (src_cuda ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                  : (src_cuda ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  HYLA_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));
}

Result<DeviceFreeMemory> cuda_free_memory(int index) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  (void)cudaGetLastError();  // a failed count (no driver, no device) is answered below, not kept
  if (count == 0)
    return Status(ErrorCode::kNotFound,
                  "device_free_memory: no CUDA device is visible (none installed, no driver, or "
                  "hidden by CUDA_VISIBLE_DEVICES)");
  if (index < 0 || index >= count)
    return Status(ErrorCode::kNotFound, str_cat("device_free_memory: there is no CUDA device ",
                                                index, ": ", count, " are visible"));
  // cudaMemGetInfo answers for the current device: switch to `index` for the call, then back.
  int current = 0;
  HYLA_CUDA_CHECK(cudaGetDevice(&current));
  HYLA_CUDA_CHECK(cudaSetDevice(index));
  size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t err = cudaMemGetInfo(&free_bytes, &total_bytes);
  HYLA_CUDA_CHECK(cudaSetDevice(current));
  if (err != cudaSuccess)
    return internal_error("device_free_memory: cudaMemGetInfo on CUDA device ", index, ": ",
                          cudaGetErrorString(err));
  return DeviceFreeMemory{int64_t(free_bytes), int64_t(total_bytes)};
}

void cuda_synchronize() { HYLA_CUDA_CHECK(cudaDeviceSynchronize()); }

int cuda_set_device(int index) {
  int previous = 0;
  HYLA_CUDA_CHECK(cudaGetDevice(&previous));
  if (previous != index) HYLA_CUDA_CHECK(cudaSetDevice(index));
  return previous;
}

void cuda_fill_bytes(void* ptr, uint8_t byte, size_t bytes) {
  HYLA_CUDA_CHECK(cudaMemsetAsync(ptr, byte, bytes, current()));
}

}  // namespace hyla
