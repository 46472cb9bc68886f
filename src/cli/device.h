// `--device cpu|cuda|auto` for the `hyla` subcommands that run a model: the name to a Device (with
// the reason when this build or machine cannot give it), the loaded model moved there, and the
// memory that device can give the engine's pools.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/tensor.h"
#include "model/model.h"
#include "runtime/engine.h"

namespace hyla::cli {

/// The accepted --device names.
inline constexpr const char* kDeviceNames[] = {"cpu", "cuda", "auto"};

/// "cpu" -> the host; "cuda" -> CUDA device 0; "auto" -> CUDA device 0 when cuda_available(),
/// else the host. Errors: another name; "cuda" in a build without CUDA ("this build has no CUDA
/// support") or with no device visible.
Result<Device> resolve_device(const std::string& name);

/// The model with its weights on `device` (Model::to); `model` itself when it is there already.
/// Error: the weights could not be moved (Model::to left them where they were).
Result<std::unique_ptr<model::Model>> model_on(std::unique_ptr<model::Model> model, Device device);

/// Where the loaded model's weights go before the engine is made: `device`, or the host when
/// the model runs as tensor_parallel > 1 ranks (the engine slices the whole model on the host
/// and moves each rank's slice to its device).
inline Device weights_device(Device device, int tensor_parallel) {
  return tensor_parallel > 1 ? Device::cpu() : device;
}

/// --tensor-parallel's range. Error: N < 1, named.
Status check_tensor_parallel(int ranks);

/// EngineOptions::tensor_parallel for `ranks` ranks with the model on `device`: on the host, N
/// threads of this process (the default group); on a CUDA device, one GPU per rank from device's
/// index on, their sums added by NCCL. Errors: fewer GPUs visible than ranks; a build without
/// NCCL (both named with --tensor-parallel).
Result<runtime::TensorParallelOptions> tensor_parallel_options(int ranks, Device device);

/// Where the engine's memory plan holds: "cpu", or "cpu, each of 2 tensor-parallel ranks".
std::string plan_where(Device device, int tensor_parallel);

/// What `device` can give: the host's MemAvailable or the CUDA device's free memory, and a few
/// words saying which ("31.2 GiB available of 62.5 GiB (/proc/meminfo)"). Error: no figure.
struct AvailableMemory {
  int64_t bytes = 0;
  std::string description;
};
Result<AvailableMemory> available_memory(Device device);

}  // namespace hyla::cli
