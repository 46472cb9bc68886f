// A request's bookkeeping (see request.h).
#include "runtime/request.h"

namespace hyla::runtime {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStopToken: return "stop_token";
    case FinishReason::kMaxTokens: return "max_tokens";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

std::vector<int32_t> Request::sequence() const {
  std::vector<int32_t> tokens = prompt;
  tokens.insert(tokens.end(), generated.begin(), generated.end());
  return tokens;
}

void add_sequence(model::Batch& batch, const Request& r, std::span<const int32_t> tokens,
                  int64_t past) {
  if (batch.cu_seqlens.empty()) batch.cu_seqlens.push_back(0);
  batch.tokens.insert(batch.tokens.end(), tokens.begin(), tokens.end());
  batch.cu_seqlens.push_back(int32_t(batch.tokens.size()));
  batch.past.push_back(past);
  batch.state_slots.push_back(r.slot);
  batch.page_tables.push_back(r.pages);
}

TokenEvent accept_token(Request& r, int32_t token, std::span<const float> logits) {
  const SamplingParams& params = r.sampler.params();
  TokenEvent event;
  event.request = r.id;
  event.token = token;
  event.cached_tokens = r.cached_tokens();
  if (params.logprobs) {
    TokenLogprobs lp = token_logprobs(logits, token, params.temperature, params.top_logprobs);
    event.logprob = lp.logprob;
    event.top_logprobs = std::move(lp.top);
  }
  r.generated.push_back(token);
  if (r.drafter && !r.drafter->append(std::span<const int32_t>(&token, 1)).ok()) r.drafter.reset();
  if (r.sampler.is_stop(token))
    event.reason = FinishReason::kStopToken;
  else if (int64_t(r.generated.size()) >= params.max_new_tokens)
    event.reason = FinishReason::kMaxTokens;
  event.finished = event.reason != FinishReason::kNone;
  return event;
}

}  // namespace hyla::runtime
