// launch_kernel_ex: one cudaLaunchKernelEx with the launch attributes Hyla's kernels use, so that
// each launch site names its shape instead of filling cudaLaunchConfig_t by hand. CUDA code only
// (include from .cu files).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "core/cuda_check.h"

namespace hyla {

/// Grid, block and the optional attributes of one launch.
struct LaunchShape {
  dim3 grid;
  dim3 block;
  size_t shared_bytes = 0;  ///< dynamic shared memory per block
  /// Blocks per thread-block cluster along x (1: no cluster). Sizes beyond 8, the non-portable
  /// ones, are opted into once per kernel.
  unsigned cluster = 1;
  /// Programmatic dependent launch: the kernel may start before the kernel before it on the
  /// stream has finished (it waits with griddepcontrol.wait before reading that kernel's output).
  bool dependent = false;
};

/// Launches kKernel(args...) with `shape` on `stream`; aborts on a CUDA error (HYLA_CUDA_CHECK).
template <auto kKernel, typename... Args>
void launch_kernel_ex(const LaunchShape& shape, cudaStream_t stream, Args&&... args) {
  if (shape.cluster > 8) {
    static const cudaError_t opt_in =
        cudaFuncSetAttribute(kKernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    HYLA_CUDA_CHECK(opt_in);
  }
  cudaLaunchConfig_t config{};
  config.gridDim = shape.grid;
  config.blockDim = shape.block;
  config.dynamicSmemBytes = shape.shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attrs[2]{};
  unsigned n = 0;
  if (shape.cluster > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = shape.cluster;
    attrs[n].val.clusterDim.y = 1;
    attrs[n].val.clusterDim.z = 1;
    ++n;
  }
  if (shape.dependent) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  config.attrs = attrs;
  config.numAttrs = n;
  HYLA_CUDA_CHECK(cudaLaunchKernelEx(&config, kKernel, std::forward<Args>(args)...));
}

}  // namespace hyla
