// The chi-square law's upper tail and critical values, for the goodness-of-fit tests of sampled
// tokens (runtime/spec_test.cpp, runtime/speculative_test.cpp).
#pragma once

#include <cmath>
#include <cstdint>

namespace hyla::testing {

/// P(X >= x) for X ~ chi-square with `dof` degrees of freedom: Q(x; 1) = erfc(sqrt(x / 2)),
/// Q(x; 2) = exp(-x / 2), and Q(x; k + 2) = Q(x; k) + (x / 2)^(k / 2) e^(-x / 2) / Gamma(k / 2 +
/// 1).
inline double chi_square_tail(double x, int64_t dof) {
  const double half = x / 2.0;
  const bool odd = dof % 2 == 1;
  double tail = odd ? std::erfc(std::sqrt(half)) : std::exp(-half);
  for (int64_t k = odd ? 1 : 2; k + 2 <= dof; k += 2)
    tail += std::exp(double(k) / 2.0 * std::log(half) - half - std::lgamma(double(k) / 2.0 + 1.0));
  return tail;
}

/// The critical value c with P(X >= c) = alpha, by bisection (the tail falls as x grows; every
/// dof the tests use has c far below 2000).
inline double chi_square_critical(int64_t dof, double alpha) {
  double lo = 0.0, hi = 2000.0;
  for (int step = 0; step < 200; ++step) {
    const double mid = (lo + hi) / 2.0;
    (chi_square_tail(mid, dof) > alpha ? lo : hi) = mid;
  }
  return hi;
}

}  // namespace hyla::testing
