// CUDA graphs and streams for the engine: the work a function queues on a stream, captured once
// and replayed with one launch (no per-kernel launch cost, no host work between kernels). The
// capture is thread-local: only calls of the capturing thread are recorded, and one that cannot
// be (a synchronous copy, a device-wide wait) fails the capture. In a build without CUDA every
// call answers `unsupported`.
#pragma once

#include <functional>
#include <memory>

#include "core/error.h"
#include "core/tensor.h"

namespace hyla {

/// A new CUDA stream on the current device that orders with the legacy default stream (so
/// synchronous copies after its work see it), or an error.
Result<Stream> create_stream();
void destroy_stream(Stream stream);
/// Waits until everything queued on `stream` has run.
Status synchronize_stream(Stream stream);

class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(CudaGraph&& other) noexcept;
  CudaGraph& operator=(CudaGraph&& other) noexcept;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  /// Captures what `body` queues on `stream` (it runs under CurrentStream(stream), so kernels
  /// given Stream{} and stream-ordered allocations land there) and instantiates it. Nothing runs
  /// yet: launch() runs it. Errors: body's own, or the capture's (the message names the CUDA
  /// error).
  static Result<CudaGraph> capture(Stream stream, const std::function<Status()>& body);

  /// Queues one replay on `stream`.
  Status launch(Stream stream) const;
  bool defined() const { return exec_ != nullptr; }

 private:
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
};

}  // namespace hyla
