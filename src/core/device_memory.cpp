// Host side of device_memory.h; CUDA calls are forwarded to device_memory.cu in CUDA builds.
#include "core/device_memory.h"

#include <cstdlib>
#include <cstring>

namespace hyla {

#if HYLA_WITH_CUDA
// Defined in device_memory.cu.
bool cuda_available_impl();
void* cuda_alloc(size_t bytes);
void cuda_free(void* ptr);
void cuda_copy(void* dst, bool dst_cuda, const void* src, bool src_cuda, size_t bytes);
void cuda_fill_bytes(void* ptr, uint8_t byte, size_t bytes);
void cuda_copy_async(void* dst, bool dst_cuda, const void* src, bool src_cuda, size_t bytes);
void* cuda_pinned_alloc(size_t bytes);
void cuda_pinned_free(void* ptr);
void* cuda_legacy_stream();
void cuda_synchronize();
Result<DeviceFreeMemory> cuda_free_memory(int index);
int cuda_set_device(int index);  // returns the previous current device
#else
static bool cuda_available_impl() { return false; }
[[noreturn]] static void no_cuda() {
  HYLA_CHECK(false, "this build of Hyla has no CUDA support (configure with -DHYLA_CUDA=ON)");
  std::abort();
}
static void* cuda_alloc(size_t) { no_cuda(); }
static void cuda_free(void*) { no_cuda(); }
static void cuda_copy(void*, bool, const void*, bool, size_t) { no_cuda(); }
static void cuda_fill_bytes(void*, uint8_t, size_t) { no_cuda(); }
static void cuda_copy_async(void*, bool, const void*, bool, size_t) { no_cuda(); }
static void* cuda_pinned_alloc(size_t bytes) { return std::malloc(bytes == 0 ? 1 : bytes); }
static void cuda_pinned_free(void* ptr) { std::free(ptr); }
static void* cuda_legacy_stream() { return nullptr; }
static void cuda_synchronize() { no_cuda(); }
#endif

bool cuda_available() { return cuda_available_impl(); }

Result<DeviceFreeMemory> device_free_memory(Device device) {
  if (!device.is_cuda())
    return invalid_argument("device_free_memory: ", device_name(device),
                            " is not a CUDA device (the host's memory: host_memory())");
#if HYLA_WITH_CUDA
  return cuda_free_memory(device.index);
#else
  return unsupported(
      "device_free_memory: this build has no CUDA support (configure with -DHYLA_CUDA=ON)");
#endif
}

namespace {
thread_local bool g_stream_set = false;
thread_local Stream g_stream{};
}  // namespace

Stream current_stream() { return g_stream_set ? g_stream : Stream{cuda_legacy_stream()}; }

CurrentDevice::CurrentDevice(Device device) {
#if HYLA_WITH_CUDA
  if (device.is_cuda()) previous_ = cuda_set_device(device.index);
#else
  (void)device;
#endif
}

CurrentDevice::~CurrentDevice() {
#if HYLA_WITH_CUDA
  if (previous_ >= 0) (void)cuda_set_device(previous_);
#endif
}

CurrentStream::CurrentStream(Stream stream) : previous_(current_stream()) {
  g_stream = stream;
  g_stream_set = true;
}

CurrentStream::~CurrentStream() { g_stream = previous_; }

void* pinned_alloc(size_t bytes) {
  void* p = cuda_pinned_alloc(bytes);
  HYLA_CHECK(p != nullptr, "pinned host allocation of ", bytes, " bytes failed");
  return p;
}

void pinned_free(void* ptr) {
  if (ptr != nullptr) cuda_pinned_free(ptr);
}

void* device_alloc(Device device, size_t bytes) {
  if (device.is_cuda()) return cuda_alloc(bytes);
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  HYLA_CHECK(p != nullptr, "host allocation of ", bytes, " bytes failed");
  return p;
}

void device_free(Device device, void* ptr) {
  if (ptr == nullptr) return;
  if (device.is_cuda()) return cuda_free(ptr);
  std::free(ptr);
}

void device_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  cuda_copy(dst, dst_device.is_cuda(), src, src_device.is_cuda(), bytes);
}

void device_copy_async(void* dst, Device dst_device, const void* src, Device src_device,
                       size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  cuda_copy_async(dst, dst_device.is_cuda(), src, src_device.is_cuda(), bytes);
}

void device_fill_bytes(Device device, void* ptr, uint8_t byte, size_t bytes) {
  if (device.is_cuda()) return cuda_fill_bytes(ptr, byte, bytes);
  std::memset(ptr, byte, bytes);
}

void device_synchronize(Device device) {
  if (device.is_cuda()) cuda_synchronize();
}

}  // namespace hyla
