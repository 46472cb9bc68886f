// The engine's options: their checks and the memory they imply (see engine_options.h).
#include "runtime/engine_options.h"

#include <algorithm>
#include <functional>

#include "model/tensor_parallel.h"

namespace hyla::runtime {

Status check_engine_options(const EngineOptions& options, const model::Model& model) {
  if (options.max_batch_tokens < kPrefillAlign)
    return invalid_argument("Engine: max_batch_tokens is ", options.max_batch_tokens,
                            ", expected >= ", kPrefillAlign,
                            " (prefill chunks end on multiples of ", kPrefillAlign, " tokens)");
  if (options.max_running < 1)
    return invalid_argument("Engine: max_running is ", options.max_running, ", expected >= 1");
  const PrefixCacheOptions& cache = options.prefix_cache;
  if (cache.snapshot_interval < kPrefillAlign || cache.snapshot_interval % kPrefillAlign != 0)
    return invalid_argument("Engine: prefix_cache.snapshot_interval is ", cache.snapshot_interval,
                            ", expected a positive multiple of ", kPrefillAlign);
  if (cache.decode_interval < 0 || cache.max_path_snapshots < 0 || cache.host_bytes < 0 ||
      cache.max_path_weak_snapshots < 0 || cache.device_tier_bytes < 0)
    return invalid_argument("Engine: prefix_cache.decode_interval (", cache.decode_interval,
                            "), max_path_snapshots (", cache.max_path_snapshots,
                            "), max_path_weak_snapshots (", cache.max_path_weak_snapshots,
                            "), device_tier_bytes (", cache.device_tier_bytes, ") and host_bytes (",
                            cache.host_bytes, ") must be >= 0");
  const SpeculativeOptions& spec = options.speculative;
  if (spec.draft_tokens < 1 || spec.draft_tokens > kMaxDraftTokens)
    return invalid_argument("Engine: speculative.draft_tokens is ", spec.draft_tokens,
                            ", expected an integer in [1, ", kMaxDraftTokens, "]");
  HYLA_RETURN_IF_ERROR(validate(spec.ngram));
  if (spec.drafter == SpeculativeOptions::Drafter::kMtp && !model.has_mtp())
    return invalid_argument(
        "Engine: speculative.drafter is the MTP head, but the model has none (its config declares "
        "no mtp_num_hidden_layers, or its checkpoint holds no mtp.* tensors)");
  if (spec.drafter == SpeculativeOptions::Drafter::kDraftModel) {
    if (spec.draft_model == nullptr)
      return invalid_argument("Engine: speculative.drafter is the draft model, but none is given");
    if (spec.draft_model->device() != options.device)
      return invalid_argument("Engine: the draft model's weights are on ",
                              device_name(spec.draft_model->device()),
                              " but the engine's device is ", device_name(options.device));
    if (spec.draft_model->config().vocab_size != model.config().vocab_size)
      return invalid_argument("Engine: the draft model's vocabulary has ",
                              spec.draft_model->config().vocab_size, " tokens, the model's ",
                              model.config().vocab_size,
                              ": a draft model must share the model's tokenizer");
  }
  return ok_status();
}

MemoryPlanOptions memory_plan_options(const EngineOptions& options) {
  MemoryPlanOptions m;
  m.state.conv_dtype = options.conv_dtype;
  m.state.ssm_dtype = options.state_dtype;
  m.state.device = options.device;
  m.kv.page_size = options.page_size;
  m.kv.dtype = options.kv_dtype;
  m.kv.device = options.device;
  m.max_batch_tokens = options.max_batch_tokens;
  return m;
}

Result<MemorySizing> size_engine_memory(const model::ModelConfig& config,
                                        const EngineOptions& options,
                                        std::vector<int64_t> request_tokens) {
  std::sort(request_tokens.begin(), request_tokens.end(), std::greater<>());
  if (options.max_running >= 1 && int64_t(request_tokens.size()) > options.max_running)
    request_tokens.resize(size_t(options.max_running));
  if (options.tensor_parallel.ranks == 1)
    return size_memory(config, request_tokens, memory_plan_options(options));
  HYLA_ASSIGN_OR_RETURN(const model::ModelConfig rank,
                        model::shard_config(config, 0, options.tensor_parallel.ranks));
  return size_memory(rank, request_tokens, memory_plan_options(options));
}

}  // namespace hyla::runtime
