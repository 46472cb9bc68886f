// The CPU/CUDA dispatch every kernel entry (src/kernels/<op>.cpp) ends with, after its checks:
//   return dispatch("add", p.y.device(), stream, [&] { cpu::add(p); },
//                   HYLA_CUDA_BODY(cuda::add(p, stream)));
// It opens the op's OpScope (`hyla bench --profile`), runs the CPU body on a host view and the
// CUDA body on a CUDA view; a build without CUDA answers unsupported, naming the op. The CUDA
// bodies (cuda/<op>.cu) are compiled in CUDA builds only, so HYLA_CUDA_BODY drops the call there.
#pragma once

#include <string_view>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "core/op_times.h"
#include "core/tensor.h"

namespace hyla::kernels {

/// HYLA_CUDA_BODY's value in a build without CUDA.
struct NoCudaBody {};

#if HYLA_WITH_CUDA
#define HYLA_CUDA_BODY(call) [&]() -> ::hyla::Status { return call; }
#else
#define HYLA_CUDA_BODY(call) \
  ::hyla::kernels::NoCudaBody {}
#endif

/// `op` names the op in the profile (a string literal: the scope keeps the pointer), `error_op`
/// in the error of a build without CUDA. cpu_body() returns nothing; cuda_body() a Status.
template <class CpuBody, class CudaBody>
Status dispatch(const char* op, std::string_view error_op, Device device, Stream stream,
                CpuBody&& cpu_body, CudaBody&& cuda_body) {
  const OpScope scope(op, device, stream);
  if (device.is_cpu()) {
    cpu_body();
    return ok_status();
  }
  if constexpr (std::is_same_v<std::decay_t<CudaBody>, NoCudaBody>) {
    return unsupported(error_op, ": this build has no CUDA support");
  } else {
    return cuda_body();
  }
}

template <class CpuBody, class CudaBody>
Status dispatch(const char* op, Device device, Stream stream, CpuBody&& cpu_body,
                CudaBody&& cuda_body) {
  return dispatch(op, std::string_view(op), device, stream, std::forward<CpuBody>(cpu_body),
                  std::forward<CudaBody>(cuda_body));
}

}  // namespace hyla::kernels
