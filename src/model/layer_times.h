// Where a forward step's time goes, by layer kind (`hyla bench --profile`). forward_batch marks
// each boundary when BatchMemory::layer_times is set; each mark waits for the device, so the parts
// add up to the step's time but the step loses the overlap of one layer's launches with the next's
// work.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

#include "core/tensor.h"

namespace hyla::model {

enum class LayerPart : uint8_t {
  kEmbedding,
  kGatedDeltaNet,
  kKimiDelta,
  kFullAttention,
  kLatentAttention,
  kDenseMlp,
  kMoe,
  kAttnResidual,  ///< Attention-Residual mixes and snapshots
  kHead,          ///< final norm, last-token gather, lm_head
  kCount
};
const char* layer_part_name(LayerPart part);

class LayerTimes {
 public:
  /// Waits for `device` and starts the clock of the next part.
  void start(Device device);
  /// Waits for the device and adds the time since the last mark (or start) to `part`.
  void mark(LayerPart part);
  double seconds(LayerPart part) const { return seconds_[size_t(part)]; }
  double total_seconds() const;
  /// Adds `other`'s times to these.
  void add(const LayerTimes& other);
  void clear() { seconds_.fill(0.0); }

 private:
  using Clock = std::chrono::steady_clock;
  std::array<double, size_t(LayerPart::kCount)> seconds_{};
  Device device_{};
  Clock::time_point last_{};
};

}  // namespace hyla::model
