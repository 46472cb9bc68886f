// Speculative decoding's acceptance rule for one request: the target model scored K draft tokens
// (and the position after them) in one step; how many drafts stand and which token comes next.
//   greedy (temperature 0): drafts stand while each equals its row's argmax; the next token is
//     the argmax of the row after them, so the output is plain greedy decoding token for token.
//   sampling: speculative rejection sampling (Leviathan et al. 2023, "Fast Inference from
//     Transformers via Speculative Decoding", Algorithm 1 / Theorem 1; Chen et al. 2023,
//     "Accelerating LLM Decoding with Speculative Sampling", Algorithm 2): draft x stands with
//     probability min(1, p(x) / q(x)); the first rejected one is replaced by a draw from
//     normalise(max(0, p - q)); when all stand, one more token is drawn from p of row K. Each
//     emitted token is then distributed exactly as plain sampling from p would give it.
// p is the distribution the request's Sampler draws from (Sampler::probabilities: temperature,
// top-k, top-p); q is what the drafter drew from: a point mass (n-gram, a greedy draft model) or
// a full row per draft (a sampling draft model).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "core/error.h"
#include "runtime/sampling.h"

namespace hyla::runtime {

/// The drafts of one request and the distributions they came from.
struct Drafts {
  std::span<const int32_t> tokens{};  ///< [K] token ids in [0, vocab)
  /// Empty: each draft is a point mass, q(tokens[i]) = 1. Otherwise [K, vocab] f32 row-major:
  /// row i holds the non-negative weights draft i was drawn from (normalised here by their sum,
  /// so a draft model's softmax may be off by rounding); tokens[i] must have weight > 0.
  std::span<const float> probs{};
};

/// The verdict: the tokens to emit, in order.
struct Acceptance {
  int64_t accepted = 0;         ///< drafts that stand, in [0, K]
  std::vector<int32_t> tokens;  ///< the accepted drafts, then one new token: accepted + 1 ids
};

/// Accepts or rejects `drafts` against the target's `logits` [K + 1, vocab] f32 row-major, where
/// row i scores the token after draft i - 1 (row 0: after the request's last accepted token; row
/// K: after every draft). `target` is the request's Sampler: temperature 0 takes the greedy rule
/// (no randomness used), else its Sampler::probabilities() are p. `rng` gives every draw (its
/// state advances, so repeated calls continue one reproducible stream): one uniform per draft
/// examined, one more for the new token, each the top 53 bits of one output (uniform_double).
/// The caller cuts `tokens` at a stop token or the length limit; the prefix stays correctly
/// distributed because each token's law holds given the ones before it.
///
/// Errors (nothing drawn): vocab outside [1, 2^31), logits not (K + 1) * vocab values, a draft
/// outside [0, vocab), probs neither empty nor K * vocab values, a negative or non-finite weight,
/// a row of weights summing to 0, a draft of weight 0.
///
/// Cost: greedy O((accepted + 1) * vocab); sampling adds Sampler::probabilities per row examined
/// and allocates one [vocab] f64 row per call.
Result<Acceptance> accept_drafts(std::span<const float> logits, int64_t vocab, const Drafts& drafts,
                                 Sampler& target, std::mt19937_64& rng);

}  // namespace hyla::runtime
