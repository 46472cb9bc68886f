// The one collective tensor parallelism by head needs in a forward step (model/tensor_parallel.h):
// after each sublayer every rank holds a partial sum of the sublayer's output, and the ranks add
// them up. forward_batch calls it through BatchMemory::all_reduce; the communicators implement it
// (runtime/tp: the CPU group, ranks as threads of one process; the NCCL group, ranks on the CUDA
// devices of one host), so the model does not depend on any of them.
#pragma once

#include "core/error.h"
#include "core/tensor.h"

namespace hyla::model {

class AllReduce {
 public:
  virtual ~AllReduce() = default;
  /// x (f32, contiguous, on the rank's device) <- the sum over every rank of that rank's x. Every
  /// rank calls it the same number of times, in the same order, with the same shape; the sum is
  /// the same on every rank (bit for bit: the ranks' replicated parts stay identical). Errors: a
  /// shape or device the communicator cannot take, a rank that failed or left.
  virtual Status sum(const TensorView& x) = 0;
};

}  // namespace hyla::model
