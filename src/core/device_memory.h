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

void* device_alloc(Device device, size_t bytes);
void device_free(Device device, void* ptr);
/// Copies `bytes` between any two devices (synchronous).
void device_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
void device_fill_bytes(Device device, void* ptr, uint8_t byte, size_t bytes);
/// Waits until the device has finished all queued work (no-op for the CPU).
void device_synchronize(Device device);

}  // namespace hyla
