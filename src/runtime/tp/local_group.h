// N tensor-parallel ranks as threads of one process, on the CPU: the all-reduce adds the ranks'
// host tensors in rank order (the same bits on every rank, whatever the thread timing). For tests
// of the sharding (sharded == unsharded, model/tensor_parallel.h) and for running a sharded model
// where no NCCL is: the engine's default group (EngineOptions::tensor_parallel).
#pragma once

#include <atomic>
#include <barrier>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/all_reduce.h"
#include "runtime/tp/rank_group.h"

namespace hyla::runtime {

class LocalGroup final : public RankGroup {
 public:
  /// Errors: ranks < 1.
  static Result<std::unique_ptr<LocalGroup>> create(int ranks);
  ~LocalGroup() override;

  /// Rank r's communicator (r in [0, ranks)); valid while the group lives. Each rank's calls come
  /// from its own thread.
  model::AllReduce& rank(int r) override;
  int ranks() const override { return int(members_.size()); }
  /// abort(), then leave(r).
  void fail(int r) override;

  /// Makes the ranks' later sum() calls return an error instead of waiting for a rank that will
  /// not come. A rank whose step fails calls abort() and then leave(r), so that the ranks waiting
  /// in a sum are released (with an error) too.
  void abort();
  /// Rank r takes no further part (after abort(); its later sum() calls return errors).
  void leave(int r);

 private:
  class Member;
  explicit LocalGroup(int ranks);

  std::vector<std::unique_ptr<Member>> members_;
  std::barrier<> barrier_;
  std::vector<const float*> inputs_;  // each rank's x during a sum
  std::vector<int64_t> numels_;       // each rank's element count during a sum
  std::vector<float> total_;          // the sum, read by every rank before the next one
  std::atomic<bool> aborted_{false};
};

/// The RankGroupFactory of LocalGroup (the engine's default). Error: a rank on a device other
/// than the host, named.
RankGroupFactory local_group_factory();

}  // namespace hyla::runtime
