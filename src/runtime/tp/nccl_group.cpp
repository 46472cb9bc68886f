#include "runtime/tp/nccl_group.h"

#include <cstdlib>
#include <set>

#include "core/device_memory.h"
#include "core/op_times.h"

#if HYLA_WITH_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace hyla::runtime {

bool nccl_built() {
#if HYLA_WITH_NCCL
  return true;
#else
  return false;
#endif
}

class NcclGroup::Member final : public model::AllReduce {
 public:
  Member(NcclGroup* group, int rank) : group_(group), rank_(rank) {}

  Status sum(const TensorView& x) override {
    NcclGroup& g = *group_;
    const Device device = g.devices_[size_t(rank_)];
    if (x.device() != device || x.dtype() != DType::kF32 || !x.is_contiguous())
      return invalid_argument("NcclGroup rank ", rank_, ": all-reduce of a ",
                              device_name(x.device()), " ", dtype_name(x.dtype()),
                              x.is_contiguous() ? "" : " strided", " tensor; rank ", rank_,
                              " adds contiguous f32 tensors on ", device_name(device));
#if HYLA_WITH_NCCL
    const OpScope scope("all_reduce", device, current_stream());
    const std::lock_guard<std::mutex> lock(g.mutex_);
    if (g.aborted_)
      return internal_error("NcclGroup rank ", rank_, ": the group was aborted (rank ",
                            g.failed_rank_, " failed)");
    const ncclResult_t result =
        ncclAllReduce(x.raw(), x.raw(), size_t(x.numel()), ncclFloat, ncclSum,
                      static_cast<ncclComm_t>(g.comms_[size_t(rank_)]),
                      static_cast<cudaStream_t>(current_stream().handle));
    if (result != ncclSuccess)
      return internal_error("NcclGroup rank ", rank_, ": ncclAllReduce of ", x.numel(),
                            " floats on ", device_name(device), ": ", ncclGetErrorString(result));
    return ok_status();
#else
    return unsupported("NcclGroup: this build has no NCCL");
#endif
  }

 private:
  NcclGroup* group_;
  int rank_;
};

Result<std::unique_ptr<NcclGroup>> NcclGroup::create(const std::vector<Device>& devices) {
  if (devices.empty()) return invalid_argument("NcclGroup: no devices, expected one per rank");
  std::set<int> seen;
  for (size_t r = 0; r < devices.size(); ++r) {
    if (!devices[r].is_cuda())
      return invalid_argument("NcclGroup: rank ", r, " is on ", device_name(devices[r]),
                              "; NCCL ranks are CUDA devices");
    if (!seen.insert(devices[r].index).second)
      return invalid_argument("NcclGroup: two ranks on ", device_name(devices[r]),
                              " (NCCL runs one rank per GPU)");
  }
#if HYLA_WITH_NCCL
  // Connections at creation rather than on the first collective, so that a sum's enqueue never
  // waits for another rank: it is short, and an abort (fail) can wait for it under mutex_.
  (void)setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);
  std::vector<int> list;
  for (const Device& d : devices) list.push_back(d.index);
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  const ncclResult_t result = ncclCommInitAll(comms.data(), int(list.size()), list.data());
  if (result != ncclSuccess)
    return internal_error("NcclGroup: ncclCommInitAll over ", list.size(),
                          " CUDA devices: ", ncclGetErrorString(result));
  std::unique_ptr<NcclGroup> group(new NcclGroup(devices));
  for (size_t r = 0; r < comms.size(); ++r) group->comms_[r] = comms[r];
  return group;
#else
  return unsupported(
      "NcclGroup: this build has no NCCL (tensor parallelism over CUDA devices "
      "needs nccl.h and libnccl when configuring)");
#endif
}

NcclGroup::NcclGroup(std::vector<Device> devices)
    : devices_(std::move(devices)), comms_(devices_.size(), nullptr) {
  for (int r = 0; r < ranks(); ++r) members_.push_back(std::make_unique<Member>(this, r));
}

NcclGroup::~NcclGroup() {
#if HYLA_WITH_NCCL
  for (size_t r = 0; r < comms_.size(); ++r)
    if (comms_[r] != nullptr) {
      const CurrentDevice on(devices_[r]);
      (void)ncclCommDestroy(static_cast<ncclComm_t>(comms_[r]));
    }
#endif
}

model::AllReduce& NcclGroup::rank(int r) { return *members_.at(size_t(r)); }

void NcclGroup::fail(int r) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_) return;
  aborted_ = true;
  failed_rank_ = r;
#if HYLA_WITH_NCCL
  for (size_t i = 0; i < comms_.size(); ++i)
    if (comms_[i] != nullptr) {
      const CurrentDevice on(devices_[i]);
      (void)ncclCommAbort(static_cast<ncclComm_t>(comms_[i]));
      comms_[i] = nullptr;
    }
#endif
}

RankGroupFactory nccl_group_factory() {
  return [](const std::vector<Device>& devices) -> Result<std::unique_ptr<RankGroup>> {
    HYLA_ASSIGN_OR_RETURN(std::unique_ptr<NcclGroup> group, NcclGroup::create(devices));
    return std::unique_ptr<RankGroup>(std::move(group));
  };
}

}  // namespace hyla::runtime
