// CUDA events of OpTimes (see op_times.h; CUDA builds only).
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "core/device_memory.h"
#include "core/tensor.h"

namespace hyla {

void* op_event_create() {
  cudaEvent_t e = nullptr;
  HYLA_CUDA_CHECK(cudaEventCreate(&e));
  return e;
}

void op_event_destroy(void* event) { (void)cudaEventDestroy(static_cast<cudaEvent_t>(event)); }

void op_event_record(void* event, Stream stream) {
  const void* handle = stream.handle ? stream.handle : current_stream().handle;
  HYLA_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event),
                                  static_cast<cudaStream_t>(const_cast<void*>(handle))));
}

double op_event_seconds(void* start, void* stop) {
  HYLA_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(stop)));
  float ms = 0.0f;
  HYLA_CUDA_CHECK(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(stop)));
  return double(ms) * 1e-3;
}

}  // namespace hyla
