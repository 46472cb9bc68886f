// Helpers for the GPU tests (CUDA bodies against the CPU bodies, which are the specification):
// skip without a device, copy inputs to the GPU, poisoned GPU outputs, results back to the host.
// Pattern of a test: random host inputs -> run the CPU body on host copies and the CUDA body on
// device copies with outputs poisoned (NaN bytes) beforehand -> compare every element with a
// Tolerance whose `why` names the summation-order / rounding difference it covers.
#pragma once

#include <initializer_list>

#include "core/device_memory.h"
#include "core/tensor.h"
#include "testing.h"

/// First statement of every GPU test.
#define HYLA_SKIP_WITHOUT_CUDA()                                                               \
  do {                                                                                         \
    if (!::hyla::cuda_available()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped"; \
  } while (0)

namespace hyla::testing {

/// A device copy of a host tensor.
inline Tensor on_gpu(const Tensor& host) { return host.to(Device::cuda()); }
/// A host copy of a device tensor (synchronises).
inline Tensor on_host(const Tensor& t) { return t.to(Device::cpu()); }
/// A device tensor filled with NaN bytes (0xff): anything the kernel leaves unwritten fails.
inline Tensor poisoned_gpu(std::initializer_list<int64_t> shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, Device::cuda());
  t.fill_bytes(0xff);
  return t;
}

}  // namespace hyla::testing
