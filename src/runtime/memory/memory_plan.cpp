// plan_memory (see memory_plan.h): the budget split and the limits it implies.
#include "runtime/memory/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>

#include "model/layers/attn_residual.h"
#include "model/tensor_parallel.h"

namespace hyla::runtime {

std::string format_bytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024 && bytes > -1024) return str_cat(bytes, " B");
  double value = double(bytes) / 1024.0;
  size_t unit = 0;
  while (std::fabs(value) >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f %s", value, kUnits[unit]);
  return text;
}

namespace {

std::string limit_string(int64_t n) {
  return n == kNoLimit ? std::string("unlimited") : str_cat(n);
}

}  // namespace

std::string MemoryPlan::summary() const {
  std::string s = str_cat(model_type, ": ", format_bytes(budget_bytes), " budget");
  if (state_slots > 0 && kv_pages > 0) s += str_cat(" (state:KV ratio ", state_ratio, ")");
  s += ": ";
  if (state_slots > 0)
    s += str_cat(state_slots, " state slots x ", format_bytes(bytes_per_slot), " = ",
                 format_bytes(state_bytes()), "; ");
  else
    s += "no state pool (no linear layer); ";
  if (kv_pages > 0)
    s += str_cat(kv_pages, " KV pages x ", page_size, " tokens x ",
                 format_bytes(bytes_per_kv_token), "/token = ", format_bytes(kv_bytes()), "; ");
  else
    s += "no KV pool (no attention layer); ";
  if (scratch_bytes > 0)
    s += str_cat("Attention-Residual scratch ", format_bytes(scratch_bytes_per_token), "/token x ",
                 scratch_bytes / scratch_bytes_per_token,
                 " tokens per step = ", format_bytes(scratch_bytes), "; ");
  s +=
      str_cat("at most ", limit_string(max_running_requests), " running requests; at most ",
              limit_string(max_context_tokens), " context tokens for one request (",
              format_bytes(budget_bytes - scratch_bytes - state_bytes() - kv_bytes()), " unused).");
  return s;
}

Result<TensorParallelPlan> plan_tensor_parallel(const model::ModelConfig& config, int ranks,
                                                int64_t budget_bytes, double state_ratio,
                                                const MemoryPlanOptions& options) {
  HYLA_ASSIGN_OR_RETURN(const model::ModelConfig rank_config,
                        model::shard_config(config, 0, ranks));
  TensorParallelPlan plan;
  plan.ranks = ranks;
  HYLA_ASSIGN_OR_RETURN(plan.rank, plan_memory(rank_config, budget_bytes, state_ratio, options));
  HYLA_ASSIGN_OR_RETURN(plan.whole, plan_memory(config, budget_bytes, state_ratio, options));
  return plan;
}

std::string TensorParallelPlan::summary() const {
  const auto ratio = [](int64_t a, int64_t b) {
    if (b <= 0) return std::string();
    char text[64];
    std::snprintf(text, sizeof(text), " (%.2fx the whole model's)", double(a) / double(b));
    return std::string(text);
  };
  std::string s = str_cat("tensor parallelism over ", ranks, " ranks (by head), per rank in ",
                          format_bytes(rank.budget_bytes), ":\n");
  s += str_cat("  state per sequence: ", format_bytes(rank.bytes_per_slot), " (whole model ",
               format_bytes(whole.bytes_per_slot), ")\n");
  s += str_cat("  KV per token: ", format_bytes(rank.bytes_per_kv_token), " (whole model ",
               format_bytes(whole.bytes_per_kv_token), ")\n");
  s += str_cat("  requests at once: ", rank.max_running_requests,
               ratio(rank.max_running_requests, whole.max_running_requests), "; ", rank.state_slots,
               " state slots, ", rank.kv_pages, " KV pages of ", rank.page_size, " tokens\n");
  s += str_cat("  one rank: ", rank.summary(), "\n");
  s += str_cat("  whole model, one device: ", whole.summary(), "\n");
  return s;
}

Result<MemoryPlan> plan_memory(const model::ModelConfig& config, int64_t budget_bytes,
                               double state_ratio, const MemoryPlanOptions& options) {
  if (budget_bytes <= 0)
    return invalid_argument("plan_memory: budget is ", budget_bytes, " bytes, expected > 0");
  if (!std::isfinite(state_ratio) || state_ratio < 0)
    return invalid_argument("plan_memory: state_ratio is ", state_ratio,
                            ", expected a finite ratio >= 0 (state bytes : KV bytes)");
  if (options.kv.page_size < 1)
    return invalid_argument("plan_memory: page_size is ", options.kv.page_size, ", expected >= 1");
  if (options.max_batch_tokens < 1)
    return invalid_argument("plan_memory: max_batch_tokens is ", options.max_batch_tokens,
                            ", expected >= 1");

  const bool has_linear = std::any_of(config.mixers.begin(), config.mixers.end(),
                                      [](model::MixerKind k) { return model::is_linear_mixer(k); });
  const bool has_attention = std::any_of(config.mixers.begin(), config.mixers.end(),
                                         [](auto k) { return !model::is_linear_mixer(k); });
  if (!has_linear && !has_attention)
    return invalid_argument("plan_memory: ", config.model_type, " has no layers");

  MemoryPlan plan;
  plan.model_type = config.model_type;
  plan.budget_bytes = budget_bytes;
  plan.state_ratio = state_ratio;
  plan.page_size = options.kv.page_size;
  plan.bytes_per_slot = has_linear ? StatePool::bytes_per_slot(config, options.state) : 0;
  plan.bytes_per_kv_token = has_attention ? KvPagePool::bytes_per_token(config, options.kv) : 0;
  // Per-step scratch first: a step of max_batch_tokens must run whatever the pools hold.
  plan.scratch_bytes_per_token = model::attn_res_scratch_bytes_per_token(config);
  plan.scratch_bytes = plan.scratch_bytes_per_token * options.max_batch_tokens;
  if (plan.scratch_bytes >= budget_bytes)
    return Status(ErrorCode::kOutOfMemory,
                  str_cat("plan_memory: budget ", format_bytes(budget_bytes),
                          " holds no pools after the Attention-Residual scratch of ",
                          format_bytes(plan.scratch_bytes), " (", options.max_batch_tokens,
                          " tokens per step x ", format_bytes(plan.scratch_bytes_per_token), ")"));
  const int64_t pool_budget = budget_bytes - plan.scratch_bytes;

  if (has_linear) {
    const int64_t state_budget =
        has_attention ? int64_t(std::floor(double(pool_budget) * state_ratio / (1.0 + state_ratio)))
                      : pool_budget;
    // Pools hand out int32 ids.
    plan.state_slots =
        std::min<int64_t>(state_budget / plan.bytes_per_slot, std::numeric_limits<int32_t>::max());
    if (plan.state_slots == 0)
      return Status(
          ErrorCode::kOutOfMemory,
          str_cat("plan_memory: budget ", format_bytes(budget_bytes),
                  " holds no state slot: one slot needs ", format_bytes(plan.bytes_per_slot), " (",
                  config.model_type, "; the state share is ", format_bytes(state_budget),
                  has_attention ? str_cat(" at state_ratio ", state_ratio) : "", ")"));
  }
  if (has_attention) {
    // The KV pool gets the rest, including what the whole slots left over.
    const int64_t kv_budget = pool_budget - plan.state_bytes();
    const int64_t page_bytes = plan.bytes_per_kv_token * plan.page_size;
    plan.kv_pages = std::min<int64_t>(kv_budget / page_bytes, std::numeric_limits<int32_t>::max());
    if (plan.kv_pages == 0)
      return Status(ErrorCode::kOutOfMemory,
                    str_cat("plan_memory: budget ", format_bytes(budget_bytes),
                            " holds no KV page: one page of ", plan.page_size, " tokens needs ",
                            format_bytes(page_bytes), " (", config.model_type, "; the KV share is ",
                            format_bytes(kv_budget), ")"));
  }

  plan.max_running_requests =
      std::min(has_linear ? plan.state_slots : kNoLimit, has_attention ? plan.kv_pages : kNoLimit);
  plan.max_context_tokens = has_attention ? plan.kv_pages * plan.page_size : kNoLimit;
  return plan;
}

}  // namespace hyla::runtime

namespace hyla::runtime {

Result<MemorySizing> size_memory(const model::ModelConfig& config,
                                 std::span<const int64_t> request_tokens,
                                 const MemoryPlanOptions& options) {
  if (request_tokens.empty()) return invalid_argument("size_memory: no request");
  if (options.kv.page_size < 1)
    return invalid_argument("size_memory: page_size is ", options.kv.page_size, ", expected >= 1");
  const bool has_linear = std::any_of(config.mixers.begin(), config.mixers.end(),
                                      [](model::MixerKind k) { return model::is_linear_mixer(k); });
  const bool has_attention = std::any_of(config.mixers.begin(), config.mixers.end(),
                                         [](auto k) { return !model::is_linear_mixer(k); });
  if (!has_linear && !has_attention)
    return invalid_argument("size_memory: ", config.model_type, " has no layers");
  // Sums in double (exact below 2^53), checked against int64 before any conversion.
  constexpr double kMaxBytes = 0.5 * double(std::numeric_limits<int64_t>::max());
  double pages = 0;
  for (size_t i = 0; i < request_tokens.size(); ++i) {
    if (request_tokens[i] < 1)
      return invalid_argument("size_memory: request ", i, " has ", request_tokens[i],
                              " tokens, expected >= 1");
    pages += std::ceil(double(request_tokens[i]) / double(options.kv.page_size));
  }
  const double slot = has_linear ? double(StatePool::bytes_per_slot(config, options.state)) : 0;
  const double page = has_attention ? double(KvPagePool::bytes_per_token(config, options.kv)) *
                                          double(options.kv.page_size)
                                    : 0;
  const double scratch = double(model::attn_res_scratch_bytes_per_token(config)) *
                         double(std::max<int64_t>(options.max_batch_tokens, 1));
  const double slack =
      0.25 * (has_linear && has_attention ? std::min(slot, page) : std::max(slot, page));
  const double state_share = has_linear ? slot * double(request_tokens.size()) + slack : 0;
  const double kv_share = has_attention ? page * pages + slack : 0;
  const double budget = std::ceil(scratch + state_share + kv_share);
  if (!(budget < kMaxBytes))
    return Status(ErrorCode::kOutOfMemory,
                  str_cat("size_memory: ", request_tokens.size(), " requests of ", pages,
                          " KV pages in all need more than ", format_bytes(int64_t(kMaxBytes))));
  MemorySizing sizing;
  sizing.budget_bytes = int64_t(budget);
  sizing.state_ratio = has_linear && has_attention ? state_share / kv_share : 0.9;
  HYLA_ASSIGN_OR_RETURN(const MemoryPlan plan,
                        plan_memory(config, sizing.budget_bytes, sizing.state_ratio, options));
  sizing.state_slots = plan.state_slots;
  sizing.kv_pages = plan.kv_pages;
  if ((has_linear && plan.state_slots < int64_t(request_tokens.size())) ||
      (has_attention && double(plan.kv_pages) < pages))
    return internal_error("size_memory: the plan of ", format_bytes(sizing.budget_bytes), " holds ",
                          plan.state_slots, " slots and ", plan.kv_pages, " pages, fewer than the ",
                          request_tokens.size(), " and ", pages, " it was sized for");
  return sizing;
}

}  // namespace hyla::runtime
