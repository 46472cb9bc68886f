// Token sampling (see sampling.h): greedy argmax, or temperature -> top-k -> top-p -> draw.
#include "runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <limits>
#include <utility>

namespace hyla::runtime {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kPosInf = std::numeric_limits<float>::infinity();

/// NaN counts as -inf: it is never picked, greedy or sampled.
float cleaned(float logit) { return std::isnan(logit) ? kNegInf : logit; }

}  // namespace

// Every value is a multiple of 2^-53, exactly representable.
double uniform_double(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

Status validate(const SamplingParams& params, int64_t vocab_size) {
  if (vocab_size < 1)
    return invalid_argument("sampling: vocab_size is ", vocab_size, ", expected >= 1");
  // `!(x >= 0)` also rejects NaN.
  if (!(params.temperature >= 0.0f) || !std::isfinite(params.temperature))
    return invalid_argument("sampling: temperature is ", params.temperature,
                            ", expected finite and >= 0 (0 = greedy)");
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f))
    return invalid_argument("sampling: top_p is ", params.top_p, ", expected in (0, 1] (1 = off)");
  if (params.top_k < 0 || params.top_k > vocab_size)
    return invalid_argument("sampling: top_k is ", params.top_k, ", expected in [0, ", vocab_size,
                            "] (0 = off)");
  if (params.max_new_tokens < 1)
    return invalid_argument("sampling: max_new_tokens is ", params.max_new_tokens,
                            ", expected >= 1");
  if (params.top_logprobs < 0 || params.top_logprobs > kMaxTopLogprobs)
    return invalid_argument("sampling: top_logprobs is ", params.top_logprobs, ", expected in [0, ",
                            kMaxTopLogprobs, "] (0 = off)");
  if (params.top_logprobs > 0 && !params.logprobs)
    return invalid_argument("sampling: top_logprobs is ", params.top_logprobs,
                            " but logprobs is off; top_logprobs needs logprobs = true");
  for (size_t i = 0; i < params.stop_token_ids.size(); ++i) {
    const int32_t token = params.stop_token_ids[i];
    if (token < 0 || token >= vocab_size)
      return out_of_range("sampling: stop_token_ids[", i, "] is ", token, ", expected in [0, ",
                          vocab_size, ") (the vocabulary)");
  }
  for (size_t i = 0; i < params.predicted_tokens.size(); ++i) {
    const int32_t token = params.predicted_tokens[i];
    if (token < 0 || token >= vocab_size)
      return out_of_range("sampling: predicted_tokens[", i, "] is ", token, ", expected in [0, ",
                          vocab_size, ") (the vocabulary)");
  }
  return ok_status();
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  HYLA_CHECK(params.temperature >= 0.0f && std::isfinite(params.temperature),
             "Sampler: temperature ", params.temperature, " (validate() the params first)");
  HYLA_CHECK(params.top_p > 0.0f && params.top_p <= 1.0f, "Sampler: top_p ", params.top_p,
             " (validate() the params first)");
  HYLA_CHECK(params.top_k >= 0, "Sampler: top_k ", params.top_k, " (validate() the params first)");
}

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, float temperature,
                             int64_t top) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  HYLA_CHECK(vocab > 0 && token >= 0 && token < vocab, "token_logprobs: token ", token,
             " outside a row of ", vocab, " logits");
  HYLA_CHECK(temperature >= 0.0f && top >= 0, "token_logprobs: temperature ", temperature, ", top ",
             top);
  // z = logit / T in double (T = 1 for greedy); log p = z - (max z + log sum exp(z - max z)).
  const double scale = temperature > 0.0f ? 1.0 / static_cast<double>(temperature) : 1.0;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double max_z = -kInf;
  for (float logit : logits) max_z = std::max(max_z, static_cast<double>(cleaned(logit)) * scale);
  double log_total = 0.0;  // log sum exp(z - max_z); a row of -inf only: every log p is -inf
  if (std::isfinite(max_z)) {
    double total = 0.0;
    for (float logit : logits)
      total += std::exp(static_cast<double>(cleaned(logit)) * scale - max_z);
    log_total = std::log(total);
  }
  // +inf logits share all the probability equally, as in Sampler::sample.
  const double infinite =
      max_z == kInf ? double(std::count(logits.begin(), logits.end(), kPosInf)) : 0.0;
  const auto logprob = [&](int32_t t) {
    const double z = static_cast<double>(cleaned(logits[size_t(t)])) * scale;
    if (infinite > 0.0) return z == kInf ? -std::log(infinite) : -kInf;
    return z - max_z - log_total;
  };
  TokenLogprobs out;
  out.logprob = logprob(token);
  // The `top` best in one pass: a sorted list (logit descending, id ascending) kept at <= top
  // entries by insertion, O(V * top) at worst, O(V) for most rows (few tokens beat the last kept).
  const size_t keep = static_cast<size_t>(std::min(top, vocab));
  if (keep == 0) return out;
  std::vector<std::pair<float, int32_t>> best;  // (cleaned logit, id)
  best.reserve(keep + 1);
  for (int32_t t = 0; t < vocab; ++t) {
    const float logit = cleaned(logits[size_t(t)]);
    // Ids come in ascending order, so a tie with the last kept never displaces it.
    if (best.size() == keep && !(logit > best.back().first)) continue;
    auto at = best.end();
    while (at != best.begin() && logit > std::prev(at)->first) --at;
    best.insert(at, {logit, t});
    if (best.size() > keep) best.pop_back();
  }
  out.top.reserve(keep);
  for (const auto& [logit, t] : best) out.top.push_back({t, logprob(t)});
  return out;
}

bool Sampler::is_stop(int32_t token) const {
  return std::find(params_.stop_token_ids.begin(), params_.stop_token_ids.end(), token) !=
         params_.stop_token_ids.end();
}

std::pair<int32_t, float> Sampler::argmax(std::span<const float> logits) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  HYLA_CHECK(vocab > 0, "Sampler: empty logits row");
  HYLA_CHECK(vocab <= std::numeric_limits<int32_t>::max(), "Sampler: vocab ", vocab,
             " does not fit int32 token ids");

  // Argmax, lowest id on ties (strict >; a NaN never compares greater, so it is never the max
  // unless it is logits[0], which cleaned() turns into -inf). An all -inf/NaN row leaves token 0.
  int32_t best = 0;
  float max_logit = cleaned(logits[0]);
  for (int32_t token = 1; token < vocab; ++token) {
    if (logits[token] > max_logit) {
      max_logit = logits[token];
      best = token;
    }
  }
  return {best, max_logit};
}

double Sampler::keep_candidates(std::span<const float> logits, float max_logit) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  // Candidates: every token with a finite logit, or, when some are +inf, only those, with equal
  // weight (the limit of a finite logit growing without bound). `>= lowest` drops -inf and NaN.
  candidates_.clear();
  if (max_logit == kPosInf) {
    for (int32_t token = 0; token < vocab; ++token)
      if (logits[token] == kPosInf) candidates_.push_back({0.0f, token, 0.0});
    max_logit = 0.0f;
  } else {
    constexpr float kLowest = std::numeric_limits<float>::lowest();
    for (int32_t token = 0; token < vocab; ++token)
      if (logits[token] >= kLowest) candidates_.push_back({logits[token], token, 0.0});
  }

  // A strict total order (logit descending, then id ascending): the kept set and the order of
  // every sum do not depend on how the standard library partitions or sorts. Temperature > 0
  // preserves this order, so it is also the order of the probabilities.
  const auto better = [](const Candidate& a, const Candidate& b) {
    return a.logit != b.logit ? a.logit > b.logit : a.token < b.token;
  };
  // softmax numerator in double: exp((z - max) / T) <= 1, and exactly 1 for the best token.
  const double temperature = params_.temperature;
  const auto weigh = [&](Candidate& c) {
    c.weight = std::exp((static_cast<double>(c.logit) - max_logit) / temperature);
    return c.weight;
  };
  const auto begin = candidates_.begin();
  const size_t num_candidates = candidates_.size();
  const bool nucleus = params_.top_p < 1.0f;
  double total = 0.0;
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < num_candidates) {
    // top-k: O(V + k log k); the k best, best first.
    const size_t k = static_cast<size_t>(params_.top_k);
    std::nth_element(begin, begin + static_cast<ptrdiff_t>(k), candidates_.end(), better);
    candidates_.resize(k);
    std::sort(begin, candidates_.end(), better);
    for (Candidate& c : candidates_) total += weigh(c);
    if (nucleus) {
      // top-p over the renormalised top-k: the best-first prefix whose probability reaches top_p.
      const double target = static_cast<double>(params_.top_p) * total;
      double kept = 0.0;
      size_t count = 0;
      while (count < k) {
        kept += candidates_[count++].weight;
        if (kept >= target) break;
      }
      candidates_.resize(count);
      total = kept;
    }
  } else {
    for (Candidate& c : candidates_) total += weigh(c);  // in id order
    if (nucleus) {
      // top-p alone: sort only as far as the nucleus reaches. The best 64 first, then 4x more of
      // the rest at each round, so a peaked distribution costs O(V) and a flat one O(V log V).
      const double target = static_cast<double>(params_.top_p) * total;
      double kept = 0.0;
      size_t count = 0;
      bool reached = false;
      while (!reached && count < num_candidates) {
        const size_t next = std::min(num_candidates, std::max<size_t>(64, 4 * count));
        const auto next_it = begin + static_cast<ptrdiff_t>(next);
        if (next < num_candidates)
          std::nth_element(begin + static_cast<ptrdiff_t>(count), next_it, candidates_.end(),
                           better);
        std::sort(begin + static_cast<ptrdiff_t>(count), next_it, better);
        while (count < next) {
          kept += candidates_[count++].weight;
          if (kept >= target) {
            reached = true;
            break;
          }
        }
      }
      candidates_.resize(count);
      total = kept;
    }
  }
  return total;
}

int32_t Sampler::sample(std::span<const float> logits) {
  auto [best, max_logit] = argmax(logits);
  if (params_.temperature == 0.0f || max_logit == kNegInf) return best;
  const double total = keep_candidates(logits, max_logit);

  // Draw: the first candidate whose cumulative weight exceeds u * total. Zero-weight candidates
  // can never be that one; rounding can leave u * total at the very end, hence the fallback to
  // the last candidate with weight.
  const double threshold = uniform_double(rng_) * total;
  double cumulative = 0.0;
  int32_t last_with_weight = candidates_.front().token;
  for (const Candidate& c : candidates_) {
    if (c.weight <= 0.0) continue;
    cumulative += c.weight;
    last_with_weight = c.token;
    if (threshold < cumulative) return c.token;
  }
  return last_with_weight;
}

void Sampler::probabilities(std::span<const float> logits, std::vector<double>& probs) {
  const auto [best, max_logit] = argmax(logits);
  probs.assign(logits.size(), 0.0);
  if (params_.temperature == 0.0f || max_logit == kNegInf) {
    probs[size_t(best)] = 1.0;
    return;
  }
  // Each kept candidate is drawn when u * total falls in its weight's share of [0, total).
  const double total = keep_candidates(logits, max_logit);
  for (const Candidate& c : candidates_) probs[size_t(c.token)] = c.weight / total;
}

}  // namespace hyla::runtime
