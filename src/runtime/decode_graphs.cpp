// DecodeGraphs (see decode_graphs.h).
#include "runtime/decode_graphs.h"

#include <algorithm>

#include "core/device_memory.h"
#include "kernels/argmax.h"

namespace hyla::runtime {

namespace {

int64_t padded_sequences(int64_t B, int64_t max_sequences) {
  int64_t p = 1;
  while (p < B) {
    // 1, 2, 4, 8, 16, then 1.5x / 2x alternately: 24, 32, 48, 64, 96, 128, ...
    p = p < 16 ? p * 2 : ((p & (p - 1)) == 0 ? p + p / 2 : p / 3 * 4);
  }
  return std::min(p, std::max(max_sequences, B));
}

int64_t padded_width(int64_t pages) {
  int64_t w = 1;
  while (w < pages) w *= 2;
  return w;
}

}  // namespace

model::Batch pad_verify_tokens(const model::Batch& batch) {
  const int64_t B = batch.num_sequences();
  int32_t n = 1;
  for (int64_t b = 0; b < B; ++b)
    n = std::max(n, batch.cu_seqlens[size_t(b + 1)] - batch.cu_seqlens[size_t(b)]);
  model::Batch out = batch;
  out.tokens.clear();
  out.cu_seqlens.assign(1, 0);
  for (int64_t b = 0; b < B; ++b) {
    const int32_t begin = batch.cu_seqlens[size_t(b)], end = batch.cu_seqlens[size_t(b + 1)];
    out.tokens.insert(out.tokens.end(), batch.tokens.begin() + begin, batch.tokens.begin() + end);
    out.tokens.resize(out.tokens.size() + size_t(n - (end - begin)), 0);
    out.cu_seqlens.push_back(out.cu_seqlens.back() + n);
  }
  return out;
}

DecodeGraphs::DecodeGraphs(const model::Model& model, Stream stream, int64_t max_sequences)
    : model_(model), stream_(stream), max_sequences_(max_sequences) {}

DecodeGraphs::~DecodeGraphs() {
  for (auto& [key, shape] : shapes_) pinned_free(shape.host);
}

bool DecodeGraphs::supports(const model::ModelConfig& config) {
  if (config.attn_res_block_size > 0) return false;
  for (model::MixerKind k : config.mixers)
    if (k == model::MixerKind::kLatentAttention) return false;
  return true;
}

model::Batch DecodeGraphs::padded(const model::Batch& batch) const {
  const int64_t B = batch.num_sequences();
  const int64_t Bp = padded_sequences(B, max_sequences_);
  size_t pages = 1;
  for (const std::vector<int32_t>& t : batch.page_tables) pages = std::max(pages, t.size());
  const size_t width = size_t(padded_width(int64_t(pages)));
  // Tokens per sequence: 1 for a decode step, a verify step's most.
  model::Batch out = batch.verify ? pad_verify_tokens(batch) : batch;
  const int32_t n = out.cu_seqlens[1];
  for (std::vector<int32_t>& t : out.page_tables) t.resize(width, -1);
  for (int64_t b = B; b < Bp; ++b) {
    out.tokens.resize(out.tokens.size() + size_t(n), 0);
    out.cu_seqlens.push_back(out.cu_seqlens.back() + n);
    out.past.push_back(0);
    out.state_slots.push_back(-1);
    out.page_tables.push_back(std::vector<int32_t>(width, -1));
  }
  return out;
}

Status DecodeGraphs::queue_step(const model::Batch& padded, const model::BatchMemory& memory,
                                Shape& shape) {
  HYLA_ASSIGN_OR_RETURN(const Tensor logits, model_.forward_batch(padded, memory));
  const TensorView rows = shape.summary.view();
  const TensorView value_bits = rows.select(3);
  const int64_t B = value_bits.size(0), one = 1;
  const TensorView values(value_bits.raw(), DType::kF32, 1, &B, &one, value_bits.device());
  HYLA_RETURN_IF_ERROR(kernels::argmax({.logits = logits,
                                        .ids = rows.select(0),
                                        .non_finite = rows.select(1),
                                        .first_bad = rows.select(2),
                                        .first_bad_value = values}));
  device_copy_async(shape.host, Device::cpu(), rows.raw(), rows.device(),
                    size_t(shape.summary.numel()) * sizeof(int32_t));
  return ok_status();
}

Result<DecodeGraphs::Step> DecodeGraphs::run(const model::Batch& padded,
                                             const model::BatchMemory& memory,
                                             model::HostStaging& staging) {
  if (padded.verify && memory.verify == nullptr)
    return invalid_argument("DecodeGraphs::run: a verify step needs BatchMemory::verify");
  const int64_t Bp = padded.num_sequences(), R = padded.logits_all ? padded.cu_seqlens.back() : Bp;
  const int64_t width = int64_t(padded.page_tables.front().size());
  const std::tuple<int64_t, int64_t, int64_t> key{Bp, width,
                                                  padded.verify ? R / std::max<int64_t>(Bp, 1) : 0};
  if (!shapes_.contains(key) && shapes_.size() >= kMaxShapes) {
    auto oldest = shapes_.begin();
    for (auto it = shapes_.begin(); it != shapes_.end(); ++it)
      if (it->second.last_used < oldest->second.last_used) oldest = it;
    pinned_free(oldest->second.host);
    shapes_.erase(oldest);
    ++stats_.dropped;
  }
  Shape& shape = shapes_[key];
  shape.last_used = ++clock_;
  if (!shape.summary.defined()) {
    shape.summary = Tensor::empty({4, R}, DType::kI32, model_.device());
    shape.host = static_cast<int32_t*>(pinned_alloc(size_t(4 * R) * sizeof(int32_t)));
  }
  // A verify step writes its shape's record (the same tensors at every replay).
  model::BatchMemory verify_memory;
  const model::BatchMemory* step = &memory;
  if (padded.verify) {
    if (shape.record.mode != memory.verify->mode)
      shape.record = model::VerifyRecord{.mode = memory.verify->mode, .layers = {}};
    verify_memory = memory;
    verify_memory.verify = &shape.record;
    step = &verify_memory;
  }
  staging.reset();
  if (!shape.warmed) {
    const CurrentStream on(stream_);
    HYLA_RETURN_IF_ERROR(queue_step(padded, *step, shape));
    shape.warmed = true;
    ++stats_.eager;
  } else {
    if (!shape.graph.defined()) {
      HYLA_ASSIGN_OR_RETURN(shape.graph, CudaGraph::capture(stream_, [&] {
                              return queue_step(padded, *step, shape);
                            }));
      ++stats_.captures;
    } else {
      HYLA_RETURN_IF_ERROR(model_.stage_step(padded, staging));
    }
    HYLA_RETURN_IF_ERROR(shape.graph.launch(stream_));
    ++stats_.replays;
    if (padded.verify) ++stats_.verify_replays;
  }
  HYLA_RETURN_IF_ERROR(synchronize_stream(stream_));
  return Step{.summary = shape.host, .record = padded.verify ? &shape.record : nullptr};
}

}  // namespace hyla::runtime
