// CUDA graphs and streams (see cuda_graph.h; CUDA builds only).
#include <cuda_runtime.h>

#include <utility>

#include "core/cuda_graph.h"
#include "core/device_memory.h"

namespace hyla {

namespace {

Status cuda_error(const char* what, cudaError_t err) {
  return internal_error(what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
}

cudaStream_t as_cuda(Stream s) { return static_cast<cudaStream_t>(s.handle); }

}  // namespace

Result<Stream> create_stream() {
  cudaStream_t s = nullptr;
  if (const cudaError_t err = cudaStreamCreate(&s); err != cudaSuccess)
    return cuda_error("create_stream", err);
  return Stream{s};
}

void destroy_stream(Stream stream) {
  if (stream.handle) (void)cudaStreamDestroy(as_cuda(stream));
}

Status synchronize_stream(Stream stream) {
  if (const cudaError_t err = cudaStreamSynchronize(as_cuda(stream)); err != cudaSuccess)
    return cuda_error("synchronize_stream", err);
  return ok_status();
}

CudaGraph::~CudaGraph() {
  if (exec_) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) (void)cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
}

CudaGraph::CudaGraph(CudaGraph&& other) noexcept
    : graph_(std::exchange(other.graph_, nullptr)), exec_(std::exchange(other.exec_, nullptr)) {}

CudaGraph& CudaGraph::operator=(CudaGraph&& other) noexcept {
  if (this != &other) {
    CudaGraph dying(std::move(*this));
    graph_ = std::exchange(other.graph_, nullptr);
    exec_ = std::exchange(other.exec_, nullptr);
  }
  return *this;
}

Result<CudaGraph> CudaGraph::capture(Stream stream, const std::function<Status()>& body) {
  cudaError_t err = cudaStreamBeginCapture(as_cuda(stream), cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) return cuda_error("CUDA graph capture: begin", err);
  const Status status = [&] {
    const CurrentStream on(stream);
    return body();
  }();
  cudaGraph_t graph = nullptr;
  err = cudaStreamEndCapture(as_cuda(stream), &graph);
  if (!status.ok()) {
    if (graph) (void)cudaGraphDestroy(graph);
    return status;
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return cuda_error("CUDA graph capture: end", err);
  }
  CudaGraph out;
  out.graph_ = graph;
  cudaGraphExec_t exec = nullptr;
  // Allocations the graph makes and does not free (none in Hyla's steps) are freed at the next
  // launch instead of failing it.
  err = cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch);
  if (err != cudaSuccess) return cuda_error("CUDA graph instantiate", err);
  out.exec_ = exec;
  return Result<CudaGraph>(std::move(out));
}

Status CudaGraph::launch(Stream stream) const {
  if (!exec_) return internal_error("CudaGraph::launch: no graph captured");
  if (const cudaError_t err = cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), as_cuda(stream));
      err != cudaSuccess)
    return cuda_error("CUDA graph launch", err);
  return ok_status();
}

}  // namespace hyla
