// The communicators of one tensor-parallel group (model/tensor_parallel.h): rank r's
// model::AllReduce, and how a rank that failed outside a sum releases the others. The engine's
// rank loop (runtime/engine_ranks.cpp) takes the group from a factory, so the CPU group
// (tp/local_group: ranks as threads adding host tensors) and a device group (NCCL) plug in alike.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "model/all_reduce.h"

namespace hyla::runtime {

class RankGroup {
 public:
  virtual ~RankGroup() = default;
  virtual int ranks() const = 0;
  /// Rank r's communicator (r in [0, ranks)), valid while the group lives; its sum() is called
  /// from rank r's thread only.
  virtual model::AllReduce& rank(int r) = 0;
  /// Rank r failed outside a sum (or stops for good): every rank waiting in a sum now, and every
  /// later sum of any rank, returns an error instead of waiting for r. Called from rank r's thread,
  /// or from any thread while no rank is inside a sum.
  virtual void fail(int r) = 0;
};

/// Makes the group of devices.size() ranks, rank r's tensors on devices[r].
using RankGroupFactory =
    std::function<Result<std::unique_ptr<RankGroup>>(const std::vector<Device>& devices)>;

}  // namespace hyla::runtime
