// The decode steps of a CUDA engine as CUDA graphs: one graph per step shape (padded batch size,
// page-table width) holding the whole forward pass, the greedy pick (kernels/argmax.h) and the
// copy of its [4, B] summary to pinned host memory, so a step is one upload of the packed
// indices (part of the graph, from the engine's HostStaging), one graph launch and one wait.
//   shape:  B padded up to the next of 1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, ... (capped at the
//           engine's sequences per step), pad rows: token 0, state slot -1 (the linear layers skip
//           it), past 0, no pages (attention skips page -1 and writes nothing); every page table
//           padded with -1 to the next power of two of the longest.
//   first step of a shape: runs eagerly, padded (so every lazily made resource, e.g. cuBLASLt
//           scratch for that row count, exists before a capture); second: captured, then
//           launched; later: Model::stage_step packs the batch into the same staging, replay.
// Verify steps (speculative decoding, Batch::verify) replay the same way: every sequence padded to
// the step's most tokens (its last token and drafts, pad tokens 0 after them: their KV rows and
// records lie past what the commit keeps), the shape keyed by that count too. Each verify shape
// owns its record (model/verify.h): the capture writes there, every replay too, and the engine's
// commit reads it after the step.
// At most kMaxShapes shapes are kept (each graph holds its own scratch on the device): the least
// recently used one is dropped when a new shape comes.
// Only greedy decode steps without log-probabilities replay (sampling and logprobs need the
// logits on the host); models with Attention Residuals or MLA run eagerly (their forward sizes
// work from host values of the step).
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <utility>

#include "core/cuda_graph.h"
#include "model/model.h"

namespace hyla::runtime {

/// A verify step with every sequence padded to its most tokens (pad tokens 0 after its drafts):
/// the shape the fused verify kernel and the verify graphs take. Rows of logits and records past a
/// sequence's own tokens are never read.
model::Batch pad_verify_tokens(const model::Batch& batch);

struct DecodeGraphStats {
  int64_t captures = 0;        ///< graphs captured
  int64_t replays = 0;         ///< steps that replayed a graph (the capturing step included)
  int64_t verify_replays = 0;  ///< ... of which verify steps
  int64_t eager = 0;           ///< padded steps that ran eagerly (a shape's first)
  int64_t dropped = 0;         ///< shapes dropped to keep kMaxShapes
};

class DecodeGraphs {
 public:
  static constexpr size_t kMaxShapes = 32;

  /// `stream`: the engine's stream (core/cuda_graph.h create_stream), on which every step runs.
  DecodeGraphs(const model::Model& model, Stream stream, int64_t max_sequences);
  ~DecodeGraphs();
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  /// Whether graphs can hold this model's steps (see above).
  static bool supports(const model::ModelConfig& config);

  /// `batch` (a decode step, or a verify step) padded to its graph's shape.
  model::Batch padded(const model::Batch& batch) const;

  /// What a step left: the [4, R] summary of its R rows of logits (a decode step's sequences, a
  /// verify step's tokens): per row the greedy id, the non-finite count, the first non-finite
  /// column, its value's bits (kernels/argmax.h), in pinned host memory; for a verify step its
  /// record. Both valid until the next call.
  struct Step {
    const int32_t* summary = nullptr;
    model::VerifyRecord* record = nullptr;
  };
  /// Runs the step `padded` (from padded()). A verify step needs memory.verify, whose mode its
  /// record takes.
  Result<Step> run(const model::Batch& padded, const model::BatchMemory& memory,
                   model::HostStaging& staging);

  const DecodeGraphStats& stats() const { return stats_; }

 private:
  struct Shape {
    Tensor summary;              // [4, R] i32 on the device
    int32_t* host = nullptr;     // [4, R] pinned
    model::VerifyRecord record;  // verify shapes: the linear layers' record
    CudaGraph graph;
    bool warmed = false;  // the eager first step ran
    int64_t last_used = 0;
  };
  /// The forward pass, the pick and the summary's download, queued on the current stream.
  Status queue_step(const model::Batch& padded, const model::BatchMemory& memory, Shape& shape);

  const model::Model& model_;
  Stream stream_;
  int64_t max_sequences_;
  /// (Bp, page-table width, tokens per sequence; 0 for a decode step)
  std::map<std::tuple<int64_t, int64_t, int64_t>, Shape> shapes_;
  DecodeGraphStats stats_;
  int64_t clock_ = 0;  // runs so far: Shape::last_used
};

}  // namespace hyla::runtime
