// --device for the `hyla` subcommands (see device.h).
#include "cli/device.h"

#include "core/device_memory.h"
#include "runtime/memory/host_memory.h"
#include "runtime/memory/memory_plan.h"
#include "runtime/tp/nccl_group.h"

namespace hyla::cli {

Result<Device> resolve_device(const std::string& name) {
  if (name == "cpu") return Device::cpu();
  if (name == "auto") return cuda_available() ? Device::cuda() : Device::cpu();
  if (name != "cuda")
    return invalid_argument("--device is '", name, "', expected cpu, cuda or auto");
#if HYLA_WITH_CUDA
  if (!cuda_available())
    return Status(ErrorCode::kNotFound,
                  "--device cuda: no CUDA device is visible (none installed, no driver, or hidden "
                  "by CUDA_VISIBLE_DEVICES); --device cpu runs on the CPU");
  return Device::cuda();
#else
  return unsupported(
      "--device cuda: this build has no CUDA support (rebuild with nvcc installed, or configure "
      "with -DHYLA_CUDA=ON); --device cpu runs on the CPU");
#endif
}

Result<std::unique_ptr<model::Model>> model_on(std::unique_ptr<model::Model> model, Device device) {
  if (model->device() == device) return model;
  return model->to(device);
}

Status check_tensor_parallel(int ranks) {
  if (ranks >= 1) return ok_status();
  return invalid_argument("--tensor-parallel is ", ranks,
                          ", expected an integer >= 1 (the ranks the model is split over by head; "
                          "1: off)");
}

Result<runtime::TensorParallelOptions> tensor_parallel_options(int ranks, Device device) {
  runtime::TensorParallelOptions tp;
  tp.ranks = ranks;
  if (ranks <= 1 || device.is_cpu()) return tp;
  if (!runtime::nccl_built())
    return unsupported("--tensor-parallel ", ranks, " on ", device_name(device),
                       ": this build has no NCCL, which adds the ranks' sums across GPUs "
                       "(configure where nccl.h and libnccl are installed); --device cpu runs the "
                       "ranks as threads on the host");
  for (int r = 0; r < ranks; ++r) {
    const Device gpu = Device::cuda(device.index + r);
    if (Result<DeviceFreeMemory> visible = device_free_memory(gpu); !visible.ok())
      return Status(visible.status().code(),
                    str_cat("--tensor-parallel ", ranks, " needs one GPU per rank (",
                            device_name(device), " on): ", visible.status().message()));
    tp.devices.push_back(gpu);
  }
  tp.group = runtime::nccl_group_factory();
  return tp;
}

std::string plan_where(Device device, int tensor_parallel) {
  if (tensor_parallel <= 1) return device_name(device);
  return str_cat(device_name(device), ", each of ", tensor_parallel, " tensor-parallel ranks");
}

Result<AvailableMemory> available_memory(Device device) {
  if (device.is_cuda()) {
    HYLA_ASSIGN_OR_RETURN(const DeviceFreeMemory m, device_free_memory(device));
    return AvailableMemory{
        m.free_bytes, str_cat(runtime::format_bytes(m.free_bytes), " free of ",
                              runtime::format_bytes(m.total_bytes), " on ", device_name(device))};
  }
  HYLA_ASSIGN_OR_RETURN(const runtime::HostMemory m, runtime::host_memory());
  return AvailableMemory{m.available_bytes,
                         str_cat(runtime::format_bytes(m.available_bytes), " available of ",
                                 runtime::format_bytes(m.total_bytes), " (", m.source, ")")};
}

}  // namespace hyla::cli
