// A request inside the engine, from add_request to its last event, and what a step tells about it.
//   Request     its tokens and Sampler, the memory it holds (slot, pages), where the scheduler has
//               it, and its prefix-cache and speculation state, each group apart
//   Scheduled   one sequence of a step's batch (a decode token or a prefill chunk)
//   TokenEvent  what one step did for one request: a token, a finish, or both
//   accept_token  a picked token into the request and its event, for plain and verify steps alike
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "model/batch.h"
#include "runtime/sampling.h"
#include "runtime/spec/ngram_drafter.h"

namespace hyla::runtime {

using RequestId = int64_t;

enum class FinishReason {
  kNone,       ///< not finished
  kStopToken,  ///< generated one of SamplingParams::stop_token_ids (it is the last token)
  kMaxTokens,  ///< generated max_new_tokens
  kCancelled,  ///< Engine::cancel
  kError,      ///< the step's forward failed, the request's logits were not finite, or its
               ///< sequence outgrew the whole KV pool; TokenEvent::error says why
};
const char* finish_reason_name(FinishReason reason);

/// What one step did for one request: a sampled token, a finish, or both.
struct TokenEvent {
  RequestId request = -1;
  int32_t token = -1;  ///< -1 when no token came with the event (cancel, error)
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  std::string error;  ///< reason == kError: what failed (names the request and the step)
  /// SamplingParams::logprobs: the token's log-probability (sampling.h says of which distribution).
  std::optional<double> logprob{};
  /// SamplingParams::top_logprobs > 0: that many most likely tokens, best first, ties -> lower id.
  std::vector<TokenLogprob> top_logprobs{};
  /// Prompt tokens taken from the prefix cache when the request was first admitted (0: none).
  int64_t cached_tokens = 0;
};

/// One request's life in the engine (waiting, then running; back to waiting when preempted).
struct Request {
  Request(RequestId id_, std::vector<int32_t> prompt_, const SamplingParams& params)
      : id(id_), prompt(std::move(prompt_)), sampler(params) {}

  // What it asks for and has so far.
  RequestId id;
  std::vector<int32_t> prompt;
  std::vector<int32_t> generated;
  Sampler sampler;

  // The memory it holds while running.
  int32_t slot = -1;           ///< -1 while waiting (or for a model without linear layers)
  std::vector<int32_t> pages;  ///< KV pages of the tokens so far, in token order
  int64_t processed = 0;       ///< tokens in the slot / pages (prompt and fed-back tokens)

  // The scheduler's view.
  /// Tokens to prefill before decoding: the prompt; after a preemption, prompt + generated.
  int64_t prefill_len = int64_t(prompt.size());
  int64_t admission = -1;  ///< when it was last admitted (the engine's count), for preemption
  bool admitted = false;

  // The prefix cache.
  int64_t cached = -1;  ///< prefix-cache tokens at its first admission (-1: not admitted yet)
  /// Where the prefill stops once to leave a snapshot where the tree branches (the end of what
  /// matched), 0 for none.
  int64_t branch = 0;

  // Speculative decoding.
  std::unique_ptr<NgramDrafter> drafter;  ///< the n-gram drafter over prompt + generated
  std::mt19937_64 spec_rng;               ///< the acceptance draws
  int64_t spec_k = 0;  ///< adaptive K: its next step's most drafts (0: not verified yet, K)
  /// The MTP head's drafts after the last step (for its next tokens), and the logit each won with.
  std::vector<int32_t> mtp_drafts;
  std::vector<float> mtp_draft_logits;

  bool prefill_done() const { return processed >= prefill_len; }
  /// The token at `position` of prompt + generated.
  int32_t token_at(int64_t position) const {
    const int64_t n = int64_t(prompt.size());
    return position < n ? prompt[size_t(position)] : generated[size_t(position - n)];
  }
  /// Its tokens so far: prompt, then generated.
  std::vector<int32_t> sequence() const;
  /// The prompt tokens the prefix cache gave it, for its events (0 before its first admission).
  int64_t cached_tokens() const { return cached < 0 ? 0 : cached; }
};

/// One sequence of the step's batch.
struct Scheduled {
  Request* request;
  int64_t begin;  ///< first new token's position (== request->processed)
  int64_t count;  ///< new tokens
};

/// Appends one sequence of `r` to `batch`: `tokens` at positions past, past + 1, ..., on r's state
/// slot and KV pages.
void add_sequence(model::Batch& batch, const Request& r, std::span<const int32_t> tokens,
                  int64_t past);

/// Appends a picked `token` to `r` (and to its drafter: one that cannot hold more stops drafting)
/// and returns the event that reports it, finished when it is a stop token or the
/// max_new_tokens-th. `logits` is the row it was picked from, read for its log-probabilities when
/// the request asks for them (else it may be empty).
TokenEvent accept_token(Request& r, int32_t token, std::span<const float> logits);

}  // namespace hyla::runtime
