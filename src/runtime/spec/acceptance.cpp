// Speculative acceptance (see acceptance.h): the greedy prefix match, or rejection sampling.
#include "runtime/spec/acceptance.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

namespace hyla::runtime {
namespace {

/// Draws a token with probability weight(token) / sum of weights, with a uniform from `rng`;
/// tokens in id order, the first whose cumulative weight exceeds u * total. Rounding can leave
/// u * total at the very end: then the last token with weight. `total` > 0.
template <typename Weight>
int32_t draw(int64_t vocab, const Weight& weight, double total, std::mt19937_64& rng) {
  const double threshold = uniform_double(rng) * total;
  double cumulative = 0.0;
  int32_t last_with_weight = 0;
  for (int32_t token = 0; token < vocab; ++token) {
    const double w = weight(token);
    if (w <= 0.0) continue;
    cumulative += w;
    last_with_weight = token;
    if (threshold < cumulative) return token;
  }
  return last_with_weight;
}

/// Checks the shapes and weights; the sum of each draft row's weights into `q_totals`.
Status check(std::span<const float> logits, int64_t vocab, const Drafts& drafts,
             std::vector<double>& q_totals) {
  const int64_t k = int64_t(drafts.tokens.size());
  if (vocab < 1 || vocab > std::numeric_limits<int32_t>::max())
    return invalid_argument("accept_drafts: vocab is ", vocab, ", expected in [1, 2^31)");
  if (int64_t(logits.size()) != (k + 1) * vocab)
    return invalid_argument("accept_drafts: logits hold ", logits.size(),
                            " values, expected (K + 1) * vocab = ", (k + 1) * vocab, " for K = ", k,
                            " drafts, vocab ", vocab);
  for (int64_t i = 0; i < k; ++i) {
    const int32_t token = drafts.tokens[size_t(i)];
    if (token < 0 || token >= vocab)
      return out_of_range("accept_drafts: draft ", i, " is token ", token, ", expected in [0, ",
                          vocab, ")");
  }
  if (drafts.probs.empty()) return ok_status();
  if (int64_t(drafts.probs.size()) != k * vocab)
    return invalid_argument("accept_drafts: draft probs hold ", drafts.probs.size(),
                            " values, expected 0 (point masses) or K * vocab = ", k * vocab);
  q_totals.assign(size_t(k), 0.0);
  for (int64_t i = 0; i < k; ++i) {
    const std::span<const float> row = drafts.probs.subspan(size_t(i * vocab), size_t(vocab));
    for (int64_t token = 0; token < vocab; ++token) {
      const float w = row[size_t(token)];
      if (!(w >= 0.0f) || !std::isfinite(w))
        return invalid_argument("accept_drafts: draft probs[", i, ", ", token, "] is ", w,
                                ", expected finite and >= 0");
      q_totals[size_t(i)] += w;
    }
    if (!(q_totals[size_t(i)] > 0.0))
      return invalid_argument("accept_drafts: draft probs row ", i, " sums to 0, expected > 0");
    const int32_t token = drafts.tokens[size_t(i)];
    if (!(row[size_t(token)] > 0.0f))
      return invalid_argument("accept_drafts: draft ", i, " is token ", token,
                              " but its draft probability is 0 (it cannot have been drawn)");
  }
  return ok_status();
}

}  // namespace

Result<Acceptance> accept_drafts(std::span<const float> logits, int64_t vocab, const Drafts& drafts,
                                 Sampler& target, std::mt19937_64& rng) {
  std::vector<double> q_totals;
  HYLA_RETURN_IF_ERROR(check(logits, vocab, drafts, q_totals));
  const int64_t k = int64_t(drafts.tokens.size());
  const auto row = [&](int64_t i) { return logits.subspan(size_t(i * vocab), size_t(vocab)); };
  Acceptance out;
  out.tokens.reserve(size_t(k + 1));

  if (target.params().temperature == 0.0f) {
    // Greedy: sample() is the argmax (lowest id on ties) and draws nothing.
    for (int64_t i = 0; i < k; ++i) {
      const int32_t best = target.sample(row(i));
      out.tokens.push_back(best);
      if (best != drafts.tokens[size_t(i)]) return out;
      ++out.accepted;
    }
    out.tokens.push_back(target.sample(row(k)));
    return out;
  }

  std::vector<double> p;
  const auto draw_from_p = [&] {
    double total = 0.0;
    for (double w : p) total += w;
    return draw(
        vocab, [&](int32_t token) { return p[size_t(token)]; }, total, rng);
  };
  for (int64_t i = 0; i < k; ++i) {
    target.probabilities(row(i), p);
    const int32_t x = drafts.tokens[size_t(i)];
    // q: the normalised weights of draft row i, or a point mass on x.
    const auto q = [&](int32_t token) -> double {
      if (drafts.probs.empty()) return token == x ? 1.0 : 0.0;
      return double(drafts.probs[size_t(i * vocab + token)]) / q_totals[size_t(i)];
    };
    // Accept with probability min(1, p(x) / q(x)): u < p / q, with q(x) > 0 (checked).
    if (uniform_double(rng) * q(x) < p[size_t(x)]) {
      out.tokens.push_back(x);
      ++out.accepted;
      continue;
    }
    // Rejected: the replacement comes from max(0, p - q), normalised. A rejection needs
    // p(x) < q(x), and both sum to 1, so that mass is > 0 in exact arithmetic; should rounding
    // leave none, the draw falls back to p.
    const auto residual = [&](int32_t token) { return std::max(0.0, p[size_t(token)] - q(token)); };
    double total = 0.0;
    for (int32_t token = 0; token < vocab; ++token) total += residual(token);
    out.tokens.push_back(total > 0.0 ? draw(vocab, residual, total, rng) : draw_from_p());
    return out;
  }
  // Every draft stands: the bonus token from p of row K.
  target.probabilities(row(k), p);
  out.tokens.push_back(draw_from_p());
  return out;
}

}  // namespace hyla::runtime
