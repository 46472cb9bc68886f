// Tensor-parallel ranks on CUDA devices of one host, one process (NCCL's single-process clique,
// ncclCommInitAll): rank r's all-reduce is an in-place ncclAllReduce (f32 sum) on the calling
// thread's current stream, so it is ordered with the rank's forward pass. Every rank receives the
// same reduced bits. Built when CMake finds NCCL (nccl.h and libnccl; HYLA_WITH_NCCL); otherwise
// create() says the build lacks it.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "runtime/tp/rank_group.h"

namespace hyla::runtime {

/// True when this build has NCCL.
bool nccl_built();

class NcclGroup final : public RankGroup {
 public:
  /// One rank per device, rank r on devices[r]. Errors: a build without NCCL; a device that is
  /// not CUDA; two ranks on one device (NCCL runs one rank per GPU); NCCL's own (named).
  static Result<std::unique_ptr<NcclGroup>> create(const std::vector<Device>& devices);
  ~NcclGroup() override;

  int ranks() const override { return int(devices_.size()); }
  model::AllReduce& rank(int r) override;
  /// Aborts every communicator (ncclCommAbort, which also ends collectives still running on the
  /// devices); every later sum returns an error.
  void fail(int r) override;

 private:
  class Member;
  explicit NcclGroup(std::vector<Device> devices);

  std::vector<Device> devices_;
  std::vector<void*> comms_;  // ncclComm_t per rank; null once aborted
  std::vector<std::unique_ptr<Member>> members_;
  std::mutex mutex_;      // a sum's enqueue (never waits for a peer) against an abort
  bool aborted_ = false;  // under mutex_
  int failed_rank_ = -1;
};

/// The RankGroupFactory for EngineOptions::tensor_parallel.group: NcclGroup::create.
RankGroupFactory nccl_group_factory();

}  // namespace hyla::runtime
