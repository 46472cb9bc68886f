// One step's picks: per row of the step's logits, picked on their device (kernels/argmax.h), the
// greedy token, the finiteness census and the first bad value, brought to the host as one [4, B]
// i32 copy (or read from a decode graph's pinned copy); the full rows come to the host only when
// some request samples (temperature > 0) or asks for log-probabilities.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "core/error.h"
#include "core/tensor.h"

namespace hyla::runtime {

struct StepPicks {
  Tensor summary;  ///< [4, B] on the host, unless `rows` points into a graph's pinned copy
  const int32_t* rows = nullptr;
  int64_t stride = 0;  ///< elements between the summary's rows
  Tensor host_logits;  ///< [B, V] on the host, or undefined when no request needs its row there

  int32_t id(int64_t b) const { return rows[b]; }
  int32_t bad(int64_t b) const { return rows[stride + b]; }
  int32_t first_bad(int64_t b) const { return rows[2 * stride + b]; }
  float first_bad_value(int64_t b) const {
    float v;
    std::memcpy(&v, &rows[3 * stride + b], sizeof(v));
    return v;
  }
  /// Row b of the host logits; empty when they stayed on the device.
  std::span<const float> logits(int64_t b) const {
    if (!host_logits.defined()) return {};
    const int64_t V = host_logits.size(1);
    return std::span<const float>(host_logits.host<float>() + b * V, size_t(V));
  }
  /// How row b's bad logits are named in its request's error: the lowest bad column's value and
  /// the row's count ("NaN at token 17 (3 of 512 logits not finite)").
  std::string non_finite(int64_t b, int64_t vocab) const;
};

/// Picks every row of `logits` [B, V] f32 on their device; `host_rows` also brings the rows to the
/// host.
Result<StepPicks> pick(const Tensor& logits, bool host_rows);

}  // namespace hyla::runtime
