// Token sampling: one row of logits -> one token id, as Hugging Face's generate() does it
// (transformers GenerationMixin: greedy when do_sample is off, else TemperatureLogitsWarper ->
// TopKLogitsWarper -> TopPLogitsWarper -> softmax -> multinomial).
//   greedy (temperature == 0): argmax, ties -> lowest id; top_k / top_p are ignored
//   sampling: z = logits / temperature; keep the top_k best (ties -> lower id); keep the nucleus
//     (smallest prefix, best first, whose probability sums to >= top_p; at least one token);
//     renormalise; draw one token with a uniform u in [0, 1)
// Log-probabilities (SamplingParams::logprobs): of the distribution the token was drawn from
// before top-k / top-p, i.e. log_softmax(logits / temperature) over the whole vocabulary (OpenAI's
// "logits the token was sampled from", vLLM's processed logprobs); greedy (temperature 0) uses
// log_softmax(logits). Computed in double (token_logprobs).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "core/error.h"

namespace hyla::runtime {

/// How one request picks its tokens. validate() before constructing a Sampler.
struct SamplingParams {
  float temperature = 0.0f;  ///< >= 0, finite; 0 = greedy
  int64_t top_k = 0;         ///< in [0, vocab]; 0 = off
  float top_p = 1.0f;        ///< in (0, 1]; 1 = off
  uint64_t seed = 0;         ///< seeds the draws; the same seed and logits give the same tokens
  std::vector<int32_t> stop_token_ids{};  ///< each in [0, vocab); generating one ends the request
  int64_t max_new_tokens = 16;            ///< >= 1
  /// Report each chosen token's log-probability (TokenEvent::logprob).
  bool logprobs = false;
  /// Also report this many most likely tokens per step, best first (TokenEvent::top_logprobs);
  /// in [0, kMaxTopLogprobs], > 0 only with logprobs (as OpenAI's API). Capped at the vocabulary.
  int64_t top_logprobs = 0;
  /// The output the caller expects, mostly (OpenAI's "predicted outputs"): with n-gram
  /// speculation the drafter looks for the sequence's last tokens here as well as in the prompt
  /// and the tokens so far. Changes no token, only how many drafts stand. Each in [0, vocab).
  std::vector<int32_t> predicted_tokens{};
};

/// The most top_logprobs a request may ask for (OpenAI's limit).
inline constexpr int64_t kMaxTopLogprobs = 20;

/// One candidate token and its log-probability.
struct TokenLogprob {
  int32_t token = -1;
  double logprob = 0.0;
  bool operator==(const TokenLogprob&) const = default;
};

/// The log-probabilities of one step (see the top of this file for the distribution).
struct TokenLogprobs {
  double logprob = 0.0;             ///< of the chosen token
  std::vector<TokenLogprob> top{};  ///< the `top` best tokens, best first, ties -> lower id
};

/// log_softmax(logits / temperature) (temperature 0: of the logits themselves) at `token`, and
/// the min(top, vocab) most likely tokens, in double. -inf logits have log-probability -inf; NaN
/// is treated as -inf; +inf logits share all the probability (as in Sampler::sample) (Engine::step
/// ends a request whose row is not finite before asking). `token` must be in [0, logits.size()),
/// temperature >= 0, top >= 0.
TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, float temperature,
                             int64_t top);

/// The uniform double in [0, 1) that Sampler draws with: the top 53 bits of one 64-bit output of
/// `rng` times 2^-53 (every value exactly representable, the same on every platform).
double uniform_double(std::mt19937_64& rng);

/// Checks `params` against a vocabulary of `vocab_size` tokens; the message names the field, the
/// value and the allowed range.
Status validate(const SamplingParams& params, int64_t vocab_size);

/// Picks tokens for one request, one row of logits at a time.
///
/// Logits: -inf is a token with probability 0; NaN is treated as -inf (a NaN row is a model bug,
/// and sample() cannot return a Status, so it degrades rather than aborts: NaN tokens are never
/// picked); +inf tokens share all the probability equally. Engine::step never gets here with such
/// a row: it ends the request with an error first. A row in which every logit is -inf or
/// NaN gives token 0, as greedy's lowest-id tie rule does.
///
/// Top-k keeps exactly top_k tokens, breaking ties at the k-th value by lower id (HF keeps every
/// token tied with the k-th), so top_k = 1 and a tiny top_p are exactly greedy, ties included.
///
/// Reproducibility: the draws come from std::mt19937_64 seeded with `seed`, whose output sequence
/// the C++ standard fixes; the uniform is the top 53 bits of one 64-bit output times 2^-53 (not
/// std::uniform_real_distribution, whose algorithm is implementation-defined). Every sampling
/// call (temperature > 0) consumes exactly one output, greedy calls none, so the n-th sampled
/// token depends only on the seed, n and its logits. The softmax is computed in double with
/// candidates in a total order (logit descending, id ascending), so the result does not depend on
/// the standard library's sort either; the same seed and logits give the same tokens on every
/// platform, unless two libm exp() results differ in the last bit and the draw falls within that
/// difference of a boundary (about 1e-16 per draw).
///
/// Cost per call over V logits: O(V) greedy or unfiltered; O(V + k log k) with top_k; with top_p
/// alone, O(V) when the nucleus is small (it sorts only as far as the nucleus reaches), O(V log V)
/// at worst. The candidate scratch is kept between calls, so steady-state calls do not allocate.
class Sampler {
 public:
  /// `params` must satisfy validate() (checked here as far as it can be without the vocabulary).
  explicit Sampler(const SamplingParams& params);

  /// The next token for one row of logits [vocab] f32. A top_k above the row's size keeps all.
  int32_t sample(std::span<const float> logits);
  /// The distribution the next sample() call draws from for this row of logits: `probs` is
  /// resized to the row and holds each token's probability (0 for tokens top-k / top-p drop and
  /// for -inf / NaN logits; the kept ones sum to 1 up to rounding). Greedy (temperature 0), or a
  /// row with no finite or +inf logit: 1 on the token sample() returns, 0 elsewhere. Draws
  /// nothing: the seed's sequence is untouched. Speculative decoding's rejection sampling
  /// (spec/acceptance.h) takes it as the target distribution.
  void probabilities(std::span<const float> logits, std::vector<double>& probs);
  /// Whether `token` is one of the stop tokens.
  bool is_stop(int32_t token) const;

  const SamplingParams& params() const { return params_; }

 private:
  /// A token that may still be drawn: its logit (NaN cleaned to -inf, which is then dropped) and
  /// its unnormalised probability exp((logit - max) / temperature).
  struct Candidate {
    float logit;
    int32_t token;
    double weight;
  };

  /// The checked row's argmax (lowest id on ties) and its cleaned max logit.
  static std::pair<int32_t, float> argmax(std::span<const float> logits);
  /// Fills candidates_ with the tokens temperature -> top-k -> top-p keep and their weights (a row
  /// whose max logit is `max_logit`, finite or +inf); the sum of the kept weights.
  double keep_candidates(std::span<const float> logits, float max_logit);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<Candidate> candidates_;  // reused scratch: one entry per finite token
};

}  // namespace hyla::runtime
