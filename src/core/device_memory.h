// Raw memory on a device: allocation, copy, fill. The CUDA half lives in device_memory.cu and is
// only linked in CUDA builds; a CPU-only build reports "built without CUDA" for CUDA devices.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace hyla {

/// True when this binary was built with CUDA and at least one device is visible.
bool cuda_available();

/// Free and total memory of a device: cudaMemGetInfo for a CUDA device. Errors: a CPU device
/// (the host's memory is runtime/memory/host_memory's), a build without CUDA, no such device.
struct DeviceFreeMemory {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
};
Result<DeviceFreeMemory> device_free_memory(Device device);

/// The CUDA stream that `Stream{}` means on this thread: the legacy default stream, unless a
/// CurrentStream scope names another (the engine does while it captures a CUDA graph, which the
/// legacy stream cannot be). CUDA allocations and frees, kernel launches given `Stream{}` and
/// device_copy_async are queued on it. Its handle is never null on a CUDA build.
Stream current_stream();
class CurrentStream {
 public:
  explicit CurrentStream(Stream stream);
  ~CurrentStream();
  CurrentStream(const CurrentStream&) = delete;
  CurrentStream& operator=(const CurrentStream&) = delete;

 private:
  Stream previous_;
};

/// Makes a CUDA device the calling thread's current one for the scope (cudaSetDevice): the
/// device that its allocations, new streams and launches use. Tensor-parallel ranks each hold
/// one on their own thread. A CPU device, or a build without CUDA, changes nothing.
class CurrentDevice {
 public:
  explicit CurrentDevice(Device device);
  ~CurrentDevice();
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = -1;  // the CUDA device to restore, -1: none changed
};

/// Page-locked host memory (cudaMallocHost; plain memory in a build without CUDA): the source of
/// asynchronous uploads and the target of asynchronous downloads.
void* pinned_alloc(size_t bytes);
void pinned_free(void* ptr);

void* device_alloc(Device device, size_t bytes);
void device_free(Device device, void* ptr);
/// Copies `bytes` between any two devices (synchronous).
void device_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
/// The same, queued on current_stream() with no wait (CPU to CPU: a memcpy now). Host memory must
/// be pinned and stay unchanged until the copy has run.
void device_copy_async(void* dst, Device dst_device, const void* src, Device src_device,
                       size_t bytes);
/// Queued on current_stream() for a CUDA device.
void device_fill_bytes(Device device, void* ptr, uint8_t byte, size_t bytes);
/// Waits until the device has finished all queued work (no-op for the CPU).
void device_synchronize(Device device);

}  // namespace hyla
