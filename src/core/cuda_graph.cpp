// CUDA graphs in a build without CUDA: every call is refused (see cuda_graph.h; the CUDA build
// compiles cuda_graph.cu instead of these).
#include "core/cuda_graph.h"

#if !HYLA_WITH_CUDA
namespace hyla {

namespace {
Status no_cuda() { return unsupported("CUDA graphs: this build has no CUDA support"); }
}  // namespace

Result<Stream> create_stream() { return no_cuda(); }
void destroy_stream(Stream) {}
Status synchronize_stream(Stream) { return no_cuda(); }

CudaGraph::~CudaGraph() = default;
CudaGraph::CudaGraph(CudaGraph&&) noexcept = default;
CudaGraph& CudaGraph::operator=(CudaGraph&&) noexcept = default;
Result<CudaGraph> CudaGraph::capture(Stream, const std::function<Status()>&) { return no_cuda(); }
Status CudaGraph::launch(Stream) const { return no_cuda(); }

}  // namespace hyla
#endif
