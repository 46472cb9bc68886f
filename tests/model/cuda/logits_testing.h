// What the model CUDA tests share to compare logits (header-only; model_cuda_test,
// linear_backends_cuda_test): the tolerance's unit (the reference's own spread, with the demo
// model's stand-in), the prompts' token ids and the gap that tells a near tie.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/test_files.h"  // golden_dir
#include "testing.h"

namespace hyla::testing {

/// The model's recorded fp32 spread (reference_logits_spread); the demo model records none (its
/// reference is greedy tokens only): it takes the largest spread of the golden sets (K3's, ~10x
/// the Qwen ones), a bound for a Qwen3.5 of the same layer kinds and a similar depth.
inline double logits_spread(const std::string& dir) {
  if (std::filesystem::exists(dir + "/reference_meta.json")) return reference_logits_spread(dir);
  double worst = 0;
  for (const std::string& g : golden_arch_dirs(golden_dir()))
    worst = std::max(worst, reference_logits_spread(g));
  return worst;
}

/// n token ids start, start + 37, ... modulo `vocab`.
inline std::vector<int32_t> spaced_ids(int32_t start, int64_t n, int32_t vocab) {
  std::vector<int32_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(int32_t((start + 37 * i) % vocab));
  return v;
}

/// Largest minus second-largest logit of row r of host logits [rows, V].
inline double top2_gap(const Tensor& logits, int64_t r) {
  const int64_t V = logits.size(1);
  std::vector<float> row(logits.host<float>() + r * V, logits.host<float>() + (r + 1) * V);
  std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<float>());
  return double(row[0]) - double(row[1]);
}

}  // namespace hyla::testing
