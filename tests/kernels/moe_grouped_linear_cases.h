// Cases of the grouped expert projection tests (CPU against float64, CUDA against CPU): expert row
// blocks with empty experts, rows outside every expert's block, a skewed routing, strided and
// misaligned x / y, and the per-element error bound both comparisons are sized from.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "testing.h"

namespace hyla::testing {

struct GroupedCase {
  int64_t E, K, Nout;
  int64_t rows = 1;  ///< a non-empty expert gets 1 to 2 * rows rows
  DType weight_dtype = DType::kBF16;
  int64_t lead = 0, tail = 0;   ///< rows before offsets[0] and after offsets[E] (no expert's)
  bool skewed = false;          ///< expert E / 2 gets 20 times its share
  int64_t pad = 0, offset = 0;  ///< x and y rows `pad` elements longer, starting `offset` in
  std::string name() const {
    return str_cat("E", E, "_K", K, "_Nout", Nout, "_rows", rows, "_", dtype_name(weight_dtype),
                   lead ? str_cat("_lead", lead) : "", tail ? str_cat("_tail", tail) : "",
                   skewed ? "_skewed" : "", pad ? str_cat("_pad", pad) : "",
                   offset ? str_cat("_offset", offset) : "");
  }
};

/// expert_offsets [E + 1]: offsets[0] = lead; each expert empty with probability 1/4, else
/// 1 to 2 * rows rows (x 20 for the skewed one). N = offsets[E] + tail.
inline std::vector<int32_t> random_offsets(const GroupedCase& c, std::mt19937& rng) {
  std::vector<int32_t> offsets{int32_t(c.lead)};
  for (int64_t e = 0; e < c.E; ++e) {
    int64_t count = rng() % 4 == 0 ? 0 : 1 + int64_t(rng() % uint32_t(2 * c.rows));
    if (c.skewed && e == c.E / 2) count = 20 * c.rows + 1;
    offsets.push_back(offsets.back() + int32_t(count));
  }
  return offsets;
}

/// Per output [N * Nout] (0 outside every expert's rows): the scales of its rounding errors,
/// sum_k |x[p, k] W[e(p), n, k]| (worst case) and sqrt(sum_k (x[p, k] W[e(p), n, k])^2)
/// (independent roundings).
struct ProductScales {
  std::vector<double> abs_sum, root_sum_sq;
};

inline ProductScales product_scales(const TensorView& x, const TensorView& weight,
                                    const std::vector<int32_t>& offsets) {
  const int64_t N = x.size(0), K = x.size(1), Nout = weight.size(1);
  const std::vector<double> xs = to_f64(x), ws = to_f64(weight);
  ProductScales s;
  s.abs_sum.assign(size_t(N * Nout), 0.0);
  s.root_sum_sq.assign(size_t(N * Nout), 0.0);
  for (size_t e = 0; e + 1 < offsets.size(); ++e)
    for (int64_t p = offsets[e]; p < offsets[e + 1]; ++p)
      for (int64_t n = 0; n < Nout; ++n) {
        double abs_sum = 0, sum_sq = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double xw = xs[size_t(p * K + k)] * ws[size_t((int64_t(e) * Nout + n) * K + k)];
          abs_sum += std::abs(xw);
          sum_sq += xw * xw;
        }
        s.abs_sum[size_t(p * Nout + n)] = abs_sum;
        s.root_sum_sq[size_t(p * Nout + n)] = std::sqrt(sum_sq);
      }
  return s;
}

}  // namespace hyla::testing
